//! Property tests of the gcfg reader against a small reference model: random documents are
//! rendered in gcfg syntax with random quoting, escapes, continuations, comments, whitespace, case
//! changes and line endings, parsed, and compared with the model. Then a bounded fuzz loop.

use kos_ccm::config::CloudConfig;
use kos_ccm::config::gcfg::{self, quote_subsection, quote_value};
use proptest::prelude::*;

/// Sections in file order: name, subsection, entries (name, value; `None` = bare).
type Flat = Vec<(String, Option<String>, Vec<(String, Option<String>)>)>;

#[derive(Debug, Clone)]
struct Model {
    sections: Flat,
}

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z\u{e9}][a-zA-Z0-9\u{e9}-]{0,12}"
}

/// Characters that stress quoting: quotes, backslashes, comment starters, whitespace, brackets,
/// equals signs and non-ASCII.
fn tricky(max: usize, newline: bool) -> impl Strategy<Value = String> {
    let chars = if newline {
        "[a-z0-9 \t\"\\\\;#=\\[\\]\u{e9}\u{1F600}\n-]"
    } else {
        "[a-z0-9 \t\"\\\\;#=\\[\\]\u{e9}\u{1F600}-]"
    };
    proptest::collection::vec(
        proptest::string::string_regex(chars).unwrap_or_else(|e| panic!("{e}")),
        0..max,
    )
    .prop_map(|v| v.concat())
}

fn model() -> impl Strategy<Value = Model> {
    let entry = (name(), proptest::option::weighted(0.85, tricky(12, true)));
    let sub = proptest::option::of(tricky(8, false).prop_filter("non-empty", |s| !s.is_empty()));
    let section = (name(), sub, proptest::collection::vec(entry, 0..6));
    proptest::collection::vec(section, 0..5).prop_map(|sections| Model { sections })
}

/// How each piece is written: drawn from a seed so that one model has many renderings.
struct Style(u64);

impl Style {
    fn pick(&mut self, n: u64) -> u64 {
        // xorshift: deterministic per seed, enough variety for rendering choices.
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn case(&mut self, s: &str) -> String {
        s.chars()
            .map(|c| match self.pick(3) {
                0 => c.to_uppercase().collect::<String>(),
                1 => c.to_lowercase().collect(),
                _ => c.to_string(),
            })
            .collect()
    }

    fn space(&mut self) -> &'static str {
        ["", " ", "  ", "\t", " \t "][self.pick(5) as usize]
    }

    fn comment(&mut self) -> String {
        match self.pick(4) {
            0 => format!("{}; note \"x\" = [y]", self.space()),
            1 => format!("{}# another; comment", self.space()),
            _ => String::new(),
        }
    }

    /// Writes a value in one of several equivalent spellings.
    fn value(&mut self, v: &str) -> String {
        match self.pick(3) {
            0 => quote_value(v),
            _ => {
                // Quote only what needs it, char by char, with continuations between plain chars.
                let chars: Vec<char> = v.chars().collect();
                let mut out = String::new();
                for (i, &c) in chars.iter().enumerate() {
                    let edge = i == 0 || i + 1 == chars.len();
                    let piece = match c {
                        '"' if self.pick(2) == 0 => "\\\"".to_owned(),
                        ';' | '#' | '"' | '\\' | '\n' | '\t' => quote_value(&c.to_string()),
                        ' ' if edge => quote_value(" "),
                        c => c.to_string(),
                    };
                    out += &piece;
                    if i + 1 < chars.len() && self.pick(6) == 0 {
                        out += "\\\n";
                    }
                }
                out
            }
        }
    }
}

fn render(m: &Model, seed: u64) -> String {
    let mut st = Style(seed | 1);
    let eol = if st.pick(4) == 0 { "\r\n" } else { "\n" };
    let mut out = String::new();
    if st.pick(3) == 0 {
        out += &format!("; header comment{eol}{eol}");
    }
    for (name, sub, entries) in &m.sections {
        let sub = sub
            .as_ref()
            .map(|s| format!("{}{}", st.space(), quote_subsection(s)))
            .unwrap_or_default();
        out += &format!(
            "[{}{}{sub}{}]{}{eol}",
            st.space(),
            st.case(name),
            st.space(),
            st.comment()
        );
        for (k, v) in entries {
            out += st.space();
            out += &st.case(k);
            if let Some(v) = v {
                let v = if v.is_empty() && st.pick(2) == 0 {
                    String::new()
                } else {
                    st.value(v)
                };
                out += &format!("{}={}{v}", st.space(), st.space());
            }
            out += &st.comment();
            out += eol;
            if st.pick(5) == 0 {
                out += &format!("{}{eol}", st.space());
            }
        }
    }
    out
}

fn flatten(doc: &gcfg::Document) -> Flat {
    doc.sections
        .iter()
        .map(|s| {
            (
                s.name.to_lowercase(),
                s.subsection.clone(),
                s.entries
                    .iter()
                    .map(|e| (e.name.to_lowercase(), e.value.clone()))
                    .collect(),
            )
        })
        .collect()
}

fn expected(m: &Model) -> Flat {
    m.sections
        .iter()
        .map(|(n, s, es)| {
            (
                n.to_lowercase(),
                s.clone(),
                es.iter()
                    .map(|(k, v)| (k.to_lowercase(), v.clone()))
                    .collect(),
            )
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn rendered_documents_parse_back(m in model(), seed in any::<u64>()) {
        let text = render(&m, seed);
        let doc = gcfg::parse("p.conf", &text)
            .map_err(|e| TestCaseError::fail(format!("{e:?}\n---\n{text}")))?;
        prop_assert_eq!(flatten(&doc), expected(&m), "\n---\n{}", text);
    }

    /// Typed semantics: multi-valued keys append and a bare key clears; single-valued keys keep
    /// the last value; a bare boolean is true; names match in any case.
    #[test]
    fn typed_keys_follow_gcfg_rules(
        ops in proptest::collection::vec((0u8..3, proptest::option::weighted(0.8, "[a-z0-9.]{1,8}"), any::<bool>()), 0..12),
        seed in any::<u64>(),
    ) {
        let mut st = Style(seed | 1);
        let mut text = String::from("[Global]\nauth-url = https://k\nregion = r\nusername = u\npassword = p\n[LoadBalancer]\n");
        let mut networks: Vec<String> = Vec::new();
        let mut suffix: Option<String> = None;
        let mut monitor = false;
        let mut nets_text = String::from("[Networking]\n");
        for (key, value, flag) in &ops {
            match key {
                0 => {
                    let k = st.case("public-network-name");
                    match value {
                        Some(v) => { networks.push(v.clone()); nets_text += &format!("{k} = {}\n", st.value(v)); }
                        None => { networks.clear(); nets_text += &format!("{k}\n"); }
                    }
                }
                1 => {
                    let v = value.clone().unwrap_or_else(|| "x".into());
                    text += &format!("{} = {}\n", st.case("ingress-hostname-suffix"), st.value(&v));
                    suffix = Some(v);
                }
                _ => {
                    let k = st.case("create-monitor");
                    if value.is_none() { monitor = true; text += &format!("{k}\n"); }
                    else { monitor = *flag; text += &format!("{k} = {}\n", st.case(if *flag { "yes" } else { "off" })); }
                }
            }
        }
        text += &nets_text;
        let cfg = CloudConfig::parse("t.conf", &text)
            .map_err(|e| TestCaseError::fail(format!("{e}\n---\n{text}")))?
            .config;
        prop_assert_eq!(&cfg.networking.public_network_names, &networks);
        prop_assert_eq!(cfg.load_balancer.ingress_hostname_suffix, suffix.unwrap_or_else(|| "nip.io".into()));
        prop_assert_eq!(cfg.load_balancer.create_monitor, monitor);
    }
}

/// Input that looks like gcfg often enough to reach deep into the reader.
fn gcfgish() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just("\"".to_owned()),
        Just("\\".to_owned()),
        Just("=".to_owned()),
        Just(";".to_owned()),
        Just("#".to_owned()),
        Just("\n".to_owned()),
        Just("\r".to_owned()),
        Just(" ".to_owned()),
        Just("\0".to_owned()),
        Just("[Global]\n".to_owned()),
        Just("[LoadBalancerClass \"a\"]\n".to_owned()),
        Just("monitor-delay".to_owned()),
        Just("password".to_owned()),
        "[a-zA-Z0-9_-]{1,6}",
        any::<char>().prop_map(|c| c.to_string()),
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn fuzz_never_panics(s in gcfgish(), bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = gcfg::parse("f.conf", &s);
        let _ = CloudConfig::parse("f.conf", &s);
        let _ = gcfg::parse_bytes("f.conf", &bytes);
        if let Ok(d) = gcfg::parse("f.conf", &s) {
            // Whatever parses must survive the typed layer and the listing.
            if let Ok(l) = CloudConfig::from_document("f.conf", &d) {
                let _ = l.config.effective();
            }
        }
    }

    #[test]
    fn fuzz_arbitrary_text(s in any::<String>()) {
        let _ = CloudConfig::parse("f.conf", &s);
    }
}
