//! Spec problems as data, rendered by miette.
//!
//! A [`Diagnostic`] is plain data (severity, code, field path, message, help, labelled byte spans) so that
//! later layers (preflight) can add their own problems about the same `cluster.yaml`. A [`Report`] owns the
//! source text once and hands it to miette as the parent source of every diagnostic, so a whole run renders as
//! one report with the file name and every problem in it.
//!
//! What miette draws is a printable view of both ([`printable`]): control characters and terminal escape
//! sequences from the file are shown escaped, never interpreted by the terminal, and a line or a word too long
//! to read is cut to an excerpt around what is labelled, so a 50 MB line is never printed whole.

use std::fmt;
use std::sync::{Arc, OnceLock};

use miette::{LabeledSpan, NamedSource, SourceCode, SourceSpan};

/// How bad a problem is: errors stop `kos` before any cloud call, warnings are printed and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Worth knowing; the spec is still used.
    Warning,
    /// The spec is rejected.
    Error,
}

/// Stable identifier of a kind of problem; rendered as `kos::spec::<name>` (or `kos::preflight::<name>` for
/// what the cloud says) and meant for scripts and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Code {
    /// The text is not YAML.
    Syntax,
    /// The file is not UTF-8 text.
    Encoding,
    /// A key that the schema does not know.
    UnknownField,
    /// A key given twice in one mapping.
    DuplicateField,
    /// A required key is absent.
    MissingField,
    /// A value of the wrong YAML type (string for a number, list for a map...).
    WrongType,
    /// A value outside the allowed set or range.
    InvalidValue,
    /// `apiVersion` is not one this kos reads.
    ApiVersion,
    /// `kind` is not `Cluster`.
    Kind,
    /// `kubernetesVersion` is malformed or outside the supported window.
    Version,
    /// A name breaks DNS-1123 rules or the length kos needs for resource names and tags.
    Name,
    /// A tag breaks Nova's tag rules or uses a key kos reserves.
    Tag,
    /// Node pool names must be unique.
    DuplicateName,
    /// A node pool name whose objects would take the ids of kos's own (`cp`, `port-…`, `vol-…`).
    ReservedName,
    /// A string that is not an IPv4 CIDR (or IP address where one is expected).
    InvalidCidr,
    /// A CIDR with host bits set (`10.0.0.1/24`).
    CidrHostBits,
    /// A CIDR too small or too large for its role.
    CidrSize,
    /// Two of the node, pod and service ranges overlap.
    CidrOverlap,
    /// A range collides with a well-known range (link-local, Docker's bridge).
    CidrReserved,
    /// The control-plane count cannot keep etcd quorum.
    ControlPlaneCount,
    /// A combination of settings that cannot work together.
    Conflict,
    /// A boot volume size outside 10–2048 GB.
    BootVolume,
    /// A Kubernetes label key or value breaks the label syntax.
    Label,
    /// A taint that is not `key[=value]:Effect`.
    Taint,
    /// `sshPublicKey` is not an OpenSSH public key line.
    SshKey,
    /// An addon kos has no verified manifest for, and the spec pins none.
    Unpinned,
    /// A setting that works but is probably not what was meant (SSH open to the world...).
    Risky,
    // Preflight: the spec is valid but the cloud cannot run it. Rendered as `kos::preflight::<name>`.
    /// A lookup the checks need failed (service down, forbidden...).
    CloudError,
    /// No image matches the name, id or tags.
    ImageNotFound,
    /// Several images match: kos never guesses.
    ImageAmbiguous,
    /// The image is not `active`, or needs more disk or RAM than the machine has.
    ImageUnusable,
    /// No flavor has this id or name.
    FlavorNotFound,
    /// The flavor cannot run the node (kubeadm's own preflight would fail), or has no root disk.
    FlavorTooSmall,
    /// The named external network does not exist or is not external, or none exists.
    ExternalNetworkNotFound,
    /// Several external networks and the spec names none.
    ExternalNetworkAmbiguous,
    /// An availability zone the spec names does not exist.
    AzNotFound,
    /// The cloud has no availability-zone API: zones were not checked.
    AzUnchecked,
    /// The nodes' compute zones are not all Cinder's and Cinder has several zones: the spec must name
    /// the one CSI volumes are made in (`addons.csiAvailabilityZone`).
    CsiZoneUnknown,
    /// The Octavia provider is not enabled.
    ProviderNotFound,
    /// The boot volume type does not exist.
    VolumeTypeNotFound,
    /// A bring-your-own network, subnet or router is missing, ambiguous or not connected as needed.
    ExistingNetwork,
    /// A range collides with a network that is routed to the project, or with the external network.
    CidrCollision,
    /// The subnet has too few free addresses for the nodes.
    SubnetFull,
    /// A quota would be exceeded.
    QuotaShort,
    /// Quota could not be read: not checked.
    QuotaUnchecked,
    /// The user has no role the cloud controller's application credential can be given.
    CredentialRoles,
}

impl Code {
    /// The name shown by miette and matched by tests, e.g. `kos::spec::cidr_overlap`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Syntax => "kos::spec::syntax",
            Self::UnknownField => "kos::spec::unknown_field",
            Self::DuplicateField => "kos::spec::duplicate_field",
            Self::MissingField => "kos::spec::missing_field",
            Self::WrongType => "kos::spec::wrong_type",
            Self::InvalidValue => "kos::spec::invalid_value",
            Self::ApiVersion => "kos::spec::api_version",
            Self::Kind => "kos::spec::kind",
            Self::Version => "kos::spec::kubernetes_version",
            Self::Name => "kos::spec::name",
            Self::Tag => "kos::spec::tag",
            Self::DuplicateName => "kos::spec::duplicate_name",
            Self::ReservedName => "kos::spec::reserved_name",
            Self::InvalidCidr => "kos::spec::invalid_cidr",
            Self::CidrHostBits => "kos::spec::cidr_host_bits",
            Self::CidrSize => "kos::spec::cidr_size",
            Self::CidrOverlap => "kos::spec::cidr_overlap",
            Self::CidrReserved => "kos::spec::cidr_reserved",
            Self::ControlPlaneCount => "kos::spec::control_plane_count",
            Self::Conflict => "kos::spec::conflict",
            Self::BootVolume => "kos::spec::boot_volume",
            Self::Label => "kos::spec::label",
            Self::Taint => "kos::spec::taint",
            Self::SshKey => "kos::spec::ssh_key",
            Self::Unpinned => "kos::spec::unpinned",
            Self::Encoding => "kos::spec::encoding",
            Self::Risky => "kos::spec::risky",
            Self::CloudError => "kos::preflight::cloud_error",
            Self::ImageNotFound => "kos::preflight::image_not_found",
            Self::ImageAmbiguous => "kos::preflight::image_ambiguous",
            Self::ImageUnusable => "kos::preflight::image_unusable",
            Self::FlavorNotFound => "kos::preflight::flavor_not_found",
            Self::FlavorTooSmall => "kos::preflight::flavor_too_small",
            Self::ExternalNetworkNotFound => "kos::preflight::external_network_not_found",
            Self::ExternalNetworkAmbiguous => "kos::preflight::external_network_ambiguous",
            Self::AzNotFound => "kos::preflight::az_not_found",
            Self::AzUnchecked => "kos::preflight::az_unchecked",
            Self::CsiZoneUnknown => "kos::preflight::csi_zone_unknown",
            Self::ProviderNotFound => "kos::preflight::provider_not_found",
            Self::VolumeTypeNotFound => "kos::preflight::volume_type_not_found",
            Self::ExistingNetwork => "kos::preflight::existing_network",
            Self::CidrCollision => "kos::preflight::cidr_collision",
            Self::SubnetFull => "kos::preflight::subnet_full",
            Self::QuotaShort => "kos::preflight::quota_short",
            Self::QuotaUnchecked => "kos::preflight::quota_unchecked",
            Self::CredentialRoles => "kos::preflight::credential_roles",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A labelled byte range of the source; the first label of a diagnostic is its primary one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    /// Byte range in the spec text.
    pub span: SourceSpan,
    /// Short text printed under the range.
    pub text: String,
}

/// One problem with a spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Whether it stops kos.
    pub severity: Severity,
    /// What kind of problem.
    pub code: Code,
    /// Dotted path of the field, e.g. `spec.nodePools[1].name` (empty for the document itself).
    pub field: String,
    /// What is wrong, starting with the field path.
    pub message: String,
    /// How to fix it.
    pub help: Option<String>,
    /// Where, primary first.
    pub labels: Vec<Label>,
}

impl Diagnostic {
    /// An error about `field`; the message gets the field path as prefix.
    #[must_use]
    pub fn error(code: Code, field: &str, message: impl fmt::Display) -> Self {
        Self::new(Severity::Error, code, field, message)
    }

    /// A warning about `field`.
    #[must_use]
    pub fn warning(code: Code, field: &str, message: impl fmt::Display) -> Self {
        Self::new(Severity::Warning, code, field, message)
    }

    fn new(severity: Severity, code: Code, field: &str, message: impl fmt::Display) -> Self {
        let message = if field.is_empty() {
            message.to_string()
        } else {
            format!("{field}: {message}")
        };
        Self {
            severity,
            code,
            field: field.to_owned(),
            message,
            help: None,
            labels: Vec::new(),
        }
    }

    /// Adds a labelled span (the first one added is the primary label).
    #[must_use]
    pub fn label(mut self, span: SourceSpan, text: impl Into<String>) -> Self {
        self.labels.push(Label {
            span,
            text: text.into(),
        });
        self
    }

    /// Sets the fix.
    #[must_use]
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// The primary span, if any.
    #[must_use]
    pub fn primary_span(&self) -> Option<SourceSpan> {
        self.labels.first().map(|l| l.span)
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Diagnostic {}

/// Without a source of its own: miette falls back to the [`Report`]'s source when rendering related items.
impl miette::Diagnostic for Diagnostic {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new(self.code.as_str()))
    }

    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.severity {
            Severity::Error => miette::Severity::Error,
            Severity::Warning => miette::Severity::Warning,
        })
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help
            .as_deref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display + 'a>)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        if self.labels.is_empty() {
            return None;
        }
        Some(Box::new(self.labels.iter().enumerate().map(|(i, l)| {
            if i == 0 {
                LabeledSpan::new_primary_with_span(Some(l.text.clone()), l.span)
            } else {
                LabeledSpan::new_with_span(Some(l.text.clone()), l.span)
            }
        })))
    }
}

/// Every problem found in one spec file, with the file's name and text for rendering.
///
/// Renders through miette as one report: the summary line, then each problem with its snippet (`related()`).
#[derive(Clone)]
pub struct Report {
    name: String,
    text: Arc<str>,
    diagnostics: Vec<Diagnostic>,
    /// What miette draws, made on first use and dropped by every change.
    view: OnceLock<Arc<View>>,
}

/// The printable form of a report: the source with control characters escaped and long lines cut, and
/// the diagnostics with their spans moved to match and their texts made printable.
struct View {
    source: NamedSource<String>,
    diagnostics: Vec<Diagnostic>,
}

/// The [`Report`] that [`crate::load`] returns when the spec has at least one error; it holds the warnings too.
pub type SpecErrors = Report;

impl Report {
    /// An empty report about `name` (the path shown to the user) with contents `text`.
    #[must_use]
    pub fn new(name: &str, text: &str) -> Self {
        Self {
            name: name.to_owned(),
            text: Arc::from(text),
            diagnostics: Vec::new(),
            view: OnceLock::new(),
        }
    }

    /// Adds a problem.
    pub fn push(&mut self, diagnostic: Diagnostic) {
        self.diagnostics.push(diagnostic);
        self.view = OnceLock::new();
    }

    fn view(&self) -> &View {
        self.view.get_or_init(|| {
            let spans = self
                .diagnostics
                .iter()
                .flat_map(|d| d.labels.iter().map(|l| l.span));
            let shown = Excerpt::of(&self.text, spans);
            let diagnostics = self
                .diagnostics
                .iter()
                .map(|d| Diagnostic {
                    message: printable(&d.message).into_owned(),
                    help: d.help.as_deref().map(|h| printable(h).into_owned()),
                    labels: d
                        .labels
                        .iter()
                        .map(|l| Label {
                            span: shown.span(l.span),
                            text: printable(&l.text).into_owned(),
                        })
                        .collect(),
                    ..d.clone()
                })
                .collect();
            Arc::new(View {
                source: NamedSource::new(printable(&self.name), masked_credentials(&shown.text))
                    .with_language("yaml"),
                diagnostics,
            })
        })
    }

    /// The file name given to [`Report::new`].
    #[must_use]
    pub fn file_name(&self) -> &str {
        &self.name
    }

    /// Every problem, in source order.
    #[must_use]
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    /// The errors only.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
    }

    /// The warnings only.
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Warning)
    }

    /// True when any problem is an error.
    #[must_use]
    pub fn has_errors(&self) -> bool {
        self.errors().next().is_some()
    }

    /// True when there is nothing to report.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.diagnostics.is_empty()
    }

    /// 1-based line and column of a byte offset in the source, for plain-text output and tests.
    #[must_use]
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let text = &*self.text;
        let before = &text[..offset.min(text.len())];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, col)
    }

    /// Orders problems by position so that the report reads top to bottom like the file.
    pub(crate) fn sort(&mut self) {
        self.diagnostics
            .sort_by_key(|d| d.primary_span().map_or(usize::MAX, |s| s.offset()));
        self.view = OnceLock::new();
    }
}

impl fmt::Debug for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Report")
            .field("name", &self.name)
            .field("diagnostics", &self.diagnostics)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        let (errors, warnings) = (self.errors().count(), self.warnings().count());
        let name = printable(&self.name);
        // Lookups the cloud failed say nothing of the spec: it is not called invalid for them.
        if errors > 0 && self.errors().all(|d| d.code == Code::CloudError) {
            let lookups = if errors == 1 { "lookup" } else { "lookups" };
            return write!(
                f,
                "`{name}` could not be checked against the cloud: {errors} {lookups} failed"
            );
        }
        match (errors, warnings) {
            (0, 0) => write!(f, "`{name}` is valid"),
            (0, w) => write!(f, "`{name}`: {}", plural(w, "warning")),
            (e, 0) => write!(f, "`{name}` is invalid: {}", plural(e, "error")),
            (e, w) => write!(
                f,
                "`{name}` is invalid: {}, {}",
                plural(e, "error"),
                plural(w, "warning")
            ),
        }
    }
}

impl std::error::Error for Report {}

impl miette::Diagnostic for Report {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new("kos::spec"))
    }

    fn severity(&self) -> Option<miette::Severity> {
        Some(if self.has_errors() {
            miette::Severity::Error
        } else {
            miette::Severity::Warning
        })
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        Some(&self.view().source)
    }

    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn miette::Diagnostic> + 'a>> {
        Some(Box::new(
            self.view()
                .diagnostics
                .iter()
                .map(|d| d as &dyn miette::Diagnostic),
        ))
    }
}

/// Longest line a snippet shows, in characters; a longer one is cut to this much around its first label.
const MAX_LINE: usize = 160;
/// Characters kept before a label when a long line is cut.
const LEAD: usize = 40;
/// Longest word (run of non-space characters) a message shows; a longer one keeps its start and end.
const MAX_WORD: usize = 80;
const ELLIPSIS: &str = "…";

/// Whether a character must not reach a terminal as it is: control characters (ESC starts the terminal's
/// escape sequences), the Unicode line separators, and the bidirectional overrides that make text read
/// differently from what it is.
fn unprintable(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every character that must not reach a terminal as it is escaped (`\u{1b}`), and nothing else
/// changed: for whole rendered reports, whose own drawing must stay intact.
#[must_use]
pub fn escape_unprintable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(unprintable) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unprintable(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `text` fit for a terminal and a log: unprintable characters escaped (`\u{1b}`), and every word longer than
/// a reader can use cut to its start and end, saying how much was left out. Text that needs neither is
/// returned as it is.
#[must_use]
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let long_word = text
        .split(char::is_whitespace)
        .any(|w| w.chars().count() > MAX_WORD);
    if !long_word && !text.chars().any(unprintable) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len().min(4096));
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let n = word.chars().count();
        if n > MAX_WORD {
            let head: String = word.chars().take(MAX_WORD / 2).collect();
            let tail: String = word.chars().skip(n - MAX_WORD / 4).collect();
            out.push_str(&format!(
                "{head}{ELLIPSIS}({} characters){ELLIPSIS}{tail}",
                n - MAX_WORD / 2 - MAX_WORD / 4
            ));
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_whitespace() && !unprintable(c) {
            flush(&mut word, &mut out);
            out.push(c);
        } else if unprintable(c) {
            word.extend(c.escape_unicode());
        } else {
            word.push(c);
        }
    }
    flush(&mut word, &mut out);
    std::borrow::Cow::Owned(out)
}

/// The source as shown: edits (a replaced byte range) applied in order, and the map from the original's byte
/// offsets to the shown text's.
/// `text` with what may be a URL's credentials (`user:password@` after `scheme://`, as
/// [`crate::spec::userinfo_end`] finds them; a password with a space included, at the cost of
/// masking a little more on a line whose next `@` is not a URL's) masked byte for byte, so that
/// every span stays where it was: a report's snippet goes to terminals and CI logs, which must
/// never show a mirror's or a proxy's password from the spec.
fn masked_credentials(text: &str) -> String {
    let mut out = text.as_bytes().to_vec();
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let start = from + found + 3;
        // `start` follows `://` and the `@` is ASCII: the masked bytes are whole characters.
        if let Some(at) = crate::spec::userinfo_end(text, start) {
            out[start..at].fill(b'*');
        }
        from = start;
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_owned())
}

struct Excerpt {
    text: String,
    /// `(start, end, replacement length)` of each edit, by start.
    edits: Vec<(usize, usize, usize)>,
}

impl Excerpt {
    /// Escapes unprintable characters and cuts long lines of `text`, keeping the start of each span in view.
    fn of(text: &str, spans: impl Iterator<Item = SourceSpan>) -> Excerpt {
        let mut starts: Vec<usize> = spans.map(|s| s.offset()).collect();
        starts.sort_unstable();
        let mut edits: Vec<(usize, usize, String)> = Vec::new();
        let mut line_start = 0;
        for line in text.split_inclusive('\n') {
            let line_end = line_start + line.len();
            let body = line.trim_end_matches(['\n', '\r']);
            // Kept: all of a short line, else a window around its first label (or its start).
            let (keep_from, keep_to) = if body.chars().count() <= MAX_LINE {
                (line_start, line_start + body.len())
            } else {
                let first = starts
                    .iter()
                    .copied()
                    .find(|s| (line_start..line_end).contains(s))
                    .unwrap_or(line_start);
                let before = &text[line_start..first];
                let skip = before.chars().count().saturating_sub(LEAD);
                let from = line_start + before.char_indices().nth(skip).map_or(0, |(i, _)| i);
                let rest = &text[from..line_start + body.len()];
                let to = from
                    + rest
                        .char_indices()
                        .nth(MAX_LINE)
                        .map_or(rest.len(), |(i, _)| i);
                (from, to)
            };
            if keep_from > line_start {
                edits.push((line_start, keep_from, ELLIPSIS.to_owned()));
            }
            for (i, c) in text[keep_from..keep_to].char_indices() {
                if unprintable(c) {
                    let at = keep_from + i;
                    edits.push((at, at + c.len_utf8(), c.escape_unicode().to_string()));
                }
            }
            let body_end = line_start + body.len();
            if keep_to < body_end {
                edits.push((keep_to, body_end, ELLIPSIS.to_owned()));
            }
            line_start = line_end;
        }
        let mut shown = String::with_capacity(text.len().min(1 << 20));
        let mut at = 0;
        for (from, to, with) in &edits {
            shown.push_str(&text[at..*from]);
            shown.push_str(with);
            at = *to;
        }
        shown.push_str(&text[at..]);
        Excerpt {
            text: shown,
            edits: edits.into_iter().map(|(f, t, w)| (f, t, w.len())).collect(),
        }
    }

    /// Where an original byte offset is in the shown text; one inside an edit goes to the start of its
    /// replacement, or with `end` to its end.
    fn offset(&self, o: usize, end: bool) -> usize {
        // Bytes added and removed by the edits before `o` (kept apart: both are unsigned).
        let (mut added, mut removed) = (0, 0);
        for &(from, to, len) in &self.edits {
            if to <= o {
                added += len;
                removed += to - from;
            } else if from < o {
                let at = from + added - removed;
                return if end { at + len } else { at };
            } else {
                break;
            }
        }
        o + added - removed
    }

    fn span(&self, s: SourceSpan) -> SourceSpan {
        let from = self.offset(s.offset(), false);
        let to = self.offset(s.offset() + s.len(), true).max(from);
        SourceSpan::from(from..to)
    }
}
