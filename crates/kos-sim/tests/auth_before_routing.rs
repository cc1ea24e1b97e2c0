//! Every service but Keystone runs keystonemiddleware before its router, so what a caller without
//! a valid token learns is the same for every path under a service's versioned URL: a 401. Only
//! the roots (and Nova's version document) answer anyone. The table is minicloud's (2026.2
//! services, measured with curl on 2026-11-30), at kos-sim's devstack-style prefixes.

mod common;

use common::Harness;

/// (path, status with a token, status without)
const ANSWERS: &[(&str, u16, u16)] = &[
    ("/compute/", 200, 200),
    ("/compute/v2.1/", 200, 200),
    ("/compute/v2.1/nosuch", 404, 401),
    ("/network/", 200, 200),
    ("/network/v2.0/", 200, 401),
    ("/network/v2.0/nosuch", 404, 401),
    ("/load-balancer/", 200, 200),
    ("/load-balancer/v2", 200, 401),
    ("/load-balancer/v2/", 200, 401),
    ("/load-balancer/v2.0/", 200, 401),
    ("/load-balancer/v2/nosuch", 404, 401),
    ("/volume/", 300, 300),
    ("/volume/v3", 302, 401),
    ("/volume/v3/", 200, 401),
    ("/volume/v3/nosuch", 404, 401),
    ("/image/v2/nosuch", 404, 401),
];

#[tokio::test]
async fn a_caller_without_a_token_gets_the_401_before_any_404() {
    let h = Harness::new().await;
    // Redirects are the caller's to follow: the 302 itself is the answer.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let mut wrong = Vec::new();
    for (path, with, without) in ANSWERS {
        let get = |token: Option<&str>| {
            let mut r = http.get(h.url(path));
            if let Some(t) = token {
                r = r.header("x-auth-token", t);
            }
            r.send()
        };
        let got_with = get(Some(&h.token)).await.expect("answer").status().as_u16();
        let got_without = get(None).await.expect("answer").status().as_u16();
        if (got_with, got_without) != (*with, *without) {
            wrong.push(format!(
                "{path}: {got_with}/{got_without}, a real cloud {with}/{without}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[tokio::test]
async fn cinder_s_v3_redirects_to_its_version_document() {
    let h = Harness::new().await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let r = http
        .get(h.url("/volume/v3"))
        .header("x-auth-token", &h.token)
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status().as_u16(), 302);
    let location = r
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert_eq!(location, h.url("/volume/v3/"));
}
