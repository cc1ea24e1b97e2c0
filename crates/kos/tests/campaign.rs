//! Issue 12, the campaign: what the fault campaigns against the binaries did, in the test suite. Each
//! run gives `kos up` a random mix of what a busy or broken cloud does (5xx, 429 with and without
//! Retry-After, Octavia's busy 409, answers lost after the side effect, expired tokens, a strict rate
//! limit; since issue 20 also one server create refused with 400, security-group rules created with
//! their answers lost, a boot that loses Nova's scheduling race, single-server GETs answering 404, and
//! tokens that keep expiring, a load balancer slower than the bootstrap's patience, and the CNI
//! manifest's host unreachable for a while). The shapes and how to replay a seed are listed in
//! docs/testing.md.
//! A broken cloud's run usually gets a `kill -9` at a random moment; a busy cloud's run must
//! converge by itself, only slower. Then the cloud is healthy again and ONE plain `kos up` must
//! converge the cluster, with no duplicate; a `kos down` (itself killed at times, then run again) must
//! leave nothing behind.
//!
//! Each faulted run's output is timed: the longest stretch without a line is printed, and one over
//! two minutes fails the campaign (kos says it is still working after 30 s of silence).
//!
//! The seed is printed first: `KOS_CAMPAIGN_SEED=<seed>` replays the same mixes and kill times (a
//! loaded machine can still move where a kill lands). `KOS_CAMPAIGN_RUNS` sets the number of runs.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::{Value, json};
use support::{admin, code, example, isolated, kill, kos, leftovers, serve_with, spawn, text};

/// Runs in CI: enough to meet each kind of fault several times in a few minutes on two cores.
const DEFAULT_RUNS: u32 = 6;

/// The cluster of a run: the minimal example (floating IP), or three control planes behind a load
/// balancer with workers on boot volumes (Octavia and Cinder in play).
fn specs(dir: &Path) -> [PathBuf; 2] {
    let minimal = example("minimal.yaml");
    let ha = std::fs::read_to_string(&minimal)
        .expect("example")
        .replace("    type: floatingIP", "    type: loadBalancer")
        .replace("    count: 1\n", "    count: 3\n")
        .replace(
            "      count: 2\n",
            "      count: 2\n      bootVolume:\n        sizeGB: 20\n",
        );
    let ha_path = dir.join("ha.yaml");
    std::fs::write(&ha_path, ha).expect("write spec");
    [minimal, ha_path]
}

/// One fault of a mix, as the simulator takes it, and how it reads in the output.
struct Fault {
    rule: Value,
    what: String,
    /// Where the simulator takes it: a fault rule, a slower cloud, or an internet outage.
    via: Via,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Via {
    /// `POST /_sim/faults`.
    Rule,
    /// `PUT /_sim/latency`: the cloud turns slow (Octavia under load).
    Latency,
    /// `PUT /_sim/internet` for this long from the run's start: the servers cannot download what
    /// matches, then they can again.
    Outage(Duration),
}

impl Via {
    fn set(self, base: &str, body: Value, what: &str) {
        let (method, path, want) = match self {
            Via::Rule => (Method::POST, "/_sim/faults", 201),
            Via::Latency => (Method::PUT, "/_sim/latency", 200),
            Via::Outage(_) => (Method::PUT, "/_sim/internet", 200),
        };
        let (status, answer) = admin(base, method, path, Some(body));
        assert_eq!(status, want, "{what}: {answer}");
    }
}

impl Fault {
    fn rule(rule: Value, what: String) -> Fault {
        Fault {
            rule,
            what,
            via: Via::Rule,
        }
    }
}

const CREATES: &[&str] = &[
    "^/compute/v2.1/servers$",
    "^/compute/v2.1/os-server-groups$",
    "^/network/v2.0/(networks|subnets|routers|ports|security-groups|security-group-rules|floatingips)$",
    "^/load-balancer/v2/lbaas/(loadbalancers|listeners|pools|healthmonitors)$",
    "^/volume/v3/[^/]+/volumes$",
];
const READS: &[&str] = &[
    "^/compute/v2.1/servers/detail",
    "^/network/v2.0/",
    "^/load-balancer/v2/lbaas/",
    "^/volume/v3/[^/]+/volumes/detail",
];

fn pick<'a>(rng: &mut StdRng, from: &[&'a str]) -> &'a str {
    from[rng.random_range(0..from.len())]
}

/// A random mix of one to four faults. A busy cloud's mix holds only what says "not now" (429 with and
/// without Retry-After, Octavia's busy 409 and its slowness, reads failing now and then): kos must wait
/// those out within the run. A broken cloud's also fails writes, loses answers after the side effect,
/// refuses a create and cuts the servers off the CNI manifest's host for a while.
fn mix(rng: &mut StdRng, busy: bool) -> Vec<Fault> {
    let n = rng.random_range(1..=4);
    (0..n)
        .map(|_| {
            let p = f64::from(rng.random_range(5..=30_u32)) / 100.0;
            let kind = if busy {
                [0, 3, 4, 5, 11][rng.random_range(0..5)]
            } else {
                rng.random_range(0..13)
            };
            match kind {
                0 => {
                    let path = pick(rng, READS);
                    let status = [500, 502, 503][rng.random_range(0..3)];
                    // Reads are retried six times: at most 15% keeps a whole run's worth of them passing.
                    let p = p / 2.0;
                    Fault::rule(
                        json!({"method": "GET", "path": path, "status": status, "probability": p}),
                        format!("GET {path} {status} p={p}"),
                    )
                }
                1 => {
                    let path = pick(rng, CREATES);
                    let status = [500, 502, 503][rng.random_range(0..3)];
                    Fault::rule(
                        json!({"method": "POST", "path": path, "status": status, "probability": p}),
                        format!("POST {path} {status} p={p}"),
                    )
                }
                2 => {
                    let path = pick(rng, CREATES);
                    Fault::rule(
                        json!({"method": "POST", "path": path, "status": 502, "probability": p,
                                     "after_side_effect": true}),
                        format!("POST {path} answer lost after the side effect p={p}"),
                    )
                }
                3 => {
                    let path = pick(rng, &[CREATES, READS].concat());
                    let after = rng.random_range(0..=2);
                    Fault::rule(
                        json!({"path": path, "status": 429, "probability": p, "retry_after": after}),
                        format!("{path} 429 Retry-After {after} p={p}"),
                    )
                }
                4 => {
                    let path = pick(rng, &[CREATES, READS].concat());
                    Fault::rule(
                        json!({"path": path, "status": 429, "probability": p}),
                        format!("{path} 429 without Retry-After p={p}"),
                    )
                }
                5 => Fault::rule(
                    json!({"method": "POST", "path": "^/load-balancer/v2/lbaas/(listeners|pools|healthmonitors)$",
                                 "status": 409, "probability": p,
                                 "message": "Load Balancer is immutable and cannot be updated."}),
                    format!("Octavia busy 409 p={p}"),
                ),
                6 => Fault::rule(
                    json!({"method": "POST", "path": "^/network/v2.0/ports$", "status": 409,
                                 "count": 1, "message": "IP address already allocated"}),
                    "one port create refused with 409".to_owned(),
                ),
                // Issue 20: one server's create refused outright (a control plane's or a worker's).
                7 => {
                    let node = ["cp-0", "cp-1", "workers-0"][rng.random_range(0..3)];
                    Fault::rule(
                        json!({"method": "POST", "path": "^/compute/v2.1/servers$", "status": 400,
                                     "count": 1, "body": format!("\"name\": ?\"kos-demo-{node}\"")}),
                        format!("{node}'s server create refused with 400"),
                    )
                }
                // Issue 20: security-group rules created, their answers lost.
                8 => Fault::rule(
                    json!({"method": "POST", "path": "^/network/v2.0/security-group-rules$",
                                 "status": 502, "probability": p, "after_side_effect": true}),
                    format!("rule creates lost after the side effect p={p}"),
                ),
                // Issue 20: Nova's late anti-affinity check, a boot that loses the scheduling race.
                9 => Fault::rule(
                    json!({"method": "POST", "path": "^/compute/v2.1/servers$", "status": 500,
                                 "count": 1, "build_error": true,
                                 "message": "Exceeded maximum number of retries. Exhausted all hosts \
                                             available for retrying build failures for instance {id}."}),
                    "one boot lost a scheduling race".to_owned(),
                ),
                // Issue 20: a single server's GET answering 404 now and then (Nova's cells, a busy API).
                10 => {
                    let p = p / 2.0;
                    Fault::rule(
                        json!({"method": "GET", "path": "^/compute/v2.1/servers/[0-9a-f-]{36}$",
                                     "status": 404, "probability": p}),
                        format!("GET servers/{{id}} 404 p={p}"),
                    )
                }
                // Issue 20: Octavia under load, slower than the first control plane's patience with the
                // API address (about 225 cloud seconds): waited for within the run, even on a busy cloud.
                11 => {
                    let create = rng.random_range(300..=900_u32);
                    let update = rng.random_range(20..=120_u32);
                    Fault {
                        rule: json!({"lb_create_secs": create, "lb_update_secs": update}),
                        what: format!("slow Octavia: create {create}s, update {update}s"),
                        via: Via::Latency,
                    }
                }
                // Issue 20: the CNI manifest's host unreachable from the servers for a while of the run
                // (the first control plane keeps retrying its `cni` step by itself).
                _ => {
                    let secs = rng.random_range(2..=40_u32);
                    Fault {
                        rule: json!({"unreachable": ["^https://raw\\.githubusercontent\\.com/"]}),
                        what: format!("CNI host unreachable for {secs}s"),
                        via: Via::Outage(Duration::from_secs(secs.into())),
                    }
                }
            }
        })
        .collect()
}

/// Silence allowed to a run before the campaign fails: kos says it is still working after 30 s of
/// silence; this leaves room for a loaded machine. The longest silence seen is printed per run and in
/// the summary (issue 20's goal: none over a minute).
const SILENCE_LIMIT: Duration = Duration::from_secs(120);

/// A `kos` run whose output lines are timed: the longest stretch with no line.
struct Timed {
    child: std::process::Child,
    last: std::sync::Arc<std::sync::Mutex<(Instant, Duration)>>,
}

impl Timed {
    fn spawn(d: &Path, clouds: &Path, args: &[&str]) -> Timed {
        use std::io::BufRead as _;
        let mut child = isolated(d, Some(clouds), args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kos");
        let last = std::sync::Arc::new(std::sync::Mutex::new((Instant::now(), Duration::ZERO)));
        let streams: [Box<dyn std::io::Read + Send>; 2] = [
            Box::new(child.stdout.take().expect("stdout")),
            Box::new(child.stderr.take().expect("stderr")),
        ];
        for r in streams {
            let last = last.clone();
            std::thread::spawn(move || {
                for _ in std::io::BufReader::new(r).lines().map_while(Result::ok) {
                    let mut l = last.lock().unwrap_or_else(|p| p.into_inner());
                    let now = Instant::now();
                    l.1 = l.1.max(now - l.0);
                    l.0 = now;
                }
            });
        }
        Timed { child, last }
    }

    /// The longest silence so far, the current one included.
    fn longest_silence(&self) -> Duration {
        let l = self.last.lock().unwrap_or_else(|p| p.into_inner());
        l.1.max(l.0.elapsed())
    }
}

/// Requests per cloud second per service, low enough that `kos up` meets 429s all the way. Cinder keeps a
/// burst of three: the SDK's version discovery of its endpoint sends three requests back to back, and a
/// limit that refuses the third fails that discovery every time (a limit of the SDK, not waited out).
fn strict_rate_limit(base: &str, on: bool) {
    let (rate, cinder) = if on {
        (json!(2.0), json!(3.0))
    } else {
        (Value::Null, Value::Null)
    };
    let (status, _) = admin(
        base,
        Method::PUT,
        "/_sim/rate-limits",
        Some(
            json!({"compute": rate, "network": rate, "load-balancer": rate, "block-storage": cinder}),
        ),
    );
    assert_eq!(status, 204);
}

fn healthy_again(base: &str) {
    for path in ["/_sim/faults", "/_sim/latency", "/_sim/internet"] {
        let (status, _) = admin(base, Method::DELETE, path, None);
        assert_eq!(status, 204, "DELETE {path}");
    }
    strict_rate_limit(base, false);
}

fn status_of(d: &Path, clouds: &Path, spec: &str) -> Value {
    let st = kos(
        d,
        Some(clouds),
        &[
            "status", "demo", "--cloud", "sim", "-f", spec, "--output", "json",
        ],
    );
    serde_json::from_slice(&st.stdout)
        .unwrap_or_else(|e| panic!("status JSON ({e}): {}", text(&st)))
}

#[test]
fn after_any_fault_mix_and_kill_the_first_plain_rerun_converges_and_down_leaves_nothing() {
    let seed: u64 = std::env::var("KOS_CAMPAIGN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let runs: u32 = std::env::var("KOS_CAMPAIGN_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_RUNS);
    eprintln!("campaign: seed {seed}, {runs} runs (replay with KOS_CAMPAIGN_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);

    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // The simulator's own random choices (which requests a probability hits) follow the seed too.
    let config = d.join("sim.yaml");
    std::fs::write(&config, format!("seed: {}\n", rng.random::<u32>())).expect("write sim config");
    let served = serve_with(d, "0.05", Some(&config));
    let specs = specs(d);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut record = Vec::new();
    let mut longest_silence = Duration::ZERO;

    for run in 1..=runs {
        let spec = specs[rng.random_range(0..specs.len())]
            .to_str()
            .expect("utf8")
            .to_owned();
        // A busy cloud is waited for within the run; a broken one ends it, or a kill does.
        let busy = rng.random_bool(0.35);
        let faults = mix(&mut rng, busy);
        for f in &faults {
            f.via.set(&served.base, f.rule.clone(), &f.what);
        }
        let mut outage_ends = faults
            .iter()
            .filter_map(|f| match f.via {
                Via::Outage(lasts) => Some(lasts),
                _ => None,
            })
            .max();
        let mut what: Vec<String> = faults.into_iter().map(|f| f.what).collect();
        if rng.random_bool(0.3) {
            strict_rate_limit(&served.base, true);
            what.push("strict rate limit".into());
        }
        let expire_after = rng
            .random_bool(0.4)
            .then(|| Duration::from_millis(rng.random_range(200..3000)));
        // Issue 20: tokens that keep expiring (every 300 ms) while the mix fails calls too. Only
        // on a broken cloud: a busy cloud's run must end well by itself, and whether it can under
        // such churn is not settled (seed 13873477579597083995 once ended one with exit 1).
        let churn = !busy && expire_after.is_some() && rng.random_bool(0.5);
        let kill_after = (!busy && rng.random_bool(0.8))
            .then(|| Duration::from_millis(rng.random_range(150..6000)));
        if let Some(t) = expire_after {
            what.push(if churn {
                format!("tokens expired every 300ms from {t:?}")
            } else {
                format!("tokens expired after {t:?}")
            });
        }

        // The faulted run: killed at its moment, or left to end on its own (it may fail: the cloud was
        // broken), never for longer than a few minutes.
        let started = Instant::now();
        let mut up = Timed::spawn(d, &served.clouds, &["up", "-f", &spec, "--cloud", "sim"]);
        let mut expired = expire_after.is_none();
        let mut next_expiry = expire_after;
        // A kill lands after an outage's end: an outage cut short by the kill would never meet the
        // first control plane's `cni` step, and the re-run must meet a node that lived through one.
        let kill_after = kill_after.map(|k| k + outage_ends.unwrap_or_default());
        let deadline = started + kill_after.unwrap_or(Duration::from_secs(240));
        let faulted = loop {
            if !expired && next_expiry.is_some_and(|t| started.elapsed() >= t) {
                admin(&served.base, Method::POST, "/_sim/tokens/expire", None);
                if churn {
                    next_expiry = next_expiry.map(|t| t + Duration::from_millis(300));
                } else {
                    expired = true;
                }
            }
            if outage_ends.is_some_and(|t| started.elapsed() >= t) {
                let (status, _) = admin(&served.base, Method::DELETE, "/_sim/internet", None);
                assert_eq!(status, 204);
                outage_ends = None;
            }
            if let Some(status) = up.child.try_wait().expect("wait") {
                break format!("exit {}", status.code().unwrap_or(-1));
            }
            if Instant::now() >= deadline {
                let _ = up.child.kill();
                let _ = up.child.wait();
                break format!("killed after {:?}", started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let silent = up.longest_silence();
        longest_silence = longest_silence.max(silent);

        // The cloud is healthy again: one plain `kos up` converges.
        healthy_again(&served.base);
        let rerun = kos(
            d,
            Some(&served.clouds),
            &["up", "-f", &spec, "--cloud", "sim"],
        );
        let line = format!(
            "run {run} ({}, {} cloud): [{}] {faulted} (longest silence {:.1}s); first re-run: exit {}",
            Path::new(&spec)
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("?"),
            if busy { "busy" } else { "broken" },
            what.join("; "),
            silent.as_secs_f64(),
            code(&rerun)
        );
        eprintln!("campaign: {line}");
        record.push(line.clone());
        assert!(
            silent <= SILENCE_LIMIT,
            "seed {seed}: {line}: silent for {silent:?}"
        );
        if busy {
            assert_eq!(
                faulted, "exit 0",
                "seed {seed}: a busy cloud ended the run: {line}"
            );
        }
        assert_eq!(code(&rerun), 0, "seed {seed}: {line}\n{}", text(&rerun));
        let st = status_of(d, &served.clouds, &spec);
        assert_eq!(
            st["duplicates"],
            json!([]),
            "seed {seed}: {line}: duplicates: {st}"
        );
        assert_eq!(
            st["not_converged"],
            json!([]),
            "seed {seed}: {line}: not converged: {st}"
        );

        // Teardown, killed half-way at times, then run again: nothing of the cluster is left.
        if rng.random_bool(0.5) {
            let child = spawn(d, &served.clouds, &["down", "demo", "--cloud", "sim"]);
            std::thread::sleep(Duration::from_millis(rng.random_range(50..1500)));
            kill(child);
        }
        let down = kos(d, Some(&served.clouds), &["down", "demo", "--cloud", "sim"]);
        assert_eq!(code(&down), 0, "seed {seed}: {line}: down: {}", text(&down));
        let left = rt.block_on(leftovers(&served.clouds, "demo"));
        assert!(
            left.is_empty(),
            "seed {seed}: {line}: leaks after down: {left:?}"
        );
    }
    eprintln!(
        "campaign: seed {seed}: {runs}/{runs} first re-runs converged, 0 duplicates, 0 leaks, \
         longest silence {:.1}s:\n  {}",
        longest_silence.as_secs_f64(),
        record.join("\n  ")
    );
}
