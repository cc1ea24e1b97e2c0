//! `kos plan` and `up`: a cluster made and changed as its spec says, through kos-control; the spec
//! file read for every command that takes one.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use kos_cluster::Loaded;
use kos_lifecycle::api::chain;
use kos_lifecycle::audience::Audience;
use kos_lifecycle::decide::DecideError;
use kos_lifecycle::run::RunError;
use miette::{IntoDiagnostic, WrapErr};

use super::{Exit, Failure};
use crate::cli::{Output, PlanArgs, UpArgs, Wait};
use crate::cloud::{self, Connected};
use crate::local::Local;
use crate::progress::{Lines, Progress};
use kos_control::encryption::TurnKeysError;
use kos_control::follow;
use kos_control::kubeadm::{Kubeadm, KubeadmError};
use kos_control::report::{Summarised, Summary};
use kos_control::store::KeysError;
use kos_control::store::{Records as _, SecretsError};
use kos_control::up::steps::StepError;
use kos_control::up::{ConvergeError, Env, Spec, Up, UpError};

/// A spec read and validated, before any cloud is contacted: an unreachable cloud never hides a spec
/// error, and an invalid spec costs no request.
pub(crate) struct SpecFile {
    pub(crate) loaded: Loaded,
    /// The path as shown in messages, and the text diagnostics point into.
    pub(crate) shown: String,
    pub(crate) text: String,
}

/// Reads (at most [`kos_cluster::MAX_SPEC_BYTES`]) and validates the spec: every problem at once.
pub(crate) fn load_spec(path: &Path) -> Result<SpecFile, Failure> {
    use std::io::Read;
    let shown = path.display().to_string();
    let cannot = |e: std::io::Error| {
        Failure::input(miette::miette!(
            help = "check the path given to -f",
            "cannot read the cluster spec {}: {e}",
            crate::term::printable(&shown)
        ))
    };
    // Opened without blocking: a FIFO no one writes to must not hold kos forever (a pipe that is
    // written, `-f <(envsubst < c.yaml)`, still works).
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NONBLOCK);
    }
    let file = opts.open(path).map_err(cannot)?;
    // Bounded: `-f /dev/zero` or an endless pipe must end in a message, not in memory exhaustion.
    let mut bytes = Vec::new();
    read_bounded(
        file.take(kos_cluster::MAX_SPEC_BYTES as u64 + 1),
        &mut bytes,
        SPEC_READ_WAIT,
    )
    .map_err(cannot)?;
    if bytes.len() > kos_cluster::MAX_SPEC_BYTES {
        return Err(Failure::input(miette::miette!(
            help = "a cluster spec is a few KiB: check that -f names the spec (not a log, an image or a stream)",
            "the cluster spec {} is larger than {} KiB; kos read no further",
            crate::term::printable(&shown),
            kos_cluster::MAX_SPEC_BYTES / 1024
        )));
    }
    let loaded = kos_cluster::load_bytes(&shown, &bytes)
        .map_err(|errors| Failure::input(miette::Report::new(errors)))?;
    if !loaded.warnings.diagnostics().is_empty() {
        eprintln!(
            "{}",
            crate::term::report(&miette::Report::new(loaded.warnings.clone()))
        );
    }
    // Valid, so UTF-8 (a leading byte-order mark aside, which the spans do not count).
    let text =
        String::from_utf8_lossy(bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&bytes)).into_owned();
    Ok(SpecFile {
        loaded,
        shown,
        text,
    })
}

/// How long a spec that is a pipe or a terminal may take to arrive.
const SPEC_READ_WAIT: Duration = Duration::from_secs(10);

/// Reads to the end of a non-blocking `r`, waiting at most `wait` in all for data that is not there
/// yet (a regular file never waits).
fn read_bounded(
    mut r: impl std::io::Read,
    out: &mut Vec<u8>,
    wait: Duration,
) -> std::io::Result<()> {
    let deadline = std::time::Instant::now() + wait;
    let mut buf = [0u8; 64 * 1024];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if std::time::Instant::now() >= deadline {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("nothing more arrived within {} s", wait.as_secs()),
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The CLI's side of a run: the spec read again per turn, files of the older layout taken over
/// once the cloud shows the cluster.
pub(super) struct CliFront<'a> {
    pub(super) file: &'a Path,
    pub(super) local: &'a Local,
}

impl kos_control::up::Front for CliFront<'_> {
    fn spec(&self) -> Result<Spec, kos_control::store::Cause> {
        load_spec(self.file)
            .map(Spec::from)
            .map_err(|f| Box::new(super::Diagnosed(f.report)) as kos_control::store::Cause)
    }

    fn seen(&self) -> Result<(), kos_control::store::Cause> {
        // The layout before cloud identities shared one directory between projects: only a
        // project that shows the cluster takes its files.
        self.local.adopt_legacy().map_err(Into::into)
    }
}

impl From<SpecFile> for Spec {
    fn from(f: SpecFile) -> Spec {
        Spec {
            spec: f.loaded.spec,
            shown: f.shown,
            text: f.text,
        }
    }
}

/// Takes a cluster's files from the layout before cloud identities when the cloud shows the cluster,
/// for commands that do not observe it otherwise.
pub(crate) async fn adopt_if_seen(c: &Connected, local: &Local, name: &str) -> Result<(), Failure> {
    if !local.legacy_pending() {
        return Ok(());
    }
    let observed = kos_cluster::observe::observe(&c.session, name)
        .await
        .map_err(Failure::cloud)?;
    if observed.all().next().is_some() {
        local
            .adopt_legacy()
            .map_err(|e| Failure::cloud_report(miette::miette!("{e}")))?;
    }
    Ok(())
}

/// Runs `f` with a connected cloud and always saves the embedded simulator afterwards.
pub(crate) async fn with_cloud<F, Fut>(cloud_name: Option<&str>, f: F) -> Result<Exit, Failure>
where
    F: FnOnce(Connected) -> Fut,
    Fut: std::future::Future<Output = (Connected, Result<Exit, Failure>)>,
{
    let c = cloud::connect(cloud_name).await?;
    let (c, result) = f(c).await;
    c.close().await.map_err(Failure::cloud_report)?;
    result
}

/// A pool's `autoscaling` is cluster-autoscaler's through kos-operator: the CLI keeps `count`.
fn autoscaling_note(spec: &kos_cluster::spec::ClusterSpec) {
    let pools: Vec<&str> = spec
        .node_pools
        .iter()
        .filter(|p| p.autoscaling.is_some())
        .map(|p| p.name.value.as_str())
        .collect();
    if !pools.is_empty() {
        eprintln!(
            "kos: note: autoscaling of pool(s) {} takes effect under kos-operator (cluster-autoscaler \
             through its externalgrpc endpoint; `kos export` moves the cluster there): `kos up` keeps \
             each pool at its count",
            pools.join(", ")
        );
    }
}

pub async fn plan(args: PlanArgs) -> Result<Exit, Failure> {
    let spec = load_spec(&args.spec.file)?;
    autoscaling_note(&spec.loaded.spec);
    let fetch = fetch_summary(&spec.loaded.spec);
    with_cloud(args.cloud.cloud.as_deref(), |c| async move {
        let r = async {
            let renew_before = renew_before(&c.session, args.renew_certificates).await;
            let local = Local::for_session(&c.session, spec.loaded.spec.name.value.as_str())
                .map_err(Failure::input)?;
            let front = CliFront {
                file: &args.spec.file,
                local: &local,
            };
            let p = kos_control::up::prepare(
                c.cloud(),
                &local,
                &front,
                spec.into(),
                renew_before,
                false,
                false,
                &Lines,
            )
            .await
            .map_err(|e| up_failure(e, &local))?;
            if args.graph.is_some() {
                print!("{}", p.graph.dot());
                return Ok(Exit::Ok);
            }
            // What `kos up` would refuse, `kos plan` refuses too.
            p.decided
                .check()
                .map_err(|e| Failure::from(RunError::from(e)))?;
            let plan = kos_lifecycle::roll::annotated(&p.decided.plan);
            match args.output {
                Output::Text => print!(
                    "{}{}",
                    crate::term::escape(&plan.diff(args.all)),
                    crate::term::escape(&fetch)
                ),
                Output::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&plan)
                        .into_diagnostic()
                        .map_err(Failure::cloud_report)?
                ),
            }
            Ok(if args.detailed_exitcode && plan.summary().changes() > 0 {
                Exit::Changes
            } else {
                Exit::Ok
            })
        }
        .await;
        (c, r)
    })
    .await
}

/// What `kos plan` says of the spec's mirrors and proxy (empty without): where the nodes fetch from,
/// the proxy with its credentials hidden, and where the full list is.
fn fetch_summary(spec: &kos_cluster::ClusterSpec) -> String {
    use std::fmt::Write as _;
    let m = &spec.mirrors;
    if m.is_empty() && spec.proxy.is_none() {
        return String::new();
    }
    let mut out = String::from("\nNodes fetch:\n");
    for (registry, mirror) in &m.registries {
        let _ = writeln!(out, "  images of {registry} from {}", mirror.as_str());
    }
    if let Some(p) = &m.kubernetes_packages {
        let _ = writeln!(out, "  Kubernetes packages from {}", p.as_str());
    }
    if let Some(p) = &m.os_packages {
        let _ = writeln!(out, "  OS packages from {}", p.as_str());
    }
    if let Some(p) = m.os_security_packages.as_ref().or(m.os_packages.as_ref()) {
        let _ = writeln!(out, "  OS security updates from {}", p.as_str());
    }
    if let Some(b) = &m.manifests {
        let _ = writeln!(out, "  manifests from {} (same sha256)", b.as_str());
    }
    if m.ca_bundle.is_some() {
        out.push_str("  trusting the mirrors' CA bundle\n");
    }
    if let Some(p) = &spec.proxy {
        let urls: Vec<String> = [("http", &p.http), ("https", &p.https)]
            .into_iter()
            .filter_map(|(k, u)| u.as_ref().map(|u| format!("{k} {}", u.redacted())))
            .collect();
        let _ = writeln!(
            out,
            "  through the proxy ({}), except the cluster's own ranges{}",
            urls.join(", "),
            if p.no_proxy.is_empty() {
                String::new()
            } else {
                format!(" and {}", p.no_proxy.join(", "))
            }
        );
    }
    out.push_str("  every artefact: `kos artefacts -f <spec>`\n");
    out
}

pub async fn up(args: UpArgs, verbose: u8) -> Result<Exit, Failure> {
    let json = matches!(args.output, Output::Json);
    let progress = Progress::new(json, verbose);
    // --self-hosted: its identity is read and checked before anything is made.
    let hosting = match self_hosting(&args) {
        Ok(h) => h,
        Err(f) => return progress.finish(Summary::new(None), Err(f)),
    };
    let (file, cloud) = (args.spec.file.clone(), args.cloud.cloud.clone());
    let (summary, r) = match load_spec(&args.spec.file) {
        Ok(spec) => {
            autoscaling_note(&spec.loaded.spec);
            let report = Summarised::new(
                &progress,
                Summary::new(Some(spec.loaded.spec.name.value.as_str())),
            );
            let r = up_runs(args, spec, |_, _| Ok(()), 1, &report).await;
            (report.summary(), r)
        }
        Err(f) => (Summary::new(None), Err(f)),
    };
    let done = progress.finish(summary, r)?;
    match hosting {
        Some((image, identity)) if done == Exit::Ok => {
            super::fleet::self_host_after_up(file, cloud, image, identity).await
        }
        _ => Ok(done),
    }
}

/// `--self-hosted`'s image and identity, checked: the run must wait for the API (the cluster is
/// its own management cluster), and the identity file must name its cloud.
fn self_hosting(args: &UpArgs) -> Result<Option<(String, super::fleet::Identity)>, Failure> {
    let h = &args.hosting;
    let (true, Some(image), Some(file), Some(cloud)) = (
        h.self_hosted,
        &h.operator_image,
        &h.identity_file,
        &h.identity_cloud,
    ) else {
        return Ok(None);
    };
    if args.wait != Wait::Ready {
        return Err(Failure::input(miette::miette!(
            help = "drop --wait: the cluster's API must be Ready to keep itself",
            "--self-hosted needs --wait ready"
        )));
    }
    let identity = super::fleet::Identity::read(file, cloud, &h.identity_secret)?;
    Ok(Some((image.clone(), identity)))
}

/// `kos up`, with `before` run under the cluster's lock before the first turn (`kos rotate
/// encryption-key` starts its rotation there), run again (at most `runs` times in all) while a key
/// rotation is under way: a run moves the rotation one step, at its start, since a control plane it
/// made for one step would be outdated by the next within the same run. Every run reports to
/// `report`.
pub(super) async fn up_runs(
    args: UpArgs,
    spec: SpecFile,
    before: impl FnOnce(&Connected, &Local) -> Result<(), Failure>,
    runs: usize,
    report: &dyn kos_control::report::Report,
) -> Result<Exit, Failure> {
    let cloud = args.cloud.cloud.clone();
    with_cloud(cloud.as_deref(), |c| async move {
        // One run per cluster at a time: two would each write its secrets and race on the cloud.
        let local = match Local::for_session(&c.session, spec.loaded.spec.name.value.as_str()) {
            Ok(l) => l,
            Err(e) => return (c, Err(Failure::input(e))),
        };
        let _lock = match local.lock("up") {
            Ok(l) => l,
            Err(e) => return (c, Err(Failure::input(e))),
        };
        if let Err(f) = before(&c, &local) {
            return (c, Err(f));
        }
        let mut spec = Some(spec);
        let mut r = Ok(Exit::Ok);
        let options = up_options(&args);
        // Read here, once, before the first turn: kos-control reads no local file.
        let ca_cert = match ca_cert(&c.session) {
            Ok(ca) => ca,
            Err(e) => return (c, Err(Failure::input(e))),
        };
        let kubeadm = Kubeadm {
            session: &c.session,
            store: &local,
            ca_cert,
            report,
        };
        let front = CliFront {
            file: &args.spec.file,
            local: &local,
        };
        // --repair judges what the cloud and its clusters stamped by the cloud's clock.
        let session = c.session.clone();
        let cloud_now = move || kos_control::connect::cloud_now(&session).unix_timestamp();
        for _ in 0..runs.max(1) {
            let opts = kos_lifecycle::run::Options {
                repair: args.repair.then_some(kos_lifecycle::run::Repair {
                    after_secs: args
                        .repair_after
                        .map(|s| i64::try_from(s).unwrap_or(i64::MAX)),
                    now: &cloud_now,
                    // The user asked for the repair: what cannot be done fails the run.
                    unrepairable: kos_lifecycle::run::Unrepairable::Refuse,
                }),
            };
            // A later run reads the spec again.
            let first = match spec.take() {
                Some(s) => s,
                None => match load_spec(&args.spec.file) {
                    Ok(s) => s,
                    Err(f) => {
                        r = Err(f);
                        break;
                    }
                },
            };
            let changed = AtomicBool::new(false);
            // One run: every console it follows is read.
            let consoles = follow::FinishedConsoles::default();
            let env = Env {
                cloud: c.cloud(),
                store: &local,
                script: &local,
                bootstraps: &kubeadm,
                report,
                options: &options,
                changed: &changed,
                consoles: &consoles,
            };
            let renew_before = renew_before(&c.session, args.renew_certificates).await;
            r = Up::new(env, &front, first.into(), renew_before)
                .run(opts)
                .await
                .map(|()| Exit::Ok)
                .map_err(|e| up_failure(e, &local));
            let rotating = local
                .keys()
                .ok()
                .flatten()
                .is_some_and(|k| k.phase != kos_lifecycle::encryption::Phase::Steady);
            if r.is_err() || !rotating {
                break;
            }
        }
        (c, r)
    })
    .await
}

/// A decision of the run's, as the user reads it: a refusal is bad input (exit 3, nothing changed).
impl From<RunError> for Failure {
    fn from(e: RunError) -> Failure {
        let report = miette::miette!(help = e.help(Audience::Cli), "{e}");
        if e.is_refusal() {
            Failure::input(report)
        } else {
            Failure::cloud_report(report)
        }
    }
}

/// A run's failure as the user reads it: bad input (3) only while nothing was changed, else 1.
pub(crate) fn up_failure(e: UpError, local: &Local) -> Failure {
    match e {
        UpError::AfterChanges(inner) => Failure::cloud_report(up_failure(*inner, local).report.wrap_err(
            "kos up stopped after it had made changes; fix the cause and run it again: it continues",
        )),
        UpError::Spec(cause) => Failure::input(super::Diagnosed::report(cause)),
        UpError::Preflight { error, changed } => {
            if let Some(q) = &error.quota
                && !q.short().is_empty()
            {
                eprintln!("{q}");
            }
            if error.cloud_failed || changed {
                // A lookup the cloud failed is no fault of the spec's; and a spec that passed in
                // this run's first turn failing now is what the cloud answered since.
                Failure::cloud_report(miette::Report::new(error.report).wrap_err(if changed {
                    "the cloud failed while kos checked the spec against it again, after this run had \
                     made changes; run the command again: it continues"
                } else {
                    "the cloud failed while kos checked the spec against it: nothing was changed; run the \
                     command again"
                }))
            } else {
                Failure::input(miette::Report::new(error.report))
            }
        }
        UpError::Observe(e) => Failure::cloud(e),
        UpError::Seen(cause) => Failure::cloud_report(miette::miette!("{cause}")),
        UpError::Keys(e) => match *e {
            TurnKeysError::Keys(KeysError::Store(s)) | TurnKeysError::Store(s) => Failure::store(&s),
            TurnKeysError::Keys(KeysError::Missing { recorded, location }) => {
                Failure::input(miette::miette!(
                    help = "copy encryption.json from the machine that manages the cluster into this directory",
                    "the cluster's control planes run with encryption keys ({recorded}) that are not on this machine ({location})"
                ))
            }
            e @ TurnKeysError::Rewrite(_) => Failure::cloud_report(miette::miette!(
                help = "run the command again: it rewrites the Secrets again, then drops the old key",
                "{e}"
            )),
        },
        UpError::Decide {
            shown,
            error,
            changed,
        } => {
            let shown = crate::term::printable(&shown);
            Failure::input(match error {
                DecideError::Quorum { .. } => miette::miette!(
                    help = "keep controlPlane.count at the number of control planes that run, and bring stopped ones back first",
                    "{shown}: {error}"
                ),
                DecideError::Refused { .. } if !changed => {
                    miette::miette!(help = "nothing was changed", "{shown}: {error}")
                }
                DecideError::Refused { .. } | DecideError::Version(_) | DecideError::Graph(_) => {
                    miette::miette!("{shown}: {error}")
                }
            })
        }
        UpError::Run(e) => Failure::from(e),
        UpError::Step(e) => match *e {
            StepError::Store(s) => Failure::store(&s),
            StepError::Bootstrap(cause) => Failure::input(bootstrap_report(cause)),
            e => Failure::explained(&e.to_string(), e.help(Audience::Cli).as_deref(), false),
        },
        UpError::Converge(e) => converge_failure(*e, local),
        UpError::Rotate(e) => super::rotate::failure(*e),
    }
}

/// What `kos up` was asked for, as kos-control takes it.
fn up_options(args: &UpArgs) -> kos_control::up::Options {
    kos_control::up::Options {
        reuse_local_secrets: args.reuse_local_secrets,
        recreate_ccm_credential: args.recreate_ccm_credential,
        parallelism: usize::from(args.parallelism),
        wait: match args.wait {
            Wait::Infra => follow::Wait::Infra,
            Wait::Bootstrap => follow::Wait::Bootstrap,
            Wait::Ready => follow::Wait::Ready,
        },
        drain_timeout: Duration::from_secs(args.drain_timeout),
        leftovers: kos_control::store::Leftovers::Adopt,
        // Its user may keep the credential's secret on another machine.
        ccm_mending: kos_control::up::CcmMending::User,
    }
}

/// The PEM of clouds.yaml's `cacert`, which the nodes' cloud.conf names too (`ca-file`).
fn ca_cert(session: &kos_cloud::Session) -> miette::Result<Option<String>> {
    session
        .cacert()
        .map(|path| {
            std::fs::read_to_string(path)
                .into_diagnostic()
                .wrap_err_with(|| {
                    format!(
                        "cannot read the cloud's CA bundle {} (clouds.yaml `cacert`), which the cloud controller needs too",
                        path.display()
                    )
                })
        })
        .transpose()
}

/// Why a turn's user_data cannot be rendered, as the user reads it.
fn bootstrap_report(cause: kos_control::store::Cause) -> miette::Report {
    match cause.downcast::<KubeadmError>() {
        Ok(e) => match *e {
            KubeadmError::Version(e) => miette::miette!("{e}"),
            KubeadmError::Store(e) => miette::miette!("{}", chain(&e)),
        },
        Err(other) => super::Diagnosed::report(other),
    }
}

/// A converge's failure as the user reads it: bad input (3) before anything changed, else 1.
fn converge_failure(e: ConvergeError, local: &Local) -> Failure {
    match e {
        ConvergeError::Secrets(e) => secrets_failure(e, local),
        ConvergeError::Store(e) => Failure::store(&e),
        ConvergeError::Bootstrap(cause) => Failure::input(bootstrap_report(cause)),
        e => {
            let text = match &e {
                ConvergeError::Follow(f) if matches!(**f, follow::BootstrapError::Client(_)) => {
                    chain(&e)
                }
                _ => e.to_string(),
            };
            Failure::explained(&text, e.help(Audience::Cli).as_deref(), e.is_input())
        }
    }
}

/// Why the run cannot have the cluster's secrets, as the user reads it: nothing was changed (3).
fn secrets_failure(e: SecretsError, local: &Local) -> Failure {
    let cluster = || {
        local
            .dir
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    };
    match e {
        SecretsError::Store(e) => Failure::store(&e),
        SecretsError::Orphaned { location } => Failure::input(miette::miette!(
            help = format!(
                "pass --reuse-local-secrets to make the cluster again with this CA (every certificate \
                 it signed will be trusted), or `kos down {0} --forget` to delete them: the cloud shows \
                 nothing of cluster {0}",
                cluster()
            ),
            "the secrets in {location} were given to servers of a cluster that this project ({}) shows no \
             trace of",
            local
                .place()
                .map_or("?", |p| p.identity().project_id.as_str())
        )),
        SecretsError::Missing { location } => Failure::input(miette::miette!(
            help = "copy pki.json from the machine that created the cluster into this directory",
            "the cluster already has servers but its secrets ({location}) are not on this machine"
        )),
        e @ SecretsError::Foreign { .. } => Failure::input(miette::miette!(
            help = "copy pki.json from the machine that manages the cluster into this directory",
            "{e}"
        )),
        e @ SecretsError::Generate(_) => Failure::input(miette::miette!("{}", chain(&e))),
    }
}

/// `--renew-certificates`: control planes made before now are replaced, now on the cloud's clock,
/// which Nova stamps their `created` by. Keystone's answer does not go through kos's request path,
/// so a session has seen no `Date` before its first call: one cheap call shows it (its failure
/// leaves this machine's clock, and the run meets the cloud's error itself).
async fn renew_before(session: &kos_cloud::Session, renew: bool) -> Option<i64> {
    if !renew {
        return None;
    }
    if session.pace().now_unix().is_none() {
        let _ = session.compute().availability_zones().await;
    }
    Some(kos_control::connect::cloud_now(session).unix_timestamp())
}
