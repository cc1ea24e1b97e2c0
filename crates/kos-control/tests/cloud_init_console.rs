//! kos reads a node's console as real cloud-init writes it: the warnings after which kos's bootstrap
//! never runs are produced here by cloud-init's own code (Debian's `cloud-init` package, with its
//! own logging configuration), not by text kos wrote, and `follow::parse` must fail the node on each
//! at once instead of waiting out the bootstrap deadline. A missing cloud-init fails the test with
//! the package to install (`.ci/run` and `scripts/test` install it).

use std::path::Path;
use std::process::Command;

use kos_control::follow::{NodeState, parse};

/// cloud-init's interpreter: the one on its entry point's shebang line (its modules are not on
/// every python's path, a virtualenv's included).
fn cloud_init_python() -> String {
    let entry = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("cloud-init"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("cloud-init is not installed: apt-get install cloud-init"));
    let text = std::fs::read_to_string(&entry).expect("cloud-init's entry point");
    text.lines()
        .next()
        .and_then(|l| l.strip_prefix("#!"))
        .map(|l| l.trim().to_owned())
        .unwrap_or_else(|| panic!("{} has no shebang line", entry.display()))
}

/// Runs `body` after setting up logging as cloud-init does at boot (05_logging.cfg: warnings to
/// stderr, the console) and returns what it wrote there.
fn cloud_init_says(dir: &Path, body: &str) -> String {
    let script = format!(
        "import logging, json, sys\n\
         from cloudinit import util, handlers\n\
         from cloudinit import log as cilog\n\
         cfg = util.read_conf('/etc/cloud/cloud.cfg.d/05_logging.cfg')\n\
         (getattr(cilog, 'setup_logging', None) or getattr(cilog, 'setupLogging'))(cfg)\n\
         DIR = sys.argv[1]\n\
         {body}\n"
    );
    let out = Command::new(cloud_init_python())
        .args(["-c", &script])
        .arg(dir)
        .output()
        .expect("run cloud-init's python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What cloud-init's own Jinja handler says rendering a cloud-config whose one value is `value`.
fn cloud_init_renders(dir: &Path, value: &str) -> String {
    cloud_init_says(
        dir,
        &format!(
            "from cloudinit.handlers import jinja_template\n\
             open(DIR + '/data.json', 'w').write(json.dumps({{'v1': {{'instance_id': 'i-1'}}}}))\n\
             jinja_template.render_jinja_payload_from_file(\
             '## template: jinja\\n#cloud-config\\nx: {value}\\n', \
             '/var/lib/cloud/instance/user-data.txt', DIR + '/data.json')"
        ),
    )
}

/// The console as Nova's serial log shows cloud-init's output (through the journal), after kos's
/// first marker.
fn console(said: &str) -> String {
    let mut c = String::from("[    9.1] cloud-init[700]: kos-bootstrap: preflight ok\n");
    for l in said.lines() {
        c.push_str(&format!("[    9.3] cloud-init[700]: {l}\n"));
    }
    c
}

fn assert_fails(said: &str, starts: &str) {
    assert!(said.contains(starts), "cloud-init said: {said}");
    match parse(&console(said)).1 {
        NodeState::Failed { step, reason } => {
            assert_eq!(step, "cloud-init");
            assert!(reason.starts_with(starts), "{reason}");
        }
        other => panic!("{other:?} from:\n{said}"),
    }
}

#[test]
fn a_cloud_config_cloud_init_cannot_load_fails_the_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let said = cloud_init_says(dir.path(), "util.load_yaml('write_files: [\\n')");
    assert_fails(&said, "Failed loading yaml blob");
    let said = cloud_init_says(dir.path(), "util.load_yaml('- a\\n- b\\n')");
    assert_fails(&said, "Failed loading yaml blob");
}

#[test]
fn user_data_with_no_handler_fails_the_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let said = cloud_init_says(
        dir.path(),
        "handlers.walker_callback({'handlers': {}, 'handlercount': 0, 'excluded': [], \
         'data': None, 'frequency': None}, 'part-001', '#!/usr/bin/env ruby\\nputs 1\\n', \
         {'Content-Type': handlers.NOT_MULTIPART_TYPE})",
    );
    assert_fails(
        &said,
        "Unhandled non-multipart (text/x-not-multipart) userdata",
    );
}

#[test]
fn a_template_cloud_init_ignores_fails_the_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let said = cloud_init_renders(dir.path(), "{{ v1.instance_id() }}");
    assert_fails(&said, "Ignoring jinja template for ");
}

#[test]
fn a_bootstrap_script_that_dies_without_a_marker_fails_the_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scripts = dir.path().join("scripts");
    std::fs::create_dir(&scripts).expect("mkdir");
    let part = scripts.join("runcmd");
    std::fs::write(&part, "#!/bin/sh\nexit 3\n").expect("write");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&part, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    let said = cloud_init_says(
        dir.path(),
        "from cloudinit.config import cc_scripts_user\n\
         class Cloud:\n    def get_ipath_cur(self):\n        return DIR\n\
         try:\n    cc_scripts_user.handle('scripts_user', {}, Cloud(), logging.getLogger(), [])\n\
         except Exception:\n    pass",
    );
    assert_fails(&said, "Failed to run module scripts_user");
}

#[test]
fn a_module_cloud_init_only_warns_about_leaves_the_bootstrap_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A template variable cloud-init cannot fill is rendered as a placeholder and warned about;
    // kos's bootstrap still runs (its own markers say how it ends).
    let said = cloud_init_renders(dir.path(), "{{ v1.nosuchkey }}");
    assert!(said.contains("[WARNING]"), "cloud-init said: {said}");
    assert_eq!(
        parse(&console(&said)).1,
        NodeState::Running("preflight ok".into())
    );
}
