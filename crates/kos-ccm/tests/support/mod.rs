//! What the controller tests share: their error type and polling with a generous deadline (never a
//! timing assertion: only a loaded machine gets near it).

// Each test binary compiles this module and uses part of it.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

pub type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Far more than any step needs on an idle machine.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// Polls `check` until it returns `Some`, or fails after [`DEADLINE`] saying what it waited for.
pub async fn wait_for<T>(what: &str, mut check: impl FnMut() -> R<Option<T>>) -> R<T> {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = check()? {
            return Ok(v);
        }
        if Instant::now() > end {
            return Err(format!("timed out waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The async flavour, for checks that ask the cloud.
pub async fn wait_for_async<T, F, Fut>(what: &str, mut check: F) -> R<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = R<Option<T>>>,
{
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if Instant::now() > end {
            return Err(format!("timed out waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
