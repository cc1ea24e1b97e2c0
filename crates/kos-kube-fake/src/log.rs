//! What tests observe of the traffic: every request the fake served (the request log), and the
//! faults tests ask it to inject.

/// The API verb of a request, as in RBAC and audit logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
    /// `/version`, `/api`, `/apis`, resource lists.
    Discovery,
}

impl Verb {
    /// The verb of an RBAC request attribute (`Discovery` for anything else).
    pub fn of(verb: &str) -> Verb {
        match verb {
            "get" => Verb::Get,
            "list" => Verb::List,
            "watch" => Verb::Watch,
            "create" => Verb::Create,
            "update" => Verb::Update,
            "patch" => Verb::Patch,
            "delete" => Verb::Delete,
            "deletecollection" => Verb::DeleteCollection,
            _ => Verb::Discovery,
        }
    }

    /// Changes stored state (when it succeeds).
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection
        )
    }
}

/// The four patch content types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatchType {
    /// `application/json-patch+json`
    Json,
    /// `application/merge-patch+json`
    Merge,
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/apply-patch+yaml`
    Apply,
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        match ct.split(';').next().map(str::trim) {
            Some("application/json-patch+json") => Some(PatchType::Json),
            Some("application/merge-patch+json") => Some(PatchType::Merge),
            Some("application/strategic-merge-patch+json") => Some(PatchType::Strategic),
            Some("application/apply-patch+yaml" | "application/apply-patch+json") => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

/// One served request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// 1, 2, 3… in arrival order.
    pub seq: u64,
    pub method: String,
    pub path: String,
    pub query: String,
    pub verb: Verb,
    /// The plural (`nodes`); `None` for discovery.
    pub resource: Option<String>,
    pub group: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    pub patch: Option<PatchType>,
    pub field_manager: Option<String>,
    /// Who made it (`system:apiserver` for the plain-HTTP port's clients without credentials).
    pub user: Option<String>,
    /// The HTTP status answered (200 for a watch that was started).
    pub status: u16,
}

impl Request {
    /// A write that the server accepted (2xx).
    pub fn is_write(&self) -> bool {
        self.verb.is_write() && (200..300).contains(&self.status)
    }
}

/// A fault to inject: requests that match get `code` with a `Status` body instead of being served.
///
/// ```
/// use kos_kube_fake::{Fault, Verb};
/// // The next two patches of any Node fail with 409 Conflict.
/// let f = Fault::new(409).verb(Verb::Patch).resource("nodes").times(2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub code: u16,
    pub verb: Option<Verb>,
    pub resource: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// How many requests it hits; `None`: all of them.
    pub times: Option<u32>,
}

impl Fault {
    pub fn new(code: u16) -> Fault {
        Fault {
            code,
            verb: None,
            resource: None,
            name: None,
            subresource: None,
            times: None,
        }
    }

    #[must_use]
    pub fn verb(mut self, v: Verb) -> Self {
        self.verb = Some(v);
        self
    }

    #[must_use]
    pub fn resource(mut self, plural: &str) -> Self {
        self.resource = Some(plural.to_owned());
        self
    }

    #[must_use]
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    #[must_use]
    pub fn subresource(mut self, sub: &str) -> Self {
        self.subresource = Some(sub.to_owned());
        self
    }

    #[must_use]
    pub fn times(mut self, n: u32) -> Self {
        self.times = Some(n);
        self
    }

    pub(crate) fn matches(&self, r: &Request) -> bool {
        self.times != Some(0)
            && self.verb.is_none_or(|v| v == r.verb)
            && self
                .resource
                .as_ref()
                .is_none_or(|x| r.resource.as_ref() == Some(x))
            && self
                .name
                .as_ref()
                .is_none_or(|x| r.name.as_ref() == Some(x))
            && self
                .subresource
                .as_ref()
                .is_none_or(|x| r.subresource.as_ref() == Some(x))
    }
}
