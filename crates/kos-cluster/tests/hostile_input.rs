//! Issue 12: what a hostile or broken spec makes kos print. Terminal escape sequences in the file are shown
//! escaped, a huge line is quoted as an excerpt, and alias bombs, multi-document files and other encodings get
//! messages a person understands, each with its fix.

use kos_cluster::{Code, Report, load, load_bytes};

const HEAD: &str = "apiVersion: kos.dev/v1alpha1\nkind: Cluster\n";

/// The report as a terminal shows it, without colour (the CLI renders that way).
fn rendered(report: &Report) -> String {
    let mut out = String::new();
    miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode_nocolor())
        .render_report(&mut out, report)
        .expect("render");
    out
}

fn errors(text: &str) -> Report {
    load("cluster.yaml", text).expect_err("invalid")
}

#[test]
fn escape_sequences_in_the_spec_are_shown_escaped() {
    let report = errors(&format!(
        "{HEAD}metadata: {{name: \"de\\e]0;pwned\\u0007\\e[31mmo\"}}\nspec: {{}}\n"
    ));
    assert!(report.errors().any(|d| d.code == Code::Name));
    let out = rendered(&report);
    assert!(!out.contains('\x1b') && !out.contains('\x07'), "{out:?}");
    assert!(out.contains("\\u{1b}"), "{out}");
    // The snippet still points at the name.
    assert!(out.contains("not a valid name"), "{out}");

    // Raw control bytes in the file itself, where YAML does not allow them: the snippet shows them escaped.
    let report = errors(&format!(
        "{HEAD}metadata: {{name: a\x1b[2J\x1b[31mb}}\nspec: {{}}\n"
    ));
    let out = rendered(&report);
    assert!(!out.contains('\x1b'), "{out:?}");
    assert!(out.contains("\\u{1b}[2J"), "{out}");
}

#[test]
fn a_huge_line_is_quoted_as_an_excerpt() {
    let huge = "x".repeat(5_000_000);
    let report = errors(&format!("{HEAD}metadata: {{name: {huge}}}\nspec: {{}}\n"));
    let out = rendered(&report);
    assert!(out.len() < 20_000, "{} bytes printed", out.len());
    assert!(out.contains("metadata.name"), "{out}");
    assert!(out.contains('…'), "{out}");
}

#[test]
fn an_alias_bomb_is_stopped_early_with_a_message_and_a_fix() {
    let mut text = format!("{HEAD}a: &a [x, x, x, x, x, x, x, x, x]\n");
    for (prev, name) in ["a", "b", "c", "d", "e", "f", "g", "h"]
        .windows(2)
        .map(|w| (w[0], w[1]))
    {
        let items = vec![format!("*{prev}"); 9].join(", ");
        text.push_str(&format!("{name}: &{name} [{items}]\n"));
    }
    let report = errors(&text);
    let d = report.errors().next().expect("one error");
    assert_eq!(d.code, Code::Syntax);
    assert!(
        d.message
            .starts_with("the document expands to more than 20000 values"),
        "{}",
        d.message
    );
    assert!(
        d.help
            .as_deref()
            .is_some_and(|h| h.starts_with("write the values out"))
    );
}

#[test]
fn a_second_document_is_named_as_such() {
    let report = errors(&format!("{HEAD}metadata: {{name: a}}\n---\n{HEAD}"));
    let d = report.errors().next().expect("one error");
    assert_eq!(
        d.message,
        "the file holds more than one YAML document (a `---` line starts another)"
    );
    assert!(
        d.help
            .as_deref()
            .is_some_and(|h| h.contains("one cluster per file"))
    );
    assert!(!rendered(&report).contains("from_str_multiple"));
}

#[test]
fn other_encodings_say_what_the_file_is_and_how_to_convert_it() {
    let latin1 = [HEAD.as_bytes(), b"metadata: {name: caf\xe9}\n"].concat();
    let report = load_bytes("cluster.yaml", &latin1).expect_err("not UTF-8");
    let d = report.errors().next().expect("one error");
    assert_eq!(d.code, Code::Encoding);
    assert_eq!(
        report.line_col(d.primary_span().expect("span").offset()),
        (3, 21)
    );
    let out = rendered(&report);
    assert!(out.contains("help: save the file as UTF-8"), "{out}");

    let utf16: Vec<u8> = [0xff, 0xfe]
        .into_iter()
        .chain(HEAD.encode_utf16().flat_map(u16::to_le_bytes))
        .collect();
    let report = load_bytes("cluster.yaml", &utf16).expect_err("UTF-16");
    assert!(rendered(&report).contains("the file is UTF-16"));

    // A UTF-8 byte-order mark is fine, and positions stay right after it.
    let bom = [
        b"\xef\xbb\xbf".as_slice(),
        HEAD.as_bytes(),
        b"metadata: {name: Demo}\n",
    ]
    .concat();
    let report = load_bytes("cluster.yaml", &bom).expect_err("bad name");
    let d = report
        .errors()
        .find(|d| d.code == Code::Name)
        .expect("name error");
    assert_eq!(
        report.line_col(d.primary_span().expect("span").offset()),
        (3, 18)
    );
}
