//! The catalogue of bad cloud.conf files: each one's exact message, naming file, line and key.
//! Also the seeds' files, which must parse unchanged.

use kos_ccm::config::{CloudConfig, ConfigError};

const AUTH: &str = "[Global]\nauth-url = https://keystone.example:5000/v3\nregion = r1\nusername = u\npassword = p\ntenant-name = t\n";

/// The messages of a file that must be rejected.
fn errors(src: &str) -> Vec<String> {
    match CloudConfig::parse("bad.conf", src) {
        Ok(_) => panic!("accepted:\n{src}"),
        Err(ConfigError::Syntax(e)) => e.iter().map(ToString::to_string).collect(),
        Err(ConfigError::Invalid { errors, .. }) => {
            errors.iter().map(ToString::to_string).collect()
        }
        Err(e) => panic!("unexpected {e}"),
    }
}

/// The warnings of a file that must be accepted.
fn warnings(src: &str) -> Vec<String> {
    match CloudConfig::parse("ok.conf", src) {
        Ok(l) => l.warnings.iter().map(ToString::to_string).collect(),
        Err(e) => panic!("rejected:\n{src}\n{e}"),
    }
}

fn one(src: &str) -> String {
    let e = errors(src);
    assert_eq!(e.len(), 1, "{e:#?}");
    e[0].clone()
}

#[test]
fn syntax_unterminated_quote() {
    assert_eq!(
        one("[Global]\nauth-url = x\npassword = \"abc\n"),
        "bad.conf:3:12: [Global] password: string not terminated: a closing '\"' is missing on this line"
    );
}

#[test]
fn syntax_bad_escape() {
    assert_eq!(
        one("[Global]\npassword = \"a\\qb\"\n"),
        "bad.conf:2:14: [Global] password: unknown escape sequence: a subsection name knows only \\\\ and \\\", a quoted value \\\\, \\\", \\n and \\t"
    );
}

#[test]
fn syntax_bare_backslash() {
    assert!(one("[Global]\npassword = a\\b\n").starts_with(
        "bad.conf:2:13: [Global] password: unquoted '\\' must be followed by a new line"
    ));
}

#[test]
fn syntax_missing_bracket() {
    assert_eq!(
        one("[Global\nauth-url = x\n"),
        "bad.conf:1:8: expected ']' to close the section header"
    );
}

#[test]
fn syntax_key_outside_section() {
    assert_eq!(
        one("auth-url = https://k\n[Global]\n"),
        "bad.conf:1:1: a variable before any section header"
    );
}

#[test]
fn syntax_unquoted_subsection() {
    assert_eq!(
        one("[LoadBalancerClass dmz]\nfloating-subnet-id = s\n"),
        "bad.conf:1:20: subsection names are quoted: write [LoadBalancerClass \"dmz\"]"
    );
}

#[test]
fn syntax_empty_subsection() {
    assert_eq!(
        one("[LoadBalancerClass \"\"]\n"),
        "bad.conf:1:20: empty subsection name: write [LoadBalancerClass] for no subsection"
    );
}

#[test]
fn syntax_underscore_in_key() {
    assert_eq!(
        one("[Global]\nauth_url = https://k\n"),
        "bad.conf:2:5: illegal character U+005F '_' (names are letters, digits and '-')"
    );
}

#[test]
fn syntax_missing_equals() {
    assert_eq!(
        one("[Global]\nregion RegionOne\n"),
        "bad.conf:2:8: [Global]: expected '=' after the variable name"
    );
}

#[test]
fn syntax_text_after_header() {
    assert_eq!(
        one("[Global] region = r\n"),
        "bad.conf:1:10: expected the end of the line after the section header"
    );
}

#[test]
fn syntax_nul_byte() {
    assert_eq!(
        one("[Global]\nregion = a\0b\n"),
        "bad.conf:2:11: illegal character NUL"
    );
}

#[test]
fn syntax_every_error_reported() {
    let e = errors("[Global\nauth_url = x\n[Route]\nrouter-id = \"x\n");
    let lines: Vec<&str> = e
        .iter()
        .map(|m| m.split(' ').next().unwrap_or(""))
        .collect();
    assert_eq!(lines, ["bad.conf:1:8:", "bad.conf:2:5:", "bad.conf:4:13:"]);
}

#[test]
fn bad_boolean() {
    assert_eq!(
        one(&format!("{AUTH}[LoadBalancer]\ncreate-monitor = maybe\n")),
        "bad.conf:8: [LoadBalancer] create-monitor: value \"maybe\" is not a boolean (true/false, yes/no, on/off, 1/0)"
    );
}

#[test]
fn bad_duration_without_unit() {
    assert_eq!(
        one(&format!("{AUTH}[LoadBalancer]\nmonitor-delay = 5\n")),
        "bad.conf:8: [LoadBalancer] monitor-delay: value \"5\" is not a Go duration: it has no unit (write e.g. \"5s\")"
    );
}

#[test]
fn bad_duration_syntax() {
    assert_eq!(
        one(&format!("{AUTH}[Metadata]\nrequest-timeout = 1 minute\n")),
        "bad.conf:8: [Metadata] request-timeout: value \"1 minute\" is not a Go duration (e.g. \"30s\", \"1m30s\", \"500ms\"; units ns, us, ms, s, m, h)"
    );
}

#[test]
fn bad_enum() {
    assert_eq!(
        one(&format!("{AUTH}[LoadBalancer]\nlb-method = foo\n")),
        "bad.conf:8: [LoadBalancer] lb-method: value \"foo\" is not one of ROUND_ROBIN, LEAST_CONNECTIONS, SOURCE_IP, SOURCE_IP_PORT"
    );
}

#[test]
fn negative_where_positive_required() {
    assert_eq!(
        one(&format!("{AUTH}[LoadBalancer]\nmonitor-max-retries = -1\n")),
        "bad.conf:8: [LoadBalancer] monitor-max-retries: -1 is out of range: it must be between 1 and 10"
    );
    assert_eq!(
        one(&format!("{AUTH}[LoadBalancer]\nmax-shared-lb = 0\n")),
        "bad.conf:8: [LoadBalancer] max-shared-lb: 0 is out of range: it must be at least 1"
    );
}

#[test]
fn monitor_timeout_longer_than_delay() {
    assert_eq!(
        one(&format!(
            "{AUTH}[LoadBalancer]\nmonitor-delay = 5s\nmonitor-timeout = 1m\n"
        )),
        "bad.conf:9: [LoadBalancer] monitor-timeout: 1m0s is longer than monitor-delay 5s: Octavia rejects such a health monitor"
    );
}

#[test]
fn ovn_needs_source_ip_port() {
    assert_eq!(
        one(&format!(
            "{AUTH}[LoadBalancer]\nlb-provider = ovn\nlb-method = LEAST_CONNECTIONS\n"
        )),
        "bad.conf:9: [LoadBalancer] lb-method: LEAST_CONNECTIONS is not supported by lb-provider ovn: use SOURCE_IP_PORT"
    );
}

#[test]
fn conflicting_auth() {
    assert_eq!(
        one(
            "[Global]\nauth-url = https://k\nregion = r\nusername = u\npassword = p\napplication-credential-id = i\napplication-credential-secret = s\n"
        ),
        "bad.conf:7: [Global] application-credential-secret: cannot be combined with password (line 5): authenticate either with username and password or with an application credential"
    );
}

#[test]
fn missing_auth_url() {
    assert_eq!(
        one(
            "[Global]\nregion = r\napplication-credential-id = i\napplication-credential-secret = s\n"
        ),
        "bad.conf:1: [Global] auth-url: is required (Keystone's URL, e.g. https://keystone.example.com:5000/v3), unless use-clouds = true reads it from clouds.yaml"
    );
}

#[test]
fn no_credentials() {
    assert_eq!(
        one("\n[Global]\nauth-url = https://k\nregion = r\n"),
        "bad.conf:2: [Global]: no credentials: set username (or user-id) and password, or application-credential-id (or -name) and application-credential-secret"
    );
}

#[test]
fn trusts_not_supported() {
    assert_eq!(
        one(&format!("{AUTH}trust-id = abc\n")),
        "bad.conf:7: [Global] trust-id: Keystone trusts are not supported by kos-ccm yet: use username/password or an application credential"
    );
}

#[test]
fn bare_string_key() {
    assert_eq!(
        one(&format!("{AUTH}[LoadBalancer]\nsubnet-id\n")),
        "bad.conf:8: [LoadBalancer] subnet-id: needs a value (`key = value`): only boolean keys may be written bare"
    );
}

#[test]
fn bad_search_order() {
    assert_eq!(
        one(&format!(
            "{AUTH}[Metadata]\nsearch-order = configDrive,cloudInit\n"
        )),
        "bad.conf:8: [Metadata] search-order: value \"configDrive,cloudInit\" is not one or two of configDrive, metadataService separated by a comma"
    );
}

#[test]
fn bad_cidr_and_endpoint_type() {
    assert_eq!(
        errors(&format!(
            "{AUTH}os-endpoint-type = private\n[Networking]\naddress-sort-order = 10.0.0.0/8, 192.168.0.0/33\n"
        )),
        [
            "bad.conf:7: [Global] os-endpoint-type: value \"private\" is not one of public, internal, admin",
            "bad.conf:9: [Networking] address-sort-order: \"192.168.0.0/33\" is not a CIDR (e.g. 10.0.0.0/8 or 2001:db8::/32)",
        ]
    );
}

#[test]
fn bad_floating_subnet_regexp() {
    assert!(
        one(&format!(
            "{AUTH}[LoadBalancerClass \"x\"]\nfloating-subnet = !~ext-(\n"
        ))
        .starts_with("bad.conf:8: [LoadBalancerClass \"x\"] floating-subnet: \"ext-(\" is not a valid regular expression")
    );
}

#[test]
fn unknown_section_and_key_warn_only() {
    assert_eq!(
        warnings(&format!(
            "{AUTH}[Foo]\nbar = 1\n[LoadBalancer]\nfloating-netwrok-id = x\n"
        )),
        [
            "ok.conf:7: [Foo]: unknown section, ignored (the upstream CCM ignores it too); known sections: Global, Networking, LoadBalancer, LoadBalancerClass \"name\", Metadata, Route, BlockStorage",
            "ok.conf:10: [LoadBalancer]: a key the CCM does not know, ignored (the upstream CCM ignores it too; the line is not shown, it may hold a secret); did you mean `floating-network-id`?",
        ]
    );
}

#[test]
fn subsection_on_plain_section_warns() {
    let w = warnings(&format!("{AUTH}[LoadBalancer \"x\"]\nsubnet-id = s\n"));
    assert_eq!(
        w,
        [
            "ok.conf:7: [LoadBalancer \"x\"]: [LoadBalancer] takes no subsection: this section and its keys are ignored (the upstream CCM ignores them too)"
        ]
    );
}

#[test]
fn repeated_single_valued_key_last_wins() {
    let src = format!("{AUTH}[LoadBalancer]\nsubnet-id = a\nsubnet-id = b\n");
    assert_eq!(
        warnings(&src),
        [
            "ok.conf:9: [LoadBalancer] subnet-id: set 2 times (lines 8, 9); the last one wins, as in the upstream CCM"
        ]
    );
    let cfg = CloudConfig::parse("ok.conf", &src).map(|l| l.config);
    assert_eq!(
        cfg.ok().and_then(|c| c.load_balancer.subnet_id).as_deref(),
        Some("b")
    );
}

#[test]
fn tls_insecure_only_exact_true() {
    let src = format!("{AUTH}tls-insecure = yes\n");
    assert_eq!(
        warnings(&src),
        [
            "ok.conf:7: [Global] tls-insecure: value \"yes\" counts as false: the upstream CCM only disables TLS verification for exactly \"true\""
        ]
    );
}

#[test]
fn project_id_alias() {
    let src = "[Global]\nauth-url = https://k\nregion = r\nusername = u\npassword = p\nproject-id = abc\n";
    assert_eq!(
        warnings(src),
        [
            "ok.conf:6: [Global] project-id: read as tenant-id, but the upstream CCM ignores this spelling: write tenant-id to keep the file portable"
        ]
    );
    let cfg = CloudConfig::parse("ok.conf", src).map(|l| l.config);
    assert_eq!(
        cfg.ok().and_then(|c| c.global.tenant_id).as_deref(),
        Some("abc")
    );
}

#[test]
fn seeds_parse_unchanged() {
    for (name, src) in [
        ("seed-000.conf", include_str!("fixtures/seed-000.conf")),
        ("seed-001.conf", include_str!("fixtures/seed-001.conf")),
        ("seed-002.conf", include_str!("fixtures/seed-002.conf")),
    ] {
        let loaded = CloudConfig::parse(name, src).unwrap_or_else(|e| panic!("{name}: {e}"));
        let c = &loaded.config;
        assert!(c.global.password.is_some(), "{name}");
        assert!(c.load_balancer.subnet_id.is_some(), "{name}");
        let p = c
            .profile(&kos_cloud::Env::from_vars::<&str, &str>([]))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!p.auth_url.is_empty());
    }
    let s1 = CloudConfig::parse("s", include_str!("fixtures/seed-001.conf"))
        .map(|l| l.config)
        .ok();
    let g = s1.map(|c| c.global);
    assert_eq!(
        g.as_ref().and_then(|g| g.domain_name.as_deref()),
        Some("OTC-EU-DE-000000000000xxxxx")
    );
    let s2 = CloudConfig::parse("s", include_str!("fixtures/seed-002.conf"))
        .map(|l| l.config)
        .ok();
    // `# Keystone V3 domain` is an inline comment, not part of the value.
    assert_eq!(
        s2.and_then(|c| c.global.domain_name).as_deref(),
        Some("MyDomain")
    );
}
