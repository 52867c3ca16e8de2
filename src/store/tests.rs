use super::*;
use crate::model::teams::Role;
use crate::model::{AgentPatch, NewAgent};
use crate::store::users::UserChange;

fn new_agent(name: &str) -> NewAgent {
    NewAgent {
        id: crate::model::new_agent_id(),
        name: name.to_string(),
        image: "debian:bookworm-slim".to_string(),
        cpus: 2.0,
        memory_mb: 4096,
        disk_mb: Some(1024),
        egress: crate::egress::EgressRules {
            allow: vec!["pypi.org".parse().unwrap()],
            deny: vec![],
        },
        idle_minutes: 15,
        deep_sleep_minutes: 60,
        preset: None,
        env: Default::default(),
        secrets: Vec::new(),
        runtime: "runc".to_string(),
        ttl_minutes: None,
        expires_at: None,
        labels: Default::default(),
        allow_root: false,
        approvals: Default::default(),
        owner_id: "admin".to_string(),
        access: Default::default(),
    }
}

async fn temp_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("data/agenthold.db"))
        .await
        .unwrap();
    (dir, store)
}

async fn pragma(store: &Store, name: &'static str) -> String {
    store
        .call(move |c| {
            Ok(c.pragma_query_value(None, name, |r| r.get::<_, rusqlite::types::Value>(0))?)
        })
        .await
        .map(|v| match v {
            rusqlite::types::Value::Integer(i) => i.to_string(),
            rusqlite::types::Value::Text(t) => t,
            other => format!("{other:?}"),
        })
        .unwrap()
}

#[tokio::test]
async fn open_creates_the_directory_and_sets_the_pragmas() {
    let (dir, store) = temp_store().await;
    assert!(dir.path().join("data/agenthold.db").is_file());
    assert_eq!(pragma(&store, "journal_mode").await, "wal");
    assert_eq!(pragma(&store, "synchronous").await, "1"); // NORMAL
    assert_eq!(pragma(&store, "foreign_keys").await, "1");
    assert_eq!(pragma(&store, "busy_timeout").await, "5000");
    assert_eq!(
        pragma(&store, "user_version").await,
        migrations::latest().to_string()
    );
}

#[tokio::test]
async fn migrations_are_idempotent_on_reopen() {
    let (dir, store) = temp_store().await;
    let a = store.insert_agent(new_agent("one")).await.unwrap();
    drop(store);
    for _ in 0..3 {
        let store = Store::open(&dir.path().join("data/agenthold.db"))
            .await
            .unwrap();
        assert_eq!(
            pragma(&store, "user_version").await,
            migrations::latest().to_string()
        );
        assert_eq!(store.list_agents().await.unwrap(), vec![a.clone()]);
    }
}

#[tokio::test]
async fn a_database_from_a_newer_binary_is_refused() {
    let (dir, store) = temp_store().await;
    store
        .call(|c| Ok(c.pragma_update(None, "user_version", 999)?))
        .await
        .unwrap();
    drop(store);
    let err = Store::open(&dir.path().join("data/agenthold.db"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Newer { found: 999, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("agenthold.db has schema version 999"), "{msg}");
    assert!(msg.contains("newer agenthold"), "{msg}");
}

#[tokio::test]
async fn a_garbage_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [
        (
            "big.db",
            (0..8192u32)
                .map(|i| (i * 31 % 251) as u8)
                .collect::<Vec<u8>>(),
        ),
        ("small.db", b"hello, not a database".to_vec()),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        let err = Store::open(&path).await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{name}: {err:?}");
        let msg = err.to_string();
        assert!(msg.contains(name), "{msg}");
        assert!(msg.contains("not an SQLite database"), "{msg}");
        // The file is left as it was, for the operator to inspect.
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }
}

#[tokio::test]
async fn an_unusable_data_dir_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let err = Store::open(&file.join("sub/agenthold.db"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("cannot create the data directory"));
}

#[tokio::test]
async fn insert_get_list() {
    let store = Store::open_in_memory().await.unwrap();
    let n = new_agent("builder");
    let a = store.insert_agent(n.clone()).await.unwrap();
    assert_eq!(a.id, n.id);
    assert_eq!(a.name, "builder");
    assert_eq!(a.image, n.image);
    assert_eq!(a.cpus, 2.0);
    assert_eq!(a.memory_mb, 4096);
    assert_eq!(a.idle_minutes, 15);
    assert_eq!(a.state, AgentState::Creating);
    assert_eq!(a.error, None);
    assert!(!a.needs_rebuild);
    assert!((chrono::Utc::now() - a.created_at).num_seconds() < 5);
    assert_eq!(a.last_activity_at, None);
    assert_eq!(a.sleeps_at, None);
    assert_eq!(store.get_agent(&a.id).await.unwrap(), a);

    let b = store.insert_agent(new_agent("second")).await.unwrap();
    let c = store.insert_agent(new_agent("third")).await.unwrap();
    let ids: Vec<String> = store
        .list_agents()
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.id)
        .collect();
    assert_eq!(ids, vec![a.id.clone(), b.id, c.id]);

    match store.get_agent("nosuchagent0").await {
        Err(StoreError::NotFound(id)) => assert_eq!(id, "nosuchagent0"),
        other => panic!("{other:?}"),
    }
    match store
        .insert_agent(NewAgent {
            name: "x".into(),
            ..n
        })
        .await
    {
        Err(StoreError::IdTaken(id)) => assert_eq!(id, a.id),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn names_are_unique_among_live_agents() {
    let store = Store::open_in_memory().await.unwrap();
    let a = store.insert_agent(new_agent("dup")).await.unwrap();
    match store.insert_agent(new_agent("dup")).await {
        Err(e @ StoreError::NameTaken(_)) => {
            assert_eq!(
                e.to_string(),
                "the name \"dup\" is already used by another agent"
            )
        }
        other => panic!("{other:?}"),
    }
    // Renaming onto a taken name is refused too, and renaming to its own name is fine.
    let b = store.insert_agent(new_agent("other")).await.unwrap();
    let rename = |name: &str| AgentPatch {
        name: Some(name.to_string()),
        ..Default::default()
    };
    assert!(matches!(
        store.patch_agent(&b.id, rename("dup"), &AgentState::ALL).await,
        Err(StoreError::NameTaken(n)) if n == "dup"
    ));
    assert_eq!(store.get_agent(&b.id).await.unwrap().name, "other");
    store
        .patch_agent(&b.id, rename("other"), &AgentState::ALL)
        .await
        .unwrap();

    // Once the first starts being destroyed, its name is free again.
    store
        .transition(&a.id, &[AgentState::Creating], AgentState::Destroying)
        .await
        .unwrap();
    let c = store.insert_agent(new_agent("dup")).await.unwrap();
    assert_eq!(c.name, "dup");
    assert_eq!(store.list_agents().await.unwrap().len(), 3);
    // Both rows exist; deleting the old one leaves the new one.
    store.delete_agent(&a.id).await.unwrap();
    assert_eq!(store.get_agent(&c.id).await.unwrap().name, "dup");
}

#[tokio::test]
async fn transitions_are_guarded() {
    let store = Store::open_in_memory().await.unwrap();
    let a = store.insert_agent(new_agent("a")).await.unwrap();
    let moved = store
        .transition(&a.id, &[AgentState::Creating], AgentState::Running)
        .await
        .unwrap();
    assert_eq!(moved.state, AgentState::Running);
    assert_eq!(
        store.get_agent(&a.id).await.unwrap().state,
        AgentState::Running
    );

    let err = store
        .transition(
            &a.id,
            &[AgentState::Sleeping, AgentState::Error],
            AgentState::Starting,
        )
        .await
        .unwrap_err();
    match &err {
        StoreError::Conflict { id, state } => {
            assert_eq!(id, &a.id);
            assert_eq!(*state, AgentState::Running);
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("is running"), "{err}");
    assert_eq!(
        store.get_agent(&a.id).await.unwrap().state,
        AgentState::Running
    );

    // An empty `from` allows nothing.
    assert!(matches!(
        store.transition(&a.id, &[], AgentState::Stopping).await,
        Err(StoreError::Conflict {
            state: AgentState::Running,
            ..
        })
    ));
    assert!(matches!(
        store
            .transition("missing00000", &AgentState::ALL, AgentState::Running)
            .await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_many_racing_transitions_exactly_one_wins() {
    let (_dir, store) = temp_store().await;
    let a = store.insert_agent(new_agent("racer")).await.unwrap();
    store
        .transition(&a.id, &[AgentState::Creating], AgentState::Sleeping)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let store = store.clone();
        let id = a.id.clone();
        tasks.push(tokio::spawn(async move {
            store
                .transition(&id, &[AgentState::Sleeping], AgentState::Starting)
                .await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(agent) => {
                assert_eq!(agent.state, AgentState::Starting);
                wins += 1;
            }
            Err(StoreError::Conflict { state, .. }) => assert_eq!(state, AgentState::Starting),
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(wins, 1);
}

#[tokio::test]
async fn fail_sets_the_error_and_the_next_transition_clears_it() {
    let store = Store::open_in_memory().await.unwrap();
    let a = store.insert_agent(new_agent("a")).await.unwrap();
    let failed = store
        .fail(
            &a.id,
            &[AgentState::Creating],
            "image not found: nope:latest",
        )
        .await
        .unwrap();
    assert_eq!(failed.state, AgentState::Error);
    assert_eq!(
        failed.error.as_deref(),
        Some("image not found: nope:latest")
    );

    // A guarded fail respects its states like any move.
    assert!(matches!(
        store.fail(&a.id, &[AgentState::Running], "x").await,
        Err(StoreError::Conflict {
            state: AgentState::Error,
            ..
        })
    ));
    // Moving into error without a message keeps the one there.
    let still = store
        .transition(&a.id, &[AgentState::Error], AgentState::Error)
        .await
        .unwrap();
    assert_eq!(still.error.as_deref(), Some("image not found: nope:latest"));

    let retried = store
        .transition(&a.id, &[AgentState::Error], AgentState::Starting)
        .await
        .unwrap();
    assert_eq!(retried.state, AgentState::Starting);
    assert_eq!(retried.error, None);
    assert_eq!(store.get_agent(&a.id).await.unwrap().error, None);
}

#[tokio::test]
async fn patch_sets_needs_rebuild_only_on_a_real_change() {
    let store = Store::open_in_memory().await.unwrap();
    let a = store.insert_agent(new_agent("p")).await.unwrap();
    let all = &AgentState::ALL;

    // Same values, name and idle time: no rebuild.
    let p = store
        .patch_agent(
            &a.id,
            AgentPatch {
                name: Some("renamed".into()),
                idle_minutes: Some(60),
                deep_sleep_minutes: None,
                image: Some(a.image.clone()),
                cpus: Some(a.cpus),
                memory_mb: Some(a.memory_mb),
                disk_mb: None,
                egress: Some(crate::egress::EgressChange::both(
                    crate::egress::EgressRules {
                        allow: vec!["*.pythonhosted.org:443".parse().unwrap()],
                        deny: vec!["evil.example".parse().unwrap()],
                    },
                )),
                egress_default: Default::default(),
                env: None,
                secrets: None,
                runtime: Some(a.runtime.clone()),
                ttl_minutes: None,
                expires_at: None,
                labels: None,
                allow_root: Some(a.allow_root),
                approvals: Default::default(),
                access: None,
            },
            all,
        )
        .await
        .unwrap();
    assert_eq!(p.name, "renamed");
    // New egress rules apply without a rebuild, and read back as written.
    let stored = store.get_agent(&a.id).await.unwrap().egress.unwrap();
    assert_eq!(
        serde_json::to_value(&stored).unwrap(),
        serde_json::json!({"allow": ["*.pythonhosted.org:443"], "deny": ["evil.example"]})
    );
    assert_eq!(a.egress.unwrap().allow[0].to_string(), "pypi.org");
    assert_eq!(p.idle_minutes, 60);
    assert!(!p.needs_rebuild);
    let p = store
        .patch_agent(&a.id, AgentPatch::default(), all)
        .await
        .unwrap();
    assert!(!p.needs_rebuild);

    for patch in [
        AgentPatch {
            image: Some("alpine:3".into()),
            ..Default::default()
        },
        AgentPatch {
            cpus: Some(4.0),
            ..Default::default()
        },
        AgentPatch {
            memory_mb: Some(8192),
            ..Default::default()
        },
        AgentPatch {
            runtime: Some("runsc".into()),
            ..Default::default()
        },
    ] {
        store.clear_needs_rebuild(&a.id).await.unwrap();
        assert!(!store.get_agent(&a.id).await.unwrap().needs_rebuild);
        let p = store.patch_agent(&a.id, patch.clone(), all).await.unwrap();
        assert!(p.needs_rebuild, "{patch:?}");
        // Changing something else later keeps the flag until a rebuild clears it.
        let p = store
            .patch_agent(
                &a.id,
                AgentPatch {
                    idle_minutes: Some(5),
                    ..Default::default()
                },
                all,
            )
            .await
            .unwrap();
        assert!(p.needs_rebuild);
    }
    let p = store.get_agent(&a.id).await.unwrap();
    assert_eq!(p.runtime, "runsc");
    assert_eq!(
        (p.image.as_str(), p.cpus, p.memory_mb),
        ("alpine:3", 4.0, 8192)
    );

    // A state outside `allowed_states` refuses the patch and changes nothing.
    let err = store
        .patch_agent(
            &a.id,
            AgentPatch {
                name: Some("nope".into()),
                ..Default::default()
            },
            &[AgentState::Running],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Conflict {
                state: AgentState::Creating,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(store.get_agent(&a.id).await.unwrap().name, "renamed");
    assert!(matches!(
        store
            .patch_agent("missing00000", AgentPatch::default(), all)
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store
            .patch_agent(
                &a.id,
                AgentPatch {
                    memory_mb: Some(u64::MAX),
                    ..Default::default()
                },
                all
            )
            .await,
        Err(StoreError::Invalid(_))
    ));
}

#[tokio::test]
async fn boot_tokens_and_subnets() {
    let store = Store::open_in_memory().await.unwrap();
    let a = store.insert_agent(new_agent("a")).await.unwrap();
    let b = store.insert_agent(new_agent("b")).await.unwrap();

    assert_eq!(store.boot_token_hash(&a.id).await.unwrap(), None);
    let token = new_token();
    store
        .set_boot_token_hash(&a.id, Some(&hash_token(&token)))
        .await
        .unwrap();
    let stored = store.boot_token_hash(&a.id).await.unwrap().unwrap();
    assert!(verify_token(&token, &stored));
    store.set_boot_token_hash(&a.id, None).await.unwrap();
    assert_eq!(store.boot_token_hash(&a.id).await.unwrap(), None);
    assert!(matches!(
        store.boot_token_hash("missing00000").await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.set_boot_token_hash("missing00000", None).await,
        Err(StoreError::NotFound(_))
    ));

    assert!(store.subnets_in_use().await.unwrap().is_empty());
    store
        .set_subnet(&b.id, Some("10.213.0.16/28"))
        .await
        .unwrap();
    store
        .set_subnet(&a.id, Some("10.213.0.0/28"))
        .await
        .unwrap();
    assert_eq!(
        store.subnets_in_use().await.unwrap(),
        vec!["10.213.0.0/28", "10.213.0.16/28"]
    );
    assert_eq!(
        store.subnet(&a.id).await.unwrap().as_deref(),
        Some("10.213.0.0/28")
    );
    match store.set_subnet(&b.id, Some("10.213.0.0/28")).await {
        Err(StoreError::SubnetTaken(s)) => assert_eq!(s, "10.213.0.0/28"),
        other => panic!("{other:?}"),
    }
    store.set_subnet(&a.id, None).await.unwrap();
    assert_eq!(
        store.subnets_in_use().await.unwrap(),
        vec!["10.213.0.16/28"]
    );
    // Deleting an agent releases its subnet.
    store.delete_agent(&b.id).await.unwrap();
    assert!(store.subnets_in_use().await.unwrap().is_empty());
    assert!(matches!(
        store.delete_agent(&b.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.clear_needs_rebuild(&b.id).await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn settings_round_trip() {
    let store = Store::open_in_memory().await.unwrap();
    assert_eq!(store.get_setting("k").await.unwrap(), None);
    store.set_setting("k", "v1").await.unwrap();
    store.set_setting("k", "v2").await.unwrap();
    assert_eq!(store.get_setting("k").await.unwrap().as_deref(), Some("v2"));
    store.delete_setting("k").await.unwrap();
    store.delete_setting("k").await.unwrap();
    assert_eq!(store.get_setting("k").await.unwrap(), None);
}

#[tokio::test]
async fn web_sessions_end_with_their_time_or_their_admin_token() {
    let store = Store::open_in_memory().await.unwrap();
    store
        .add_web_session("s1", "admin-a", None, 100, 10)
        .await
        .unwrap();
    store
        .add_web_session("s2", "admin-a", None, 50, 10)
        .await
        .unwrap();
    store
        .add_web_session("s3", "admin-b", None, 100, 10)
        .await
        .unwrap();
    assert!(matches!(
        store.add_web_session("s1", "admin-a", None, 100, 10).await,
        Err(StoreError::Sqlite(_))
    ));
    // At 50, s2 has ended; s3 was opened with another admin token.
    let mut live = store.live_web_sessions("admin-a", 50).await.unwrap();
    live.sort();
    assert_eq!(live, vec![("s1".to_string(), 100, None)]);
    assert_eq!(
        store.live_web_sessions("admin-b", 50).await.unwrap(),
        vec![],
        "sessions of an admin token that was replaced are gone for good"
    );
    // A new session sweeps out the ones that have ended.
    store
        .add_web_session("s4", "admin-a", None, 300, 100)
        .await
        .unwrap();
    assert_eq!(
        store.live_web_sessions("admin-a", 0).await.unwrap(),
        vec![("s4".to_string(), 300, None)]
    );
    store.remove_web_session("s4").await.unwrap();
    store.remove_web_session("s4").await.unwrap();
    assert_eq!(store.live_web_sessions("admin-a", 0).await.unwrap(), vec![]);
}

/// A database file at `path` with the first `version` schema steps applied, as an older
/// agenthold left it.
fn database_at_version(path: &std::path::Path, version: usize) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(path).unwrap();
    for step in &migrations::MIGRATIONS[..version] {
        c.execute_batch(step).unwrap();
    }
    c.pragma_update(None, "user_version", version as i64)
        .unwrap();
    c
}

#[tokio::test]
async fn a_database_of_an_older_schema_is_upgraded_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agenthold.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(migrations::MIGRATIONS[0]).unwrap();
        c.pragma_update(None, "user_version", 1).unwrap();
        c.execute(
            "INSERT INTO settings (key, value) VALUES ('kept', 'yes')",
            [],
        )
        .unwrap();
    }
    let store = Store::open(&path).await.unwrap();
    assert_eq!(
        pragma(&store, "user_version").await,
        migrations::latest().to_string()
    );
    assert_eq!(
        store.get_setting("kept").await.unwrap().as_deref(),
        Some("yes")
    );
    store.add_web_session("s", "a", None, 2, 1).await.unwrap();
    assert_eq!(
        store.live_web_sessions("a", 1).await.unwrap(),
        vec![("s".to_string(), 2, None)]
    );
    // The admin token's user is there, an admin, with no password yet.
    let users = store.list_users().await.unwrap();
    assert_eq!(users.len(), 1);
    assert!(users[0].is_built_in() && users[0].role == Role::Admin && !users[0].has_password);
}

#[tokio::test]
async fn the_last_admin_stays_and_a_user_takes_their_tokens_and_sessions_along() {
    use crate::model::teams::{ApiToken, Scope, TokenApprovals, User};
    let store = Store::open_in_memory().await.unwrap();
    let now = chrono::Utc::now();
    let user = |id: &str, role| User {
        id: id.into(),
        name: id.into(),
        role,
        has_password: false,
        created_at: now,
        updated_at: now,
    };
    store
        .add_user(user("ann", Role::Member), None)
        .await
        .unwrap();
    assert!(matches!(
        store.add_user(user("ann", Role::Member), None).await,
        Err(StoreError::UserNameTaken(_)) | Err(StoreError::Sqlite(_))
    ));
    let demote = || UserChange {
        role: Some(Role::Member),
        ..UserChange::default()
    };
    assert!(matches!(
        store.update_user("admin", demote(), now).await,
        Err(StoreError::LastAdmin)
    ));
    store
        .add_api_token(ApiToken {
            id: "t1".into(),
            user_id: "ann".into(),
            name: "ci".into(),
            token_hash: "h1".into(),
            scopes: [Scope::AgentsRead].into(),
            agents: Some(["a1".to_string()].into()),
            created_at: now,
            expires_at: None,
            supervised: true,
            approvals: TokenApprovals::Deny,
        })
        .await
        .unwrap();
    let tokens = store.list_api_tokens().await.unwrap();
    assert_eq!(tokens.len(), 1);
    assert_eq!(tokens[0].agents, Some(["a1".to_string()].into()));
    assert!(tokens[0].supervised);
    assert_eq!(tokens[0].approvals, TokenApprovals::Deny);
    store
        .add_web_session("s1", "x", Some("ann".into()), 100, 1)
        .await
        .unwrap();
    store.delete_user("ann").await.unwrap();
    assert!(store.list_api_tokens().await.unwrap().is_empty());
    assert!(store.live_web_sessions("x", 1).await.unwrap().is_empty());
    assert!(matches!(
        store.delete_user("admin").await,
        Err(StoreError::LastAdmin)
    ));
}

#[tokio::test]
async fn an_agent_from_before_disk_limits_keeps_its_unlimited_home() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agenthold.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(migrations::MIGRATIONS[0]).unwrap();
        c.execute_batch(migrations::MIGRATIONS[1]).unwrap();
        c.pragma_update(None, "user_version", 2).unwrap();
        c.execute(
            "INSERT INTO agents (id, name, image, cpus, memory_mb, idle_minutes, state,
                                 created_at, updated_at)
             VALUES ('old1', 'old', 'debian', 1.0, 512, 15, 'sleeping',
                     '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')",
            [],
        )
        .unwrap();
    }
    let store = Store::open(&path).await.unwrap();
    let old = store.get_agent("old1").await.unwrap();
    assert_eq!(old.disk_mb, None);
    // Such a home's files are on the host's disk: no limit can be put on it afterwards.
    let err = store
        .patch_agent(
            "old1",
            AgentPatch {
                disk_mb: Some(2048),
                ..Default::default()
            },
            &AgentState::ALL,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Unfit { field: "diskMb", why } if why.contains("no disk limit")),
        "{err:?}"
    );
    assert_eq!(store.get_agent("old1").await.unwrap().disk_mb, None);
}

#[tokio::test]
async fn an_agent_from_before_egress_rules_has_none_until_given_some() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agenthold.db");
    {
        let c = database_at_version(&path, 3);
        c.execute(
            "INSERT INTO agents (id, name, image, cpus, memory_mb, idle_minutes, state,
                                 created_at, updated_at, disk_mb)
             VALUES ('old1', 'old', 'debian', 1.0, 512, 15, 'running',
                     '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', 1024)",
            [],
        )
        .unwrap();
    }
    let store = Store::open(&path).await.unwrap();
    // None: the lifecycle shows (and the proxy applies) `sandbox.egress.default` for it.
    assert_eq!(store.get_agent("old1").await.unwrap().egress, None);
    // A change of one list keeps the other of the default it followed.
    let default: crate::egress::EgressRules = serde_json::from_value(
        serde_json::json!({"allow": ["pypi.org"], "deny": ["evil.example"]}),
    )
    .unwrap();
    let changed = store
        .patch_agent(
            "old1",
            AgentPatch {
                egress: Some(crate::egress::EgressChange {
                    allow: Some(vec!["*".parse().unwrap()]),
                    deny: None,
                }),
                egress_default: default,
                ..Default::default()
            },
            &AgentState::ALL,
        )
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(changed.egress.unwrap()).unwrap(),
        serde_json::json!({"allow": ["*"], "deny": ["evil.example"]})
    );
    let rules: crate::egress::EgressRules =
        serde_json::from_value(serde_json::json!({"allow": ["pypi.org"]})).unwrap();
    let patched = store
        .patch_agent(
            "old1",
            AgentPatch {
                egress: Some(crate::egress::EgressChange::both(rules.clone())),
                ..Default::default()
            },
            &AgentState::ALL,
        )
        .await
        .unwrap();
    assert_eq!(patched.egress, Some(rules));
    assert!(!patched.needs_rebuild);
}

#[tokio::test]
async fn a_change_of_one_egress_list_keeps_the_other() {
    let store = Store::open_in_memory().await.unwrap();
    let rules =
        |v: serde_json::Value| -> crate::egress::EgressRules { serde_json::from_value(v).unwrap() };
    let list =
        |r: &[&str]| -> Vec<crate::egress::Rule> { r.iter().map(|r| r.parse().unwrap()).collect() };
    let a = store.insert_agent(new_agent("keep")).await.unwrap();
    let change = |allow: Option<&[&str]>, deny: Option<&[&str]>, default| AgentPatch {
        egress: Some(crate::egress::EgressChange {
            allow: allow.map(list),
            deny: deny.map(list),
        }),
        egress_default: default,
        ..Default::default()
    };
    let patch = |p| store.patch_agent(&a.id, p, &AgentState::ALL);
    let both = patch(change(
        Some(&["pypi.org"]),
        Some(&["evil.example"]),
        Default::default(),
    ))
    .await
    .unwrap();
    assert_eq!(
        both.egress,
        Some(rules(
            serde_json::json!({"allow": ["pypi.org"], "deny": ["evil.example"]})
        ))
    );
    let allow = patch(change(Some(&["github.com"]), None, Default::default()))
        .await
        .unwrap();
    assert_eq!(
        allow.egress,
        Some(rules(
            serde_json::json!({"allow": ["github.com"], "deny": ["evil.example"]})
        ))
    );
    let deny = patch(change(None, Some(&[]), Default::default()))
        .await
        .unwrap();
    assert_eq!(
        deny.egress,
        Some(rules(serde_json::json!({"allow": ["github.com"]})))
    );
}

#[tokio::test]
async fn a_disk_limit_grows_and_never_shrinks() {
    let store = Store::open_in_memory().await.unwrap();
    let a = store.insert_agent(new_agent("disk")).await.unwrap();
    assert_eq!(a.disk_mb, Some(1024));
    let set = |mb| AgentPatch {
        disk_mb: Some(mb),
        ..Default::default()
    };
    let grown = store
        .patch_agent(&a.id, set(4096), &AgentState::ALL)
        .await
        .unwrap();
    assert_eq!(grown.disk_mb, Some(4096));
    // A start grows the disk; nothing needs a rebuild for it.
    assert!(!grown.needs_rebuild);
    let err = store
        .patch_agent(&a.id, set(2048), &AgentState::ALL)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Unfit { field: "diskMb", why } if why.contains("only grow")),
        "{err:?}"
    );
    let same = store
        .patch_agent(&a.id, set(4096), &AgentState::ALL)
        .await
        .unwrap();
    assert_eq!(same.disk_mb, Some(4096));
    // Other changes leave the limit as it is.
    let renamed = store
        .patch_agent(
            &a.id,
            AgentPatch {
                name: Some("disk2".into()),
                ..Default::default()
            },
            &AgentState::ALL,
        )
        .await
        .unwrap();
    assert_eq!(renamed.disk_mb, Some(4096));
}

#[tokio::test]
async fn two_stores_on_one_file_see_each_others_writes() {
    let (dir, first) = temp_store().await;
    let path = dir.path().join("data/agenthold.db");
    let a = first.insert_agent(new_agent("shared")).await.unwrap();
    first.set_setting("instance", "x").await.unwrap();

    let second = Store::open(&path).await.unwrap();
    assert_eq!(second.get_agent(&a.id).await.unwrap(), a);
    second
        .transition(&a.id, &[AgentState::Creating], AgentState::Running)
        .await
        .unwrap();
    assert_eq!(
        first.get_agent(&a.id).await.unwrap().state,
        AgentState::Running
    );
    // The guard holds across connections too.
    assert!(matches!(
        first
            .transition(&a.id, &[AgentState::Creating], AgentState::Error)
            .await,
        Err(StoreError::Conflict {
            state: AgentState::Running,
            ..
        })
    ));
    drop(first);
    drop(second);

    let third = Store::open(&path).await.unwrap();
    let got = third.get_agent(&a.id).await.unwrap();
    assert_eq!(got.state, AgentState::Running);
    assert_eq!(got.created_at, a.created_at);
    assert_eq!(
        third.get_setting("instance").await.unwrap().as_deref(),
        Some("x")
    );
}

#[tokio::test]
async fn a_bad_stored_value_is_corrupt_not_a_panic() {
    let store = Store::open_in_memory().await.unwrap();
    let a = store.insert_agent(new_agent("a")).await.unwrap();
    let id = a.id.clone();
    store
        .call(move |c| {
            c.execute("UPDATE agents SET state = 'frozen' WHERE id = ?1", [&id])?;
            Ok(())
        })
        .await
        .unwrap();
    let err = store.get_agent(&a.id).await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    assert!(
        err.to_string().contains("impossible state: frozen"),
        "{err}"
    );
    assert!(store.list_agents().await.is_err());
}

#[tokio::test]
async fn a_timeout_of_an_earlier_boot_does_not_fail_a_later_one() {
    let (_dir, store) = temp_store().await;
    let a = store.insert_agent(new_agent("boots")).await.unwrap();
    store
        .transition(&a.id, &[AgentState::Creating], AgentState::Starting)
        .await
        .unwrap();
    store
        .set_boot_token_hash(&a.id, Some("second"))
        .await
        .unwrap();

    let refused = store.fail_boot(&a.id, "first", "late timeout").await;
    assert!(
        matches!(
            refused,
            Err(StoreError::Conflict {
                state: AgentState::Starting,
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(
        store.get_agent(&a.id).await.unwrap().state,
        AgentState::Starting
    );

    let failed = store.fail_boot(&a.id, "second", "no hello").await.unwrap();
    assert_eq!(failed.state, AgentState::Error);
    assert_eq!(failed.error.as_deref(), Some("no hello"));
}

#[tokio::test]
async fn preset_env_and_setup_are_kept() {
    use crate::model::{SetupState, SetupStatus};
    let store = Store::open_in_memory().await.unwrap();
    let env = std::collections::BTreeMap::from([("NODE_ENV".to_string(), "dev".to_string())]);
    let a = store
        .insert_agent(NewAgent {
            preset: Some("dev".into()),
            env: env.clone(),
            ..new_agent("p")
        })
        .await
        .unwrap();
    assert_eq!(a.preset.as_deref(), Some("dev"));
    assert_eq!(a.env, env);
    assert_eq!(a.setup, None);
    let status = SetupStatus {
        state: SetupState::Failed,
        exit_code: Some(3),
        process_id: Some("p1".into()),
        error: None,
    };
    store.set_setup(&a.id, Some(&status)).await.unwrap();
    let patched = store
        .patch_agent(
            &a.id,
            AgentPatch {
                env: Some(Default::default()),
                ..Default::default()
            },
            &AgentState::ALL,
        )
        .await
        .unwrap();
    assert!(patched.env.is_empty());
    assert!(
        !patched.needs_rebuild,
        "env applies to new processes, not by a rebuild"
    );
    assert_eq!(patched.setup, Some(status));
}

#[tokio::test]
async fn lifetimes_and_labels_are_stored_and_changed() {
    let store = Store::open_in_memory().await.unwrap();
    let at = chrono::DateTime::parse_from_rfc3339("2027-01-02T03:04:05.678Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    let a = store
        .insert_agent(NewAgent {
            ttl_minutes: Some(30),
            expires_at: Some(at),
            labels: [("team".to_string(), "ml".to_string())].into(),
            ..new_agent("ttl")
        })
        .await
        .unwrap();
    assert_eq!((a.ttl_minutes, a.expires_at), (Some(30), Some(at)));
    assert_eq!(a.labels["team"], "ml");
    // A lifetime without its deadline is none.
    let b = store
        .insert_agent(NewAgent {
            ttl_minutes: Some(30),
            ..new_agent("half")
        })
        .await
        .unwrap();
    assert_eq!((b.ttl_minutes, b.expires_at), (None, None));
    let later = at + chrono::Duration::minutes(5);
    let kept = store.set_ttl(&a.id, 60, later).await.unwrap();
    assert_eq!((kept.ttl_minutes, kept.expires_at), (Some(60), Some(later)));
    // A patch that names neither leaves both; one that does replaces them.
    let p = store
        .patch_agent(
            &a.id,
            AgentPatch {
                idle_minutes: Some(3),
                ..Default::default()
            },
            &AgentState::ALL,
        )
        .await
        .unwrap();
    assert_eq!((p.ttl_minutes, p.expires_at), (Some(60), Some(later)));
    assert_eq!(p.labels.len(), 1);
    let p = store
        .patch_agent(
            &a.id,
            AgentPatch {
                ttl_minutes: Some(None),
                labels: Some(Default::default()),
                ..Default::default()
            },
            &AgentState::ALL,
        )
        .await
        .unwrap();
    assert_eq!((p.ttl_minutes, p.expires_at), (None, None));
    assert!(p.labels.is_empty());
    store
        .transition(&a.id, &AgentState::ALL, AgentState::Destroying)
        .await
        .unwrap();
    assert!(matches!(
        store.set_ttl(&a.id, 1, later).await,
        Err(StoreError::Conflict { .. })
    ));
}

#[tokio::test]
async fn an_agent_from_before_allow_root_may_not_become_root_until_patched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agenthold.db");
    {
        let c = database_at_version(&path, 9);
        c.execute(
            "INSERT INTO agents (id, name, image, cpus, memory_mb, idle_minutes, state,
                                 created_at, updated_at)
             VALUES ('old1', 'old', 'debian', 1.0, 512, 15, 'running',
                     '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')",
            [],
        )
        .unwrap();
    }
    let store = Store::open(&path).await.unwrap();
    let old = store.get_agent("old1").await.unwrap();
    assert!(!old.allow_root);
    assert!(!old.needs_rebuild);
    let changed = store
        .patch_agent(
            "old1",
            AgentPatch {
                allow_root: Some(true),
                ..Default::default()
            },
            &AgentState::ALL,
        )
        .await
        .unwrap();
    assert!(changed.allow_root);
    assert!(
        changed.needs_rebuild,
        "the container's side needs a rebuild"
    );
}

#[tokio::test]
async fn agents_from_before_access_belong_to_admin_and_are_private() {
    use crate::model::teams::{AgentAccess, MemberRole};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agenthold.db");
    {
        let c = database_at_version(&path, 11);
        c.execute(
            "INSERT INTO agents (id, name, image, cpus, memory_mb, idle_minutes, state,
                                 created_at, updated_at)
             VALUES ('old1', 'old', 'debian', 1.0, 512, 15, 'running',
                     '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')",
            [],
        )
        .unwrap();
    }
    let store = Store::open(&path).await.unwrap();
    let old = store.get_agent("old1").await.unwrap();
    assert_eq!(
        (old.owner_id.as_str(), old.owner_name.as_str()),
        ("admin", "admin")
    );
    assert_eq!(old.access, AgentAccess::Private);
    let facts = store.agent_facts("old1").unwrap();
    assert_eq!(facts.owner_id, "admin");
    assert!(facts.members.is_empty());

    // A member survives a restart (the mirror is read back), and goes with their user; a
    // deleted owner's agents are admin's.
    let now = chrono::Utc::now();
    let ann = crate::model::teams::User {
        id: "ann1".into(),
        name: "ann".into(),
        role: Role::Member,
        has_password: false,
        created_at: now,
        updated_at: now,
    };
    store.add_user(ann.clone(), None).await.unwrap();
    store
        .set_member("old1", &ann.id, MemberRole::Operator)
        .await
        .unwrap();
    let mut mine = new_agent("annes");
    mine.owner_id = ann.id.clone();
    let mine = store.insert_agent(mine).await.unwrap();
    assert_eq!(mine.owner_name, "ann");
    drop(store);
    let store = Store::open(&path).await.unwrap();
    assert_eq!(
        store.agent_facts("old1").unwrap().members.get(&ann.id),
        Some(&MemberRole::Operator)
    );
    store.delete_user(&ann.id).await.unwrap();
    assert!(store.agent_facts("old1").unwrap().members.is_empty());
    assert!(store.members("old1").await.unwrap().is_empty());
    assert_eq!(store.agent_facts(&mine.id).unwrap().owner_id, "admin");
    assert_eq!(store.get_agent(&mine.id).await.unwrap().owner_name, "admin");
}

#[tokio::test]
async fn agents_subnets_move_to_their_own_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agenthold.db");
    {
        let c = database_at_version(&path, 18);
        c.execute(
            "INSERT INTO agents (id, name, image, cpus, memory_mb, idle_minutes, state,
                                 created_at, updated_at, subnet)
             VALUES ('old1', 'old', 'debian', 1.0, 512, 15, 'running',
                     '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', '10.213.0.32/28')",
            [],
        )
        .unwrap();
    }
    let store = Store::open(&path).await.unwrap();
    assert_eq!(
        store.subnet("old1").await.unwrap().as_deref(),
        Some("10.213.0.32/28")
    );
    assert_eq!(
        store.subnets_in_use().await.unwrap(),
        vec!["10.213.0.32/28"]
    );
}

#[tokio::test]
async fn a_pool_entry_holds_a_subnet_its_claim_keeps_and_its_removal_frees() {
    let store = Store::open_in_memory().await.unwrap();
    let agent = store.insert_agent(new_agent("a")).await.unwrap();
    let (e1, e2) = ("entry0000001", "entry0000002");
    for e in [e1, e2] {
        let limits = crate::model::Limits {
            cpus: 1.0,
            memory_mb: 512,
        };
        store
            .insert_pool_entry(e, "hot", "d", limits, "h")
            .await
            .unwrap();
    }
    store.set_subnet(e1, Some("10.213.0.0/28")).await.unwrap();
    store.set_subnet(e2, Some("10.213.0.16/28")).await.unwrap();
    // Unique across agents and entries alike.
    assert!(matches!(
        store.set_subnet(&agent.id, Some("10.213.0.0/28")).await,
        Err(StoreError::SubnetTaken(_))
    ));
    // Neither an agent nor an entry holds none.
    assert!(matches!(
        store
            .set_subnet("nobody000000", Some("10.213.0.48/28"))
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(store.subnet("nobody000000").await.unwrap(), None);

    store
        .set_pool_entry_state(e1, crate::store::pool::EntryState::Ready)
        .await
        .unwrap();
    let mut new = new_agent("claimed");
    new.preset = Some("hot".into());
    let (claimed, limits) = store
        .claim_pool_entry("hot", "d", new.clone())
        .await
        .unwrap()
        .expect("claimed");
    assert_eq!(claimed.id, e1);
    assert_eq!(
        limits,
        Some(crate::model::Limits {
            cpus: 1.0,
            memory_mb: 512
        }),
        "the claim tells the entry's limits"
    );
    assert!(
        claimed.needs_rebuild,
        "other limits than the entry's: marked until the sandbox is resized"
    );
    // Resized: cleared, as long as the agent is still what the claim made.
    store
        .clear_needs_rebuild_if_made_as(e1, &new)
        .await
        .unwrap();
    assert!(!store.get_agent(e1).await.unwrap().needs_rebuild);
    let mut other = new.clone();
    other.image = "another:1".into();
    store
        .call({
            let e1 = e1.to_string();
            move |c| {
                c.execute("UPDATE agents SET needs_rebuild = 1 WHERE id = ?1", [&e1])?;
                Ok(())
            }
        })
        .await
        .unwrap();
    store
        .clear_needs_rebuild_if_made_as(e1, &other)
        .await
        .unwrap();
    assert!(
        store.get_agent(e1).await.unwrap().needs_rebuild,
        "changed since (another image): still asks for a rebuild"
    );
    assert_eq!(
        store.subnet(e1).await.unwrap().as_deref(),
        Some("10.213.0.0/28"),
        "the agent keeps its entry's subnet"
    );
    assert!(store.delete_pool_entry(e2).await.unwrap());
    assert_eq!(store.subnets_in_use().await.unwrap(), vec!["10.213.0.0/28"]);
    store.delete_agent(e1).await.unwrap();
    assert!(store.subnets_in_use().await.unwrap().is_empty());
}

/// A claim racing the removal of the same entry (the keeper found it stale, say): exactly one
/// of them has it. The keeper destroys the sandbox only when its delete found the row, so the
/// sandbox is either the agent's or gone, never both or neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_racing_a_removal_of_the_same_entry_leaves_one_winner() {
    let store = Store::open_in_memory().await.unwrap();
    let limits = crate::model::Limits {
        cpus: 2.0,
        memory_mb: 4096,
    };
    let (mut claims, mut removals) = (0, 0);
    for round in 0..100 {
        let id = format!("race{round:08}");
        store
            .insert_pool_entry(&id, "hot", "d", limits, "h")
            .await
            .unwrap();
        store
            .set_pool_entry_state(&id, crate::store::pool::EntryState::Ready)
            .await
            .unwrap();
        store.set_subnet(&id, Some("10.213.0.0/28")).await.unwrap();
        let mut new = new_agent(&format!("claimer-{round}"));
        new.preset = Some("hot".into());
        let (claim, removal) = tokio::join!(
            tokio::spawn({
                let store = store.clone();
                async move { store.claim_pool_entry("hot", "d", new).await.unwrap() }
            }),
            tokio::spawn({
                let (store, id) = (store.clone(), id.clone());
                async move { store.delete_pool_entry(&id).await.unwrap() }
            }),
        );
        let (claimed, removed) = (claim.unwrap(), removal.unwrap());
        assert_ne!(claimed.is_some(), removed, "round {round}: one winner");
        assert!(store.pool_entry(&id).await.unwrap().is_none());
        if let Some((agent, _)) = claimed {
            claims += 1;
            assert_eq!(agent.id, id);
            assert!(!agent.needs_rebuild, "the entry's limits are the agent's");
            assert_eq!(
                store.subnet(&id).await.unwrap().as_deref(),
                Some("10.213.0.0/28")
            );
            store.delete_agent(&id).await.unwrap();
        } else {
            removals += 1;
            assert!(matches!(
                store.get_agent(&id).await,
                Err(StoreError::NotFound(_))
            ));
            assert_eq!(store.subnet(&id).await.unwrap(), None);
        }
    }
    // Both sides won some rounds, or the race was not run.
    eprintln!("claims {claims}, removals {removals}");
}
