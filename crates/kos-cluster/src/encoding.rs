//! A spec's bytes as text: UTF-8 only (what YAML files are in practice and what kos writes), a leading UTF-8
//! byte-order mark dropped. Anything else is one diagnostic saying what the file is and how to convert it,
//! pointing at the first byte that is not UTF-8.

use miette::SourceSpan;

use crate::diagnostics::{Code, Diagnostic};

const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// The text of `bytes`, or the problem with a text to show it against (the bytes read as far as they go).
pub(crate) fn decode(bytes: &[u8]) -> Result<&str, Box<(String, Diagnostic)>> {
    let bytes = bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes);
    let wide = match bytes {
        [0, 0, 0xfe, 0xff, ..] | [0xff, 0xfe, 0, 0, ..] => Some("UTF-32"),
        [0xfe, 0xff, ..] | [0xff, 0xfe, ..] => Some("UTF-16"),
        _ => None,
    };
    if let Some(encoding) = wide {
        return Err(Box::new((
            String::new(),
            Diagnostic::error(
                Code::Encoding,
                "",
                format!("the file is {encoding} (it starts with a {encoding} byte-order mark); kos reads UTF-8"),
            )
            .label(SourceSpan::from(0..0), "here")
            .help(format!(
                "save it as UTF-8, e.g. `iconv -f {encoding} -t UTF-8 FILE > FILE.utf8`; nothing else was checked"
            )),
        )));
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(text),
        Err(e) => {
            let at = e.valid_up_to();
            let shown = String::from_utf8_lossy(bytes).into_owned();
            let byte = bytes.get(at).copied().unwrap_or_default();
            let len = shown[at..].chars().next().map_or(0, char::len_utf8);
            Err(Box::new((
                shown,
                Diagnostic::error(
                    Code::Encoding,
                    "",
                    format!("the file is not UTF-8: byte 0x{byte:02x} cannot start or continue a UTF-8 character"),
                )
                .label(SourceSpan::from(at..at + len), "not UTF-8")
                .help(
                    "save the file as UTF-8 (from Latin-1, e.g. `iconv -f LATIN1 -t UTF-8 FILE > FILE.utf8`); \
                     nothing else was checked",
                ),
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_with_or_without_bom_is_text() {
        assert_eq!(decode(b"a: 1\n").ok(), Some("a: 1\n"));
        assert_eq!(decode(b"\xef\xbb\xbfa: 1\n").ok(), Some("a: 1\n"));
    }

    #[test]
    fn other_encodings_are_named_with_the_place_and_the_fix() {
        let Err(e) = decode(b"\xff\xfea\x00:\x00") else {
            panic!("UTF-16 accepted")
        };
        let d = &e.1;
        assert!(d.message.starts_with("the file is UTF-16"), "{}", d.message);
        assert!(
            d.help
                .as_deref()
                .is_some_and(|h| h.contains("iconv -f UTF-16"))
        );
        let Err(e) = decode(b"name: caf\xe9\n") else {
            panic!("Latin-1 accepted")
        };
        let (shown, d) = &*e;
        assert_eq!(
            d.message,
            "the file is not UTF-8: byte 0xe9 cannot start or continue a UTF-8 character"
        );
        assert_eq!(d.primary_span().map(|s| s.offset()), Some(9));
        assert!(shown.starts_with("name: caf"));
    }
}
