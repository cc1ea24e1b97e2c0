//! The runs at once against one cloud project. Every run takes one of the project's
//! `--max-runs-per-project` slots (they share its rate limit). A resync of a converged Cluster
//! (Ready at its generation: nothing to do but look) first takes one of half as many resync
//! permits, so a fleet's resyncs never hold every slot while Clusters wait to be made, changed or
//! deleted: with 1000 Clusters whose resync turns take 3 s each, the default 600 s period alone
//! keeps five slots busy.

use std::sync::Arc;

use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};

/// What a run is, for the slot it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// A Cluster to make, change, repair or delete, or one whose last turn failed.
    Work,
    /// A converged Cluster looked at again.
    Resync,
}

/// One cloud project's slots.
#[derive(Debug)]
pub struct Slots {
    all: Arc<Semaphore>,
    resyncs: Arc<Semaphore>,
}

/// A slot held for one run; let go when dropped.
#[derive(Debug)]
pub struct Slot {
    _all: OwnedSemaphorePermit,
    _resync: Option<OwnedSemaphorePermit>,
}

impl Slots {
    /// `runs` slots (at least one), of which resyncs hold at most half (at least one).
    #[must_use]
    pub fn new(runs: usize) -> Slots {
        let runs = runs.max(1);
        Slots {
            all: Arc::new(Semaphore::new(runs)),
            resyncs: Arc::new(Semaphore::new(runs.div_ceil(2))),
        }
    }

    /// Waits for a slot for `turn`.
    ///
    /// # Errors
    /// Never while the slots live (a semaphore is never closed).
    pub async fn take(&self, turn: Turn) -> Result<Slot, AcquireError> {
        let resync = match turn {
            Turn::Resync => Some(Arc::clone(&self.resyncs).acquire_owned().await?),
            Turn::Work => None,
        };
        let all = Arc::clone(&self.all).acquire_owned().await?;
        Ok(Slot {
            _all: all,
            _resync: resync,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(f: &mut (impl Future<Output = Result<Slot, AcquireError>> + Unpin)) -> Option<Slot> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match std::pin::Pin::new(f).poll(&mut cx) {
            std::task::Poll::Ready(r) => Some(r.expect("open")),
            std::task::Poll::Pending => None,
        }
    }

    /// With four slots, resyncs hold two and the other two stay for work; a resync waits for a
    /// resync permit even while a slot is free, and work never waits for one.
    #[tokio::test]
    async fn resyncs_hold_at_most_half_the_slots() {
        let slots = Slots::new(4);
        let r1 = slots.take(Turn::Resync).await.expect("first resync");
        let r2 = slots.take(Turn::Resync).await.expect("second resync");
        let mut r3 = Box::pin(slots.take(Turn::Resync));
        assert!(taken(&mut r3).is_none(), "a third resync must wait");
        let w1 = slots.take(Turn::Work).await.expect("work");
        let w2 = slots.take(Turn::Work).await.expect("work");
        let mut w3 = Box::pin(slots.take(Turn::Work));
        assert!(taken(&mut w3).is_none(), "every slot is held");
        drop(r1);
        // The freed slot goes to whoever waits for it first: the work waits on `all` alone.
        let w3 = taken(&mut w3).expect("work takes the freed slot");
        assert!(
            taken(&mut r3).is_none(),
            "the resync has its permit but no slot"
        );
        drop((r2, w1, w2, w3));
        assert!(taken(&mut r3).is_some());
    }

    #[tokio::test]
    async fn one_slot_serves_both() {
        let slots = Slots::new(1);
        drop(slots.take(Turn::Resync).await.expect("resync"));
        drop(slots.take(Turn::Work).await.expect("work"));
        assert_eq!(Slots::new(0).all.available_permits(), 1);
    }
}
