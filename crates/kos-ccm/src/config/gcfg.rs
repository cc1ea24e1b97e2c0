//! A reader for gcfg, the INI dialect of Go's `gopkg.in/gcfg.v1` that the upstream CCM reads
//! cloud.conf with. General INI crates get it wrong (bare booleans, quoted secrets with `;` or `#`,
//! `\"` outside quotes), so this follows gcfg's scanner (`scanner/scanner.go`) and reader
//! (`read.go`) rule by rule:
//!
//! - `[section]` and `[section "subsection"]`; whitespace may surround the names. Section and
//!   variable names start with a letter and go on with letters, digits and `-` (so `auth_url` is an
//!   error). Subsection names are quoted, may not be empty and know only the escapes `\\` and `\"`.
//! - `name = value` or a bare `name` (no value at all, which gcfg reads as `true` for booleans).
//! - A value starts after the whitespace following `=` and ends at an unquoted newline, `;` or `#`;
//!   unquoted trailing whitespace is dropped. Double quotes may cover any part of it and keep `;`,
//!   `#` and whitespace; inside them `\\`, `\"`, `\n` and `\t` are the only escapes. Outside quotes
//!   `\"` is a literal quote and a `\` at the end of a line continues the value on the next line.
//!   Carriage returns are dropped from values.
//! - `;` and `#` start comments wherever a token may start.
//! - A NUL byte or invalid UTF-8 anywhere is an error; a leading UTF-8 byte-order mark is skipped.
//!
//! Unlike gcfg, which stops at the first error, this reader resumes at the next line so that one
//! run reports every syntax error. Positions are 1-based lines and columns counted in characters.

use std::fmt;

/// Where something starts in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    pub line: u32,
    pub column: u32,
}

/// One `name = value` (or bare `name`) line, names as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    /// `None` for a bare `name`, which is not the same as `name =` (an empty value).
    pub value: Option<String>,
    pub pos: Pos,
}

/// One section header and the entries under it. A section named twice in a file appears twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    pub subsection: Option<String>,
    pub pos: Pos,
    pub entries: Vec<Entry>,
}

impl Section {
    /// `[Name]` or `[Name "sub"]`, as messages show it.
    pub fn label(&self) -> String {
        section_label(&self.name, self.subsection.as_deref())
    }
}

/// `[Name]` or `[Name "sub"]`.
pub fn section_label(name: &str, subsection: Option<&str>) -> String {
    match subsection {
        Some(sub) => format!("[{name} {}]", quote_subsection(sub)),
        None => format!("[{name}]"),
    }
}

/// A parsed file: its sections in file order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Document {
    pub sections: Vec<Section>,
}

/// A syntax error: where, in which section and key when known, and what. A key is named only when
/// the error is in its value (after its `=`): a line that fails before that may be no variable at
/// all but part of a secret (a value cut by a stray quote or newline).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SyntaxError {
    pub file: String,
    pub pos: Pos,
    /// `[Section] key` when the error is inside a value, `[Section]` before one.
    pub context: Option<String>,
    pub kind: SyntaxErrorKind,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.pos.line, self.pos.column)?;
        if let Some(c) = &self.context {
            write!(f, "{c}: ")?;
        }
        write!(f, "{}", self.kind)
    }
}

/// What went wrong. Messages never quote a value's characters: the value may be a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxErrorKind {
    #[error("illegal character NUL")]
    Nul,
    #[error("illegal UTF-8 encoding")]
    InvalidUtf8,
    #[error("illegal character {0} (names are letters, digits and '-')")]
    IllegalChar(String),
    #[error("string not terminated: a closing '\"' is missing on this line")]
    Unterminated,
    #[error(
        "unknown escape sequence: a subsection name knows only \\\\ and \\\", a quoted value \\\\, \\\", \\n and \\t"
    )]
    UnknownEscape,
    #[error(
        "unquoted '\\' must be followed by a new line (continuation) or a double quote; quote the value and write \\\\ for a backslash"
    )]
    BareBackslash,
    #[error("expected a section name after '['")]
    ExpectedSectionName,
    #[error("empty subsection name: write [{0}] for no subsection")]
    EmptySubsection(String),
    #[error("expected ']' to close the section header")]
    ExpectedRBracket,
    #[error("subsection names are quoted: write [{0} \"{1}\"]")]
    UnquotedSubsection(String, String),
    #[error("expected the end of the line after {0}")]
    ExpectedEol(&'static str),
    // The two below keep the name for callers, but never show it: a line that does not parse may
    // be a secret (a password that slipped onto a line of its own).
    #[error("a variable before any section header")]
    OutsideSection(String),
    #[error("expected '=' after the variable name")]
    ExpectedAssign(String),
    #[error("expected a section header or a variable declaration")]
    ExpectedDeclaration,
}

/// Parses raw bytes: invalid UTF-8 is reported with its position rather than refused wholesale.
pub fn parse_bytes(file: &str, src: &[u8]) -> Result<Document, Vec<SyntaxError>> {
    match std::str::from_utf8(src) {
        Ok(s) => parse(file, s),
        Err(e) => {
            let good = String::from_utf8_lossy(&src[..e.valid_up_to()]);
            Err(vec![SyntaxError {
                file: file.to_owned(),
                pos: end_pos(&good),
                context: None,
                kind: SyntaxErrorKind::InvalidUtf8,
            }])
        }
    }
}

/// Parses a gcfg file; `file` names it in errors.
pub fn parse(file: &str, src: &str) -> Result<Document, Vec<SyntaxError>> {
    let src = src.strip_prefix('\u{feff}').unwrap_or(src);
    let nuls: Vec<SyntaxError> = src
        .match_indices('\0')
        .map(|(i, _)| SyntaxError {
            file: file.to_owned(),
            pos: end_pos(&src[..i]),
            context: None,
            kind: SyntaxErrorKind::Nul,
        })
        .collect();
    if !nuls.is_empty() {
        return Err(nuls);
    }
    Parser {
        sc: Scanner::new(src),
        file,
        doc: Document::default(),
        errors: Vec::new(),
        current: Current::None,
    }
    .run()
}

/// The position just after `text`.
fn end_pos(text: &str) -> Pos {
    let line = text.matches('\n').count() as u32 + 1;
    let last = text.rsplit('\n').next().unwrap_or("");
    Pos {
        line,
        column: last.chars().count() as u32 + 1,
    }
}

/// Quotes a value so that gcfg reads it back unchanged (except carriage returns, which gcfg
/// always drops from values).
pub fn quote_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Quotes a subsection name (which may hold neither a newline nor be empty).
pub fn quote_subsection(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        if c == '\\' || c == '"' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn is_letter(c: char) -> bool {
    c.is_ascii_alphabetic() || (!c.is_ascii() && c.is_alphabetic())
}

fn is_digit(c: char) -> bool {
    c.is_ascii_digit() || (!c.is_ascii() && c.is_numeric())
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r')
}

#[derive(Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// A quoted subsection name, unescaped.
    Str(String),
    LBrack,
    RBrack,
    Assign,
    Eol,
    Eof,
}

type Fail = (Pos, SyntaxErrorKind);

struct Scanner {
    chars: Vec<char>,
    i: usize,
    line: u32,
    column: u32,
}

impl Scanner {
    fn new(src: &str) -> Self {
        Scanner {
            chars: src.chars().collect(),
            i: 0,
            line: 1,
            column: 1,
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }

    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            column: self.column,
        }
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.i += 1;
        if c == '\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(c)
    }

    /// After an error: drop the rest of the line, unless the error already ended it.
    fn skip_line(&mut self) {
        if self.i > 0 && self.chars.get(self.i - 1) == Some(&'\n') {
            return;
        }
        while self.peek().is_some_and(|c| c != '\n') {
            self.bump();
        }
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(is_space) {
            self.bump();
        }
    }

    fn scan(&mut self) -> Result<(Pos, Tok), Fail> {
        loop {
            self.skip_space();
            let pos = self.pos();
            let Some(c) = self.peek() else {
                return Ok((pos, Tok::Eof));
            };
            if is_letter(c) {
                let mut name = String::new();
                while let Some(c) = self
                    .peek()
                    .filter(|&c| is_letter(c) || is_digit(c) || c == '-')
                {
                    name.push(c);
                    self.bump();
                }
                return Ok((pos, Tok::Ident(name)));
            }
            self.bump();
            let tok = match c {
                '\n' => Tok::Eol,
                '"' => Tok::Str(self.subsection_string(pos)?),
                '[' => Tok::LBrack,
                ']' => Tok::RBrack,
                '=' => Tok::Assign,
                ';' | '#' => {
                    while self.peek().is_some_and(|c| c != '\n') {
                        self.bump();
                    }
                    continue;
                }
                c => return Err((pos, SyntaxErrorKind::IllegalChar(describe_char(c)))),
            };
            return Ok((pos, tok));
        }
    }

    /// The rest of a quoted subsection name, opening quote consumed.
    fn subsection_string(&mut self, start: Pos) -> Result<String, Fail> {
        let mut s = String::new();
        loop {
            match self.peek() {
                None | Some('\n') => return Err((start, SyntaxErrorKind::Unterminated)),
                Some('"') => {
                    self.bump();
                    return Ok(s);
                }
                Some('\\') => {
                    let at = self.pos();
                    self.bump();
                    match self.peek() {
                        Some(c @ ('\\' | '"')) => {
                            s.push(c);
                            self.bump();
                        }
                        _ => return Err((at, SyntaxErrorKind::UnknownEscape)),
                    }
                }
                Some(c) => {
                    s.push(c);
                    self.bump();
                }
            }
        }
    }

    /// A value after `=`, unquoted and unescaped (gcfg's `scanValString` followed by `unquote`).
    fn value(&mut self) -> Result<String, Fail> {
        self.skip_space();
        let start = self.pos();
        let mut out = String::new();
        // Length of `out` up to the last character that is quoted or not whitespace: what
        // follows it is trailing whitespace and is dropped.
        let mut keep = 0;
        let mut quoted = false;
        loop {
            let Some(c) = self.peek() else {
                if quoted {
                    return Err((start, SyntaxErrorKind::Unterminated));
                }
                break;
            };
            if !quoted && matches!(c, '\n' | ';' | '#') {
                break;
            }
            if quoted && c == '\n' {
                return Err((start, SyntaxErrorKind::Unterminated));
            }
            let at = self.pos();
            self.bump();
            match c {
                '\\' if quoted => {
                    let e = match self.peek() {
                        Some('\\') => '\\',
                        Some('"') => '"',
                        Some('n') => '\n',
                        Some('t') => '\t',
                        _ => return Err((at, SyntaxErrorKind::UnknownEscape)),
                    };
                    self.bump();
                    out.push(e);
                }
                '\\' => {
                    if self.peek() == Some('\r') {
                        self.bump();
                    }
                    match self.peek() {
                        Some('\n') => {
                            self.bump();
                        }
                        Some('"') => {
                            self.bump();
                            out.push('"');
                        }
                        _ => return Err((at, SyntaxErrorKind::BareBackslash)),
                    }
                }
                '"' => quoted = !quoted,
                '\r' => {}
                c => out.push(c),
            }
            if quoted || !is_space(c) {
                keep = out.len();
            }
        }
        out.truncate(keep);
        Ok(out)
    }
}

/// `U+005F '_'`, as Go's `%#U` prints a character.
fn describe_char(c: char) -> String {
    format!("U+{:04X} '{c}'", c as u32)
}

enum Current {
    /// Before the first header.
    None,
    /// After a broken header: its entries are dropped without further errors.
    Broken,
    Section(usize),
}

struct Parser<'a> {
    sc: Scanner,
    file: &'a str,
    doc: Document,
    errors: Vec<SyntaxError>,
    current: Current,
}

impl Parser<'_> {
    fn run(mut self) -> Result<Document, Vec<SyntaxError>> {
        loop {
            let step = match self.sc.scan() {
                Ok((_, Tok::Eof)) => break,
                Ok((_, Tok::Eol)) => Ok(()),
                Ok((pos, Tok::LBrack)) => self.header(pos),
                Ok((pos, Tok::Ident(name))) => self.variable(pos, name),
                Ok((pos, _)) => Err((pos, SyntaxErrorKind::ExpectedDeclaration, None)),
                Err((pos, kind)) => Err((pos, kind, None)),
            };
            if let Err((pos, kind, context)) = step {
                self.errors.push(SyntaxError {
                    file: self.file.to_owned(),
                    pos,
                    context,
                    kind,
                });
                self.sc.skip_line();
            }
        }
        if self.errors.is_empty() {
            Ok(self.doc)
        } else {
            Err(self.errors)
        }
    }

    fn header(&mut self, pos: Pos) -> Result<(), (Pos, SyntaxErrorKind, Option<String>)> {
        let r = self.header_inner(pos);
        if r.is_err() {
            self.current = Current::Broken;
        }
        r.map_err(|(p, k)| (p, k, None))
    }

    fn header_inner(&mut self, pos: Pos) -> Result<(), Fail> {
        let (p, tok) = self.sc.scan()?;
        let Tok::Ident(name) = tok else {
            return Err((p, SyntaxErrorKind::ExpectedSectionName));
        };
        let (mut p, mut tok) = self.sc.scan()?;
        let mut subsection = None;
        if let Tok::Str(sub) = tok {
            if sub.is_empty() {
                return Err((p, SyntaxErrorKind::EmptySubsection(name)));
            }
            subsection = Some(sub);
            (p, tok) = self.sc.scan()?;
        }
        if let (None, Tok::Ident(sub)) = (&subsection, &tok) {
            return Err((p, SyntaxErrorKind::UnquotedSubsection(name, sub.clone())));
        }
        if tok != Tok::RBrack {
            return Err((p, SyntaxErrorKind::ExpectedRBracket));
        }
        let (p, tok) = self.sc.scan()?;
        if !matches!(tok, Tok::Eol | Tok::Eof) {
            return Err((p, SyntaxErrorKind::ExpectedEol("the section header")));
        }
        self.doc.sections.push(Section {
            name,
            subsection,
            pos,
            entries: Vec::new(),
        });
        self.current = Current::Section(self.doc.sections.len() - 1);
        Ok(())
    }

    fn variable(
        &mut self,
        pos: Pos,
        name: String,
    ) -> Result<(), (Pos, SyntaxErrorKind, Option<String>)> {
        let index = match self.current {
            Current::None => return Err((pos, SyntaxErrorKind::OutsideSection(name), None)),
            Current::Broken => None,
            Current::Section(i) => Some(i),
        };
        let section = index.map(|i| self.doc.sections[i].label());
        let named = index.map(|i| format!("{} {name}", self.doc.sections[i].label()));
        // Before its '=' the line may be no variable at all (a secret on a line of its own, or the
        // rest of one cut by a stray quote): only the section is named, and a character that cannot
        // follow the name not even that. After the '=', the name is a key's and says which value.
        let before = |(p, k): Fail| {
            let c = (!matches!(k, SyntaxErrorKind::IllegalChar(_))).then(|| section.clone());
            (p, k, c.flatten())
        };
        let after = |(p, k): Fail| (p, k, named.clone());
        let (p, tok) = self.sc.scan().map_err(before)?;
        let value = match tok {
            Tok::Eol | Tok::Eof => None,
            Tok::Assign => {
                let v = self.sc.value().map_err(after)?;
                let (p, tok) = self.sc.scan().map_err(after)?;
                if !matches!(tok, Tok::Eol | Tok::Eof) {
                    return Err(after((p, SyntaxErrorKind::ExpectedEol("the value"))));
                }
                Some(v)
            }
            _ => return Err(before((p, SyntaxErrorKind::ExpectedAssign(name)))),
        };
        if let Some(i) = index {
            self.doc.sections[i]
                .entries
                .push(Entry { name, value, pos });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(src: &str) -> Vec<(String, Option<String>)> {
        let doc = parse("t.conf", src).unwrap_or_else(|e| panic!("{e:?}"));
        doc.sections
            .into_iter()
            .flat_map(|s| s.entries)
            .map(|e| (e.name, e.value))
            .collect()
    }

    #[test]
    fn values() {
        let v = one(concat!(
            "[s]\n",
            "a = plain value   \n",
            "b = \"quoted ; # kept\"  ; comment\n",
            "c = x\"y z\"w\n",
            "d = \\\"lit\\\"\n",
            "e = \"esc \\\\ \\\" \\n \\t\"\n",
            "f = one \\\n  two\n",
            "g =\n",
            "h\n",
            "i = crlf\r\n",
        ));
        let want = [
            ("a", Some("plain value")),
            ("b", Some("quoted ; # kept")),
            ("c", Some("xy zw")),
            ("d", Some("\"lit\"")),
            ("e", Some("esc \\ \" \n \t")),
            ("f", Some("one   two")),
            ("g", Some("")),
            ("h", None),
            ("i", Some("crlf")),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(k, v)| (k.to_string(), v.map(str::to_owned)))
            .collect();
        assert_eq!(v, want);
    }

    #[test]
    fn headers() {
        let doc = parse(
            "t",
            "\u{feff}[ Global ] ; c\n[LoadBalancerClass \"a \\\"b\\\"\"]\nx=1",
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(doc.sections[0].name, "Global");
        assert_eq!(doc.sections[1].subsection.as_deref(), Some("a \"b\""));
        assert_eq!(doc.sections[1].entries[0].pos, Pos { line: 3, column: 1 });
    }

    #[test]
    fn errors_resume_at_next_line() {
        let Err(e) = parse("t", "[s]\na = \"x\nb_c = 1\n[s\nok = 1\n") else {
            panic!("accepted")
        };
        let kinds: Vec<_> = e.iter().map(|e| (e.pos.line, e.kind.clone())).collect();
        assert_eq!(
            kinds,
            [
                (2, SyntaxErrorKind::Unterminated),
                (3, SyntaxErrorKind::IllegalChar("U+005F '_'".into())),
                (4, SyntaxErrorKind::ExpectedRBracket),
            ]
        );
    }
}
