//! Issue 24 (5): the README cannot drift from the code. Every fenced `sh` block of README.md (and of
//! docs/install-helm.md, the other page a new user copies commands from) is read as the shell would
//! split it, and each command must be one kos knows: `kos …` (or `cargo run -p kos -- …`) parses with
//! the real binary's argument parser (`kos ARGS --help`: clap checks every argument and value before
//! it shows the help), a script or file of this repository it names exists, and any other program is
//! one the page means to use. The cheap kos commands, which need no cluster (`kos plan` and
//! `kos artefacts` on the examples, against the embedded simulated cloud), are run as written.

mod support;

use std::path::Path;
use std::process::Output;

use support::{code, isolated, text};

/// The workspace of the checkout under test: the package's directory as cargo gives it when the
/// test runs (the one compiled in may be another checkout's, sharing the target directory).
fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned()),
    )
    .join("../..")
}
/// The pages whose `sh` blocks are checked.
const PAGES: [&str; 2] = ["README.md", "docs/install-helm.md"];
/// Programs the pages may run besides kos, cargo and the repository's scripts: the shell's own
/// builtins, the clients a user runs against the cluster or cloud, and text tools.
const OTHER_PROGRAMS: [&str; 7] = [
    "alias",
    "export",
    "kill",
    "kubectl",
    "openstack",
    "helm",
    "sed",
];
/// Where a path of this repository starts.
const REPO_DIRS: [&str; 7] = [
    "examples/",
    "charts/",
    "manifests/",
    "scripts/",
    "docs/",
    "crates/",
    "testdata/",
];

/// The ```sh blocks of a Markdown text.
fn sh_blocks(markdown: &str) -> Vec<String> {
    markdown
        .split("```sh\n")
        .skip(1)
        .filter_map(|b| b.split_once("```").map(|(s, _)| s.to_owned()))
        .collect()
}

/// A shell word, or an operator that ends a command (`&&`, `||`, `|`, `&`, `;`, a newline).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    End,
}

/// Splits a block as sh does for what the pages use: quotes, backslash-newline continuations,
/// comments (a `#` starting a word), and the operators between commands.
fn tokens(block: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = block.chars().peekable();
    let end_word = |out: &mut Vec<Token>, word: &mut String, in_word: &mut bool| {
        if *in_word {
            out.push(Token::Word(std::mem::take(word)));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                    word.push(q);
                }
            }
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(n) => {
                    in_word = true;
                    word.push(n);
                }
            },
            '#' if !in_word => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        break;
                    }
                }
                out.push(Token::End);
            }
            ' ' | '\t' => end_word(&mut out, &mut word, &mut in_word),
            '\n' | ';' | '|' | '&' => {
                end_word(&mut out, &mut word, &mut in_word);
                if matches!(c, '|' | '&') && chars.peek() == Some(&c) {
                    chars.next();
                }
                out.push(Token::End);
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
    }
    end_word(&mut out, &mut word, &mut in_word);
    out
}

/// The commands of a block, each its words, leading `VAR=value` assignments dropped.
fn commands(block: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut cur: Vec<String> = Vec::new();
    for t in tokens(block).into_iter().chain([Token::End]) {
        match t {
            Token::Word(w) => {
                let assignment = cur.is_empty()
                    && w.split_once('=').is_some_and(|(k, _)| {
                        !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    });
                if !assignment {
                    cur.push(w);
                }
            }
            Token::End => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
        }
    }
    out
}

/// What a command runs, as far as this test cares.
#[derive(Debug, PartialEq, Eq)]
enum Run {
    /// kos with these arguments.
    Kos(Vec<String>),
    /// Anything else, checked for the repository paths it names.
    Other,
}

/// Why a command is not one kos knows, or what it runs.
fn classify(words: &[String]) -> Result<Run, String> {
    let (program, args) = words.split_first().ok_or("an empty command")?;
    let rest = || args.to_vec();
    match program.as_str() {
        "kos" | "target/debug/kos" | "./target/debug/kos" => Ok(Run::Kos(rest())),
        "cargo" => {
            let sub = args.first().map(String::as_str);
            let package = args
                .windows(2)
                .find(|w| w[0] == "-p")
                .map(|w| w[1].as_str());
            if let Some(p) = package
                && !root().join("crates").join(p).join("Cargo.toml").is_file()
            {
                return Err(format!("`cargo … -p {p}`: no crate {p} in crates/"));
            }
            match (sub, package) {
                (Some("run"), Some("kos")) => {
                    let sep = args
                        .iter()
                        .position(|a| a == "--")
                        .ok_or("`cargo run -p kos` without `--` before kos's arguments")?;
                    Ok(Run::Kos(args[sep + 1..].to_vec()))
                }
                (Some("build" | "test" | "run" | "bench" | "clippy" | "fmt"), _) => Ok(Run::Other),
                _ => Err(format!("an unknown cargo command: {}", words.join(" "))),
            }
        }
        p if p.starts_with("scripts/") => {
            let path = root().join(p);
            let executable = std::fs::metadata(&path).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            });
            if executable {
                Ok(Run::Other)
            } else {
                Err(format!("{p} is not an executable script of the repository"))
            }
        }
        p if OTHER_PROGRAMS.contains(&p) => Ok(Run::Other),
        p => Err(format!(
            "`{p}` is not a program the pages use (kos, cargo, scripts/…, {})",
            OTHER_PROGRAMS.join(", ")
        )),
    }
}

/// The repository paths among a command's words (`--file=PATH` and `-fPATH` forms too) that do not
/// exist.
fn missing_paths(words: &[String]) -> Vec<String> {
    words
        .iter()
        .map(|w| w.split_once('=').map_or(w.as_str(), |(_, v)| v))
        .filter(|w| REPO_DIRS.iter().any(|d| w.starts_with(d)))
        .filter(|w| !root().join(w).exists())
        .map(str::to_owned)
        .collect()
}

/// `kos ARGS --help`, from the repository's root with a private home: clap parses every argument
/// and value up to `--help`, then prints the help (exit 0) instead of running anything.
fn kos_parses(data: &Path, args: &[String]) -> Output {
    kos_in(data, args, &["--help"])
}

/// `kos ARGS EXTRA` isolated as every CLI test runs it, from the repository's root (the pages'
/// paths are relative to it).
fn kos_in(data: &Path, args: &[String], extra: &[&str]) -> Output {
    let args: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .chain(extra.iter().copied())
        .collect();
    isolated(data, None, &args)
        .current_dir(root())
        .output()
        .expect("kos runs")
}

/// The kos commands that need no cluster and no cloud of the user's: `plan` and `artefacts`, on
/// the embedded simulated cloud or none.
fn cheap(args: &[String]) -> bool {
    match args.first().map(String::as_str) {
        Some("artefacts") => true,
        Some("plan") => args.windows(2).any(|w| w[0] == "--cloud" && w[1] == "sim"),
        _ => false,
    }
}

/// Every problem of one page's blocks, and the kos commands it runs.
fn check_page(data: &Path, name: &str, markdown: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut problems = Vec::new();
    let mut kos_commands = Vec::new();
    for (i, block) in sh_blocks(markdown).iter().enumerate() {
        for words in commands(block) {
            let at = format!("{name}, sh block {}: `{}`", i + 1, words.join(" "));
            for p in missing_paths(&words) {
                problems.push(format!("{at}: {p} does not exist"));
            }
            match classify(&words) {
                Err(e) => problems.push(format!("{at}: {e}")),
                Ok(Run::Other) => {}
                Ok(Run::Kos(args)) => {
                    let o = kos_parses(data, &args);
                    if code(&o) != 0 {
                        problems.push(format!(
                            "{at}: kos's parser refuses it: {}",
                            String::from_utf8_lossy(&o.stderr).trim()
                        ));
                    }
                    kos_commands.push(args);
                }
            }
        }
    }
    (problems, kos_commands)
}

fn page(name: &str) -> String {
    std::fs::read_to_string(root().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn every_command_the_pages_show_is_one_kos_knows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut problems = Vec::new();
    let mut kos_commands = Vec::new();
    for name in PAGES {
        let (p, k) = check_page(dir.path(), name, &page(name));
        problems.extend(p);
        kos_commands.extend(k);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The README shows the walkthrough: a dozen kos commands at least were parsed.
    assert!(kos_commands.len() >= 12, "{kos_commands:?}");
}

#[test]
fn the_cheap_commands_of_the_readme_run_as_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, kos_commands) = check_page(dir.path(), "README.md", &page("README.md"));
    let cheap: Vec<&Vec<String>> = kos_commands.iter().filter(|a| cheap(a)).collect();
    // The walkthrough's plans and the air-gap section's two artefact listings.
    assert!(cheap.len() >= 4, "{cheap:?}");
    for args in cheap {
        let o = kos_in(dir.path(), args, &[]);
        assert_eq!(code(&o), 0, "kos {}: {}", args.join(" "), text(&o));
        let out = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        // No tracing line without -v (issue 24 (5)).
        for level in [" INFO ", " DEBUG ", " TRACE "] {
            assert!(
                !out.contains(level),
                "kos {} printed a tracing line: {out}",
                args.join(" ")
            );
        }
    }
}

/// The check can fail: a flag kos does not have, a file that is not there, a program the pages do
/// not use, an invalid cluster name, and `cargo run` of a crate that does not exist are refused;
/// quotes and continuations are read as sh reads them.
#[test]
fn a_page_with_a_wrong_command_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wrong = "```sh\nkos plan -f examples/minimal.yaml --cloud sim --no-such-flag\n\
                 kos plan -f examples/nowhere.yaml --cloud sim\n\
                 kos down Not_A_Name --cloud sim\n\
                 terraform apply   # not ours\n\
                 cargo run -p kos-nothing -- plan\n```\n";
    let (problems, _) = check_page(dir.path(), "wrong.md", wrong);
    let all = problems.join("\n");
    assert_eq!(problems.len(), 5, "{all}");
    assert!(all.contains("--no-such-flag"), "{all}");
    assert!(
        all.contains("examples/nowhere.yaml does not exist"),
        "{all}"
    );
    assert!(all.contains("Not_A_Name"), "{all}");
    assert!(all.contains("`terraform` is not a program"), "{all}");
    assert!(all.contains("no crate kos-nothing"), "{all}");

    let right = "```sh\nsed 's|a|b|' manifests/kos-ccm.yaml | kubectl apply -f -   # a pipe in quotes\n\
                 OS_CLIENT_CONFIG_FILE=./clouds.yaml openstack server list\n\
                 cargo run -p kos -- artefacts \\\n  -f examples/air-gapped.yaml --output json\n```\n";
    let (problems, kos) = check_page(dir.path(), "right.md", right);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        kos,
        [vec![
            "artefacts".to_owned(),
            "-f".into(),
            "examples/air-gapped.yaml".into(),
            "--output".into(),
            "json".into()
        ]]
    );
    assert_eq!(
        commands("sed 's|a|b|' f | kubectl apply -f -"),
        [
            vec!["sed".to_owned(), "s|a|b|".into(), "f".into()],
            vec![
                "kubectl".to_owned(),
                "apply".into(),
                "-f".into(),
                "-".into()
            ]
        ]
    );
}
