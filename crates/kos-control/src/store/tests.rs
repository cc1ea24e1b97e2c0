use super::*;

fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

const NEW: Seen = Seen {
    servers: false,
    anything: false,
};

#[test]
fn a_new_cluster_gets_secrets_stored_before_they_are_used() {
    let store = Memory::default();
    let made = secrets_for_up(&store, NEW, false, Leftovers::Adopt, now()).unwrap();
    assert!(!made.token_refreshed);
    let kept = store.pki().unwrap().unwrap();
    assert_eq!(kept.ca.cert_pem, made.secrets.ca.cert_pem);
    // A second run takes the same CA.
    let again = secrets_for_up(
        &store,
        Seen {
            servers: true,
            anything: true,
        },
        false,
        Leftovers::Adopt,
        now(),
    )
    .unwrap();
    assert_eq!(again.secrets.ca.cert_pem, made.secrets.ca.cert_pem);
}

#[test]
fn servers_without_secrets_are_refused_and_nothing_is_made() {
    let store = Memory::default();
    let err = secrets_for_up(
        &store,
        Seen {
            servers: true,
            anything: true,
        },
        false,
        Leftovers::Adopt,
        now(),
    )
    .err()
    .unwrap();
    assert!(matches!(err, SecretsError::Missing { .. }), "{err}");
    assert!(store.pki().unwrap().is_none());
}

#[test]
fn leftovers_without_secrets_are_taken_over_or_refused_as_asked() {
    let network_only = Seen {
        servers: false,
        anything: true,
    };
    // The CLI: nothing holds secrets yet, so new ones are made.
    let store = Memory::default();
    secrets_for_up(&store, network_only, false, Leftovers::Adopt, now()).unwrap();
    assert!(store.pki().unwrap().is_some());
    // The operator: someone else may be making it; nothing is stored.
    let store = Memory::default();
    let err = secrets_for_up(&store, network_only, false, Leftovers::Refuse, now())
        .err()
        .unwrap();
    assert!(matches!(err, SecretsError::Foreign { .. }), "{err}");
    assert!(store.pki().unwrap().is_none());
    // A new cluster is made under either.
    secrets_for_up(&store, NEW, false, Leftovers::Refuse, now()).unwrap();
}

#[test]
fn delivered_secrets_of_a_cluster_the_cloud_lost_need_reuse() {
    let store = Memory::default();
    let made = secrets_for_up(&store, NEW, false, Leftovers::Adopt, now()).unwrap();
    // Never delivered: a run that stopped before any server; the CA is taken again.
    secrets_for_up(&store, NEW, false, Leftovers::Adopt, now()).unwrap();
    store.mark_delivered().unwrap();
    let err = secrets_for_up(&store, NEW, false, Leftovers::Adopt, now())
        .err()
        .unwrap();
    assert!(matches!(err, SecretsError::Orphaned { .. }), "{err}");
    let reused = secrets_for_up(&store, NEW, true, Leftovers::Adopt, now()).unwrap();
    assert_eq!(reused.secrets.ca.cert_pem, made.secrets.ca.cert_pem);
}

#[test]
fn an_expiring_token_is_replaced_and_stored() {
    let store = Memory::default();
    let t0 = now();
    let made = secrets_for_up(&store, NEW, false, Leftovers::Adopt, t0).unwrap();
    let later = made.secrets.token.expires - time::Duration::minutes(1);
    let next = secrets_for_up(
        &store,
        Seen {
            servers: true,
            anything: true,
        },
        false,
        Leftovers::Adopt,
        later,
    )
    .unwrap();
    assert!(next.token_refreshed);
    assert_ne!(next.secrets.token.id, made.secrets.token.id);
    assert_eq!(
        store.pki().unwrap().unwrap().token.id,
        next.secrets.token.id
    );
}

#[test]
fn keys_are_made_once_and_refused_when_control_planes_hold_others() {
    let store = Memory::default();
    let first = keys_for_up(&store, &[]).unwrap();
    assert_eq!(keys_for_up(&store, &[]).unwrap(), first);
    let other = Memory::default();
    let err = keys_for_up(&other, &[Some("k1")]).unwrap_err();
    assert!(matches!(err, KeysError::Missing { .. }), "{err}");
    assert!(other.keys().unwrap().is_none());
}

#[test]
fn a_malformed_credential_never_shows_its_secret() {
    let store = Memory::default();
    store
        .write(
            Record::CcmCredential,
            &Sensitive::new(r#"{"id": 7, "secret": "hunter2-secret"}"#),
        )
        .unwrap();
    let err = store.ccm_credential().unwrap_err();
    let shown = format!("{err} {err:?} {}", kos_lifecycle::api::chain(&err));
    assert!(!shown.contains("hunter2"), "{shown}");
    assert_eq!(err.record(), Some(Record::CcmCredential));
}

#[test]
fn a_rotation_commits_through_the_store() {
    use kos_lifecycle::rotate::CredentialStore as _;
    let store = Memory::default();
    let records = CredentialRecords(&store);
    let c = Credential {
        id: "id-2".into(),
        name: "kos-demo-ccm-2".into(),
        secret: SecretString::from("s2"),
    };
    records.keep_pending(&c).unwrap();
    assert_eq!(records.pending().unwrap().unwrap().id, "id-2");
    records.commit(&c).unwrap();
    assert!(records.pending().unwrap().is_none());
    let now = store.ccm_credential().unwrap().unwrap();
    assert_eq!(
        (now.id.as_str(), now.name.as_str()),
        ("id-2", "kos-demo-ccm-2")
    );
    assert_eq!(now.secret.expose_secret(), "s2");
}

#[test]
fn meta_round_trips() {
    let store = Memory::default();
    assert!(store.meta().unwrap().is_none());
    let m = ClusterMeta {
        api_address: "203.0.113.7".into(),
        kubernetes_version: "1.35.1".into(),
    };
    store.put_meta(&m).unwrap();
    assert_eq!(store.meta().unwrap(), Some(m));
}
