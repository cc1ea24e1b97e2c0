//! The cloud controller's and CSI's application credential: the least it needs, for a while.
//!
//! Pure: which of the user's roles it gets, and how long it lives. Keystone gives a credential
//! only roles its creator's token carries (with what they imply), so the choice is made from the
//! token's roles: the project's member role, which Nova, Neutron and Cinder want for a project's
//! own resources, and Octavia's `load-balancer_member` where the cloud has it (Octavia's policy
//! before its new defaults asks for it; with them `member` suffices). Never `admin`: the CCM and
//! CSI manage the project's own load balancers, ports, routes and volumes only.

use kos_cloud::CloudError;
use kos_cloud::model::identity::{AccessRule, ApplicationCredentialCreate, keystone_expiry};

/// How long a credential lives when the spec does not say (`addons.credentialLifetimeDays`).
pub const DEFAULT_LIFETIME_DAYS: u32 = 90;
/// The range the spec may ask for: at least a week, so rotations stay rare; at most a year.
pub const LIFETIME_DAYS: std::ops::RangeInclusive<u32> = 7..=365;
/// `kos up` rotates a credential once less than this share of its lifetime is left.
pub const ROTATE_WHEN_LEFT: f64 = 1.0 / 3.0;

/// The names Keystone deployments give the project member role, preferred first: `member` since
/// Queens' `keystone-manage bootstrap`, `_member_` and `Member` on older clouds.
const MEMBER: [&str; 2] = ["member", "_member_"];
/// Octavia's role for creating and deleting the project's load balancers.
const LOAD_BALANCER_MEMBER: &str = "load-balancer_member";

/// The create request of the credential `name` of `cluster`: `roles`, expiring `lifetime_days`
/// after `now`, restricted (it can make no other credential), no secret of kos's choosing.
#[must_use]
pub fn request(
    name: &str,
    cluster: &str,
    roles: &[String],
    lifetime_days: u32,
    now: chrono::DateTime<chrono::Utc>,
) -> ApplicationCredentialCreate {
    ApplicationCredentialCreate {
        name: name.to_owned(),
        description: Some(format!(
            "kos cluster {cluster}: the in-cluster OpenStack cloud controller manager and CSI"
        )),
        expires_at: Some(keystone_expiry(
            now + chrono::Duration::days(i64::from(lifetime_days)),
        )),
        roles: roles.to_vec(),
        unrestricted: false,
        // Set by the caller from the cloud's catalog (`crate::access_rules`).
        access_rules: Vec::new(),
    }
}

/// Keystone's refusal (400 or 403) of a create that carried access rules, told as the spec field
/// that asked for them: a Keystone older than Train knows no `access_rules` (a 400 naming the
/// property), and a policy may forbid them. Any other error is returned as it is.
#[must_use]
pub fn refused_rules(e: CloudError, req: &ApplicationCredentialCreate) -> CloudError {
    match e {
        CloudError::Api {
            service,
            operation,
            status: status @ (400 | 403),
            kind,
            message,
            request_id,
        } if !req.access_rules.is_empty() => CloudError::Api {
            service,
            operation,
            status,
            kind,
            message: format!(
                "{message} (the credential carried {} access rules because \
                 spec.addons.credentialAccessRules is true: this Keystone refuses them; set it \
                 to false, or ask the cloud's administrators whether access rules are allowed)",
                req.access_rules.len()
            ),
            request_id,
        },
        other => other,
    }
}

/// The access rules a rotation gives the new credential: kos's, for the cloud `session` reaches
/// ([`crate::access_rules::for_session`]), when a credential of the cluster (`names`, the names
/// rotation alternates between) carries any; none otherwise. The rotated credential keeps what
/// the one it replaces had, with the rules of this kos.
///
/// # Errors
/// Keystone's, listing the credentials.
pub async fn rotation_rules(
    session: &kos_cloud::Session,
    names: &[String],
) -> Result<Vec<AccessRule>, CloudError> {
    let identity = session.identity();
    for n in names {
        let found = identity.list_application_credentials(Some(n)).await?;
        if found.iter().any(|c| !c.access_rules.is_empty()) {
            return Ok(crate::access_rules::for_session(session).await);
        }
    }
    Ok(Vec::new())
}

/// The user has no role on the project that lets the CCM and CSI work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the user kos runs as has no member role on the project (its token carries: {}); the cloud \
     controller and CSI need one to manage the project's load balancers, ports and volumes",
    if .have.is_empty() { "no roles".to_owned() } else { .have.join(", ") }
)]
pub struct NoMemberRole {
    pub have: Vec<String>,
}

/// The roles of the credential, as the cloud spells them: the member role, then
/// `load-balancer_member` if the token has it.
///
/// # Errors
/// [`NoMemberRole`] when the token carries no member role (a `reader`-only user cannot make load
/// balancers or volumes; `admin` alone implies `member` on any cloud bootstrapped since Queens).
pub fn ccm_roles(token_roles: &[String]) -> Result<Vec<String>, NoMemberRole> {
    let find = |want: &str| {
        token_roles
            .iter()
            .find(|r| r.eq_ignore_ascii_case(want))
            .cloned()
    };
    let member = MEMBER
        .iter()
        .find_map(|m| find(m))
        .ok_or_else(|| NoMemberRole {
            have: token_roles.to_vec(),
        })?;
    Ok(std::iter::once(member)
        .chain(find(LOAD_BALANCER_MEMBER))
        .collect())
}

/// Whether a credential expiring at `expires_at` (Unix seconds; `None`: never) is due for rotation
/// at `now`, given the lifetime credentials are made with.
#[must_use]
pub fn rotation_due(expires_at: Option<i64>, now: i64, lifetime_days: u32) -> Due {
    let Some(at) = expires_at else {
        return Due::NeverExpires;
    };
    let left = at - now;
    if left <= 0 {
        return Due::Expired;
    }
    let threshold = (f64::from(lifetime_days) * 86_400.0 * ROTATE_WHEN_LEFT) as i64;
    if left < threshold {
        Due::Soon { left_secs: left }
    } else {
        Due::No { left_secs: left }
    }
}

/// What [`rotation_due`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Made before kos gave credentials an expiry: rotating gives it one.
    NeverExpires,
    /// It no longer authenticates: the CCM and CSI are failing.
    Expired,
    /// Less than [`ROTATE_WHEN_LEFT`] of its lifetime is left.
    Soon {
        left_secs: i64,
    },
    No {
        left_secs: i64,
    },
}

impl Due {
    /// Whether `kos up` rotates it.
    #[must_use]
    pub fn rotate(self) -> bool {
        !matches!(self, Due::No { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles(r: &[&str]) -> Vec<String> {
        r.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_member_role_and_octavias_are_chosen_never_admin() {
        // What a devstack admin's token carries: admin implies member implies reader.
        let admin = roles(&["admin", "member", "reader", "load-balancer_member"]);
        assert_eq!(
            ccm_roles(&admin),
            Ok(roles(&["member", "load-balancer_member"]))
        );
        assert_eq!(
            ccm_roles(&roles(&["reader", "member"])),
            Ok(roles(&["member"]))
        );
    }

    #[test]
    fn older_clouds_member_roles_are_taken_as_spelled() {
        assert_eq!(
            ccm_roles(&roles(&["_member_", "heat_stack_owner"])),
            Ok(roles(&["_member_"]))
        );
        assert_eq!(
            ccm_roles(&roles(&["Member", "Load-Balancer_Member"])),
            Ok(roles(&["Member", "Load-Balancer_Member"]))
        );
        // member is preferred where both exist (a cloud upgraded from before Queens).
        assert_eq!(
            ccm_roles(&roles(&["_member_", "member"])),
            Ok(roles(&["member"]))
        );
    }

    #[test]
    fn a_user_without_a_member_role_is_refused() {
        let e = ccm_roles(&roles(&["reader", "load-balancer_member"]));
        assert!(
            e.is_err_and(|e| e
                .to_string()
                .contains("carries: reader, load-balancer_member")),
            "the message names the roles the token has"
        );
        assert!(ccm_roles(&[]).is_err());
        assert!(
            ccm_roles(&roles(&["admin"])).is_err(),
            "admin alone is not delegated"
        );
    }

    #[test]
    fn the_request_names_the_roles_and_an_expiry_and_is_restricted() {
        let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default();
        let r = request("kos-demo-ccm", "demo", &roles(&["member"]), 90, now);
        assert_eq!(r.roles, roles(&["member"]));
        assert_eq!(r.expires_at.as_deref(), Some("2027-04-15T08:00:00Z"));
        assert!(!r.unrestricted);
    }

    #[test]
    fn keystones_refusal_of_rules_names_the_spec_field() {
        let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default();
        let refusal = || CloudError::Api {
            service: kos_cloud::ServiceKind::Identity,
            operation: "application_credential.create",
            status: 400,
            kind: kos_cloud::ApiErrorKind::BadRequest,
            message: "Invalid input for field 'application_credential': Additional properties \
                      are not allowed ('access_rules' was unexpected)"
                .into(),
            request_id: None,
        };
        let plain = request("kos-demo-ccm", "demo", &roles(&["member"]), 90, now);
        assert!(
            !refused_rules(refusal(), &plain)
                .to_string()
                .contains("credentialAccessRules"),
            "no rules asked for: Keystone's message as it is"
        );
        let mut with = plain;
        with.access_rules = vec![AccessRule {
            service: "compute".into(),
            method: "GET".into(),
            path: "/v2.1/servers".into(),
        }];
        let e = refused_rules(refusal(), &with);
        assert_eq!(e.status(), Some(400));
        assert!(
            e.to_string().contains("spec.addons.credentialAccessRules")
                && e.to_string().contains("'access_rules' was unexpected"),
            "{e}"
        );
    }

    #[test]
    fn rotation_is_due_with_a_third_of_the_life_left_or_expired() {
        let day = 86_400;
        assert_eq!(rotation_due(None, 0, 90), Due::NeverExpires);
        assert_eq!(rotation_due(Some(100), 100, 90), Due::Expired);
        assert_eq!(rotation_due(Some(0), 100, 90), Due::Expired);
        assert_eq!(
            rotation_due(Some(29 * day), 0, 90),
            Due::Soon {
                left_secs: 29 * day
            }
        );
        assert!(!rotation_due(Some(31 * day), 0, 90).rotate());
        assert!(rotation_due(Some(2 * day), 0, 7).rotate());
        assert!(!rotation_due(Some(3 * day), 0, 7).rotate());
    }
}
