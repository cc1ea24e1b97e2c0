//! cloud-init's Jinja step for `## template: jinja` user-data: `{{ v1.<key> }}` is replaced with the
//! instance-data value. A `v1` key cloud-init does not have renders as `CI_MISSING_JINJA_VAR/<key>`
//! (cloud-init's own placeholder, with a warning). Any other Jinja (statements, comments, filters,
//! other variables) is not simulated and comes back as an error naming it, never passed through.

use std::collections::BTreeMap;

use crate::seam::{Image, Metadata};

/// The `v1` instance-data keys cloud-init provides on OpenStack, as far as a bootstrap could use them.
pub fn v1_keys(meta: &Metadata, image: &Image) -> BTreeMap<&'static str, String> {
    BTreeMap::from([
        ("instance_id", meta.instance_id.clone()),
        ("local_hostname", meta.local_hostname.clone()),
        ("availability_zone", meta.availability_zone.clone()),
        ("region", meta.region.clone()),
        ("cloud_name", "openstack".into()),
        ("cloud_id", "openstack".into()),
        ("platform", "openstack".into()),
        ("subplatform", "metadata (http://169.254.169.254)".into()),
        ("distro", image.os_id.clone()),
        ("machine", "x86_64".into()),
    ])
}

/// The rendered text and the warnings cloud-init would log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub text: String,
    pub warnings: Vec<String>,
}

/// Renders `template` with `v1`.
pub fn render(template: &str, v1: &BTreeMap<&'static str, String>) -> Result<Rendered, String> {
    let mut out = String::with_capacity(template.len());
    let mut warnings = Vec::new();
    let mut rest = template;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("{%") || tail.starts_with("{#") {
            let kind = if tail.starts_with("{%") {
                "statement {% ... %}"
            } else {
                "comment {# ... #}"
            };
            return Err(format!("Jinja {kind} is not simulated by kos-guest"));
        }
        if let Some(expr_start) = tail.strip_prefix("{{") {
            let end = expr_start
                .find("}}")
                .ok_or_else(|| "unclosed Jinja expression {{".to_owned())?;
            let expr = expr_start[..end].trim();
            let key = expr
                .strip_prefix("v1.")
                .filter(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
                .ok_or_else(|| {
                    format!("Jinja expression {{{{ {expr} }}}} is not simulated by kos-guest (only v1.<key>)")
                })?;
            match v1.get(key) {
                Some(v) => out.push_str(v),
                None => {
                    warnings.push(format!(
                        "Could not render jinja template variables in file 'user-data': 'v1.{key}' (rendered as CI_MISSING_JINJA_VAR/{key})"
                    ));
                    out.push_str(&format!("CI_MISSING_JINJA_VAR/{key}"));
                }
            }
            rest = &expr_start[end + 2..];
        } else {
            out.push('{');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(Rendered {
        text: out,
        warnings,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn vars() -> BTreeMap<&'static str, String> {
        BTreeMap::from([("instance_id", "i-1".to_owned())])
    }

    #[test]
    fn v1_keys_render_and_other_jinja_is_refused() {
        let r = render("id: {{ v1.instance_id }} {x}\n", &vars()).unwrap();
        assert_eq!(r.text, "id: i-1 {x}\n");
        let r = render("{{v1.nope}}", &vars()).unwrap();
        assert_eq!(r.text, "CI_MISSING_JINJA_VAR/nope");
        assert_eq!(r.warnings.len(), 1);
        assert!(render("{% if x %}", &vars()).is_err());
        assert!(render("{{ ds.meta_data.x }}", &vars()).is_err());
        assert!(render("{{ v1.instance_id | upper }}", &vars()).is_err());
    }
}
