//! Warm pools against a real server with the fake driver: the keeper fills each preset's pool,
//! a create claims a ready entry (answering as a cold create would, plus `warm: true`), a
//! create asking for a different sandbox is cold, the pool refills, `sandbox.warm_max` holds
//! across presets, entries are no agents (and get no egress), and a restart keeps or cleans
//! them.

use agenthold::agents::preset::Preset;
use agenthold::config::Config;
use agenthold::driver::fake::LIMITS_FILE;
use agenthold::egress::Sandboxes;
use serde_json::{json, Value};

use crate::common::{wait_for, wait_for_value, TestServer};

/// `hot` keeps `warm` entries; `cold` is the same preset without a pool.
fn pools(warm: u32) -> impl FnOnce(&mut Config) {
    move |c: &mut Config| {
        let preset = Preset {
            image: Some("example/pool:1".into()),
            cpus: Some(1.0),
            memory_mb: Some(512),
            env: [("FROM_PRESET".to_string(), "p".to_string())].into(),
            setup: Some("echo set-up > ~/setup-ran".into()),
            ..Default::default()
        };
        c.presets.insert(
            "hot".into(),
            Preset {
                warm,
                ..preset.clone()
            },
        );
        c.presets.insert("cold".into(), preset);
    }
}

async fn pool_of(s: &TestServer, preset: &str) -> Value {
    let all = s.get_json("/api/v1/pool").await;
    all.as_array()
        .and_then(|a| a.iter().find(|p| p["preset"] == preset).cloned())
        .unwrap_or(Value::Null)
}

/// Waits until `preset`'s pool has `ready` entries ready.
async fn wait_ready(s: &TestServer, preset: &str, ready: u64) {
    wait_for(&format!("{ready} ready entries of {preset}"), || async {
        pool_of(s, preset).await["ready"].as_u64() == Some(ready)
    })
    .await;
}

#[tokio::test]
async fn the_pool_fills_and_a_create_claims_an_entry_that_answers_as_a_cold_one() {
    let s = TestServer::start_with(pools(2)).await;
    wait_ready(&s, "hot", 2).await;
    assert_eq!(
        pool_of(&s, "hot").await,
        json!({"preset": "hot", "target": 2, "ready": 2, "starting": 0})
    );
    // `agenthold pool` shows the same, as a table and as JSON.
    let (code, out, err) = crate::cli::run(&s, &["pool"]).await;
    assert_eq!(code, 0, "{err}");
    let row: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("hot"))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(row, ["hot", "2", "2", "0"], "{out}");
    let (code, out, _) = crate::cli::run(&s, &["--json", "pool"]).await;
    assert_eq!(code, 0);
    let listed: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(listed, s.get_json("/api/v1/pool").await);
    let entries: Vec<String> = s
        .store
        .list_pool_entries()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();

    let warm = s.created_agent(json!({"name": "w", "preset": "hot"})).await;
    assert_eq!(warm["warm"], true, "{warm}");
    assert!(
        entries.contains(&warm["id"].as_str().unwrap().to_string()),
        "the agent has the id its entry was made for"
    );
    let cold = s
        .created_agent(json!({"name": "c", "preset": "cold"}))
        .await;
    assert_eq!(cold["warm"], false, "{cold}");
    // Field by field the same, but for what names the agent, its state and time.
    let differs = [
        "id",
        "name",
        "preset",
        "state",
        "createdAt",
        "warm",
        "lastActivityAt",
        "sleepsAt",
        "setup",
    ];
    let (w, c) = (warm.as_object().unwrap(), cold.as_object().unwrap());
    assert_eq!(
        w.keys().collect::<Vec<_>>(),
        c.keys().collect::<Vec<_>>(),
        "the same fields"
    );
    for (key, value) in w.iter().filter(|(k, _)| !differs.contains(&k.as_str())) {
        assert_eq!(value, &c[key], "field {key}");
    }

    let id = warm["id"].as_str().unwrap();
    s.wait_state(id, "running").await;
    assert_eq!(
        s.exec_ok(id, &["sh", "-c", "echo $FROM_PRESET"]).await,
        "p\n"
    );
    wait_for("the claimed agent's setup", || async {
        s.agent(id).await["setup"]["state"] == "done"
    })
    .await;
    assert_eq!(
        s.exec_ok(id, &["sh", "-c", "cat ~/setup-ran"]).await,
        "set-up\n"
    );
    // The pool refills behind the claim.
    wait_ready(&s, "hot", 2).await;
    s.stop().await;
}

#[tokio::test]
async fn a_create_asking_for_another_sandbox_is_cold() {
    let s = TestServer::start_with(pools(1)).await;
    wait_ready(&s, "hot", 1).await;
    for (name, extra) in [
        ("img", json!({"image": "example/other:2"})),
        ("disk", json!({"diskMb": 2048})),
        ("runtime", json!({"runtime": "runsc"})),
        ("root", json!({"allowRoot": true})),
    ] {
        let mut body = json!({"name": name, "preset": "hot"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let a = s.created_agent(body).await;
        assert_eq!(a["warm"], false, "{name}: {a}");
        assert_eq!(a["state"], "creating", "{name}");
        s.wait_state(a["id"].as_str().unwrap(), "running").await;
    }
    assert_eq!(pool_of(&s, "hot").await["ready"], 1, "no entry was taken");
    s.stop().await;
}

/// CPUs and memory are not the pool's to fix: a create asking for others claims an entry,
/// and its sandbox gets them at the claim.
#[tokio::test]
async fn a_claim_gives_the_sandbox_the_agents_cpus_and_memory() {
    let s = TestServer::start_with(pools(1)).await;
    wait_ready(&s, "hot", 1).await;
    let limits = |id: &str| {
        std::fs::read_to_string(s.dir.path().join("fake").join(id).join(LIMITS_FILE))
            .expect("the fake sandbox's limits")
    };
    let entry = s.store.list_pool_entries().await.unwrap()[0].id.clone();
    assert_eq!(limits(&entry), "cpus=1 memoryMb=512", "the preset's");
    let a = s
        .created_agent(json!({"name": "big", "preset": "hot", "cpus": 2, "memoryMb": 1024}))
        .await;
    assert_eq!(
        (a["warm"].as_bool(), a["id"].as_str()),
        (Some(true), Some(entry.as_str())),
        "{a}"
    );
    assert_eq!(
        (a["cpus"].as_f64(), a["memoryMb"].as_u64()),
        (Some(2.0), Some(1024))
    );
    assert_eq!(
        limits(&entry),
        "cpus=2 memoryMb=1024",
        "the agent's, at the claim"
    );
    assert_eq!(a["needsRebuild"], false);
    // The preset's own limits claim without a change.
    wait_ready(&s, "hot", 1).await;
    let next = s.store.list_pool_entries().await.unwrap()[0].id.clone();
    let b = s
        .created_agent(json!({"name": "same", "preset": "hot"}))
        .await;
    assert_eq!(b["id"].as_str(), Some(next.as_str()));
    assert_eq!(limits(&next), "cpus=1 memoryMb=512");
    s.stop().await;
}

#[tokio::test]
async fn warm_max_holds_across_presets() {
    let s = TestServer::start_with(|c| {
        pools(3)(c);
        let other = Preset {
            warm: 3,
            ..Default::default()
        };
        c.presets.insert("other".into(), other);
        c.sandbox.warm_max = 4;
    })
    .await;
    wait_for_value("4 entries ready in all", || async {
        let all = s.get_json("/api/v1/pool").await;
        let pools = all.as_array().cloned().unwrap_or_default();
        let (ready, total) = pools.iter().fold((0, 0), |(r, t), p| {
            let ready = p["ready"].as_u64().unwrap_or(0);
            (r + ready, t + ready + p["starting"].as_u64().unwrap_or(0))
        });
        assert!(total <= 4, "the pools hold {total} > warm_max: {all}");
        (ready == 4).then_some(())
    })
    .await;
    let entries = s.store.list_pool_entries().await.unwrap();
    assert_eq!(entries.len(), 4);
    s.stop().await;
}

/// A preset whose entries always fail (its image is missing) does not keep the presets after
/// it in name order empty: the keeper tries it again later and fills the others meanwhile.
#[tokio::test]
async fn a_preset_whose_entries_fail_does_not_starve_the_others() {
    let s = TestServer::start_with(|c| {
        pools(1)(c);
        let broken = Preset {
            image: Some("pull.invalid/missing:1".into()),
            warm: 1,
            ..Default::default()
        };
        // Before `hot` in name order, which is the order the keeper fills them in.
        c.presets.insert("a-broken".into(), broken);
    })
    .await;
    wait_ready(&s, "hot", 1).await;
    assert_eq!(pool_of(&s, "a-broken").await["ready"], 0);
    s.stop().await;
}

#[tokio::test]
async fn an_entry_is_no_agent_and_gets_no_egress() {
    let s = TestServer::start_with(pools(1)).await;
    wait_ready(&s, "hot", 1).await;
    let entry = s.store.list_pool_entries().await.unwrap().remove(0).id;
    assert_eq!(s.get_json("/api/v1/agents").await, json!([]));
    let uses = s.lc.activity().uses(&entry);
    // Requests that would reach an agent's sandbox, valid for one: the admin's token may use any
    // agent, and an entry's session is registered under the id its agent will have.
    let sandbox_uses = [
        ("GET", format!("/api/v1/agents/{entry}"), None),
        (
            "GET",
            format!("/api/v1/agents/{entry}/fs/list?path=/home/agent"),
            None,
        ),
        (
            "GET",
            format!("/api/v1/agents/{entry}/fs/read?path=/home/agent/x"),
            None,
        ),
        ("GET", format!("/api/v1/agents/{entry}/processes"), None),
        ("GET", format!("/api/v1/agents/{entry}/code/contexts"), None),
        ("GET", format!("/api/v1/agents/{entry}/terminals"), None),
        ("GET", format!("/api/v1/agents/{entry}/ports"), None),
        (
            "POST",
            format!("/api/v1/agents/{entry}/exec"),
            Some(json!({"command": ["true"]})),
        ),
        (
            "POST",
            format!("/api/v1/agents/{entry}/processes"),
            Some(json!({"command": ["true"]})),
        ),
        ("POST", format!("/api/v1/agents/{entry}/pause"), None),
        (
            "POST",
            format!("/api/v1/agents/{entry}/keep-alive"),
            Some(json!({"ttlMinutes": 5})),
        ),
    ];
    for (method, path, body) in sandbox_uses {
        let (status, _) = s.call(method, &path, body).await;
        assert_eq!(status, 404, "{method} {path}");
    }
    // Every other route of an agent refuses it too, whatever it says about the body.
    for (method, route, _) in agenthold::api::access::ROUTES {
        let Some(rest) = route.strip_prefix("/api/v1/agents/{id}") else {
            continue;
        };
        let path = format!("/api/v1/agents/{entry}{rest}")
            .replace("{pid}", "p")
            .replace("{sid}", "s")
            .replace("{cid}", "c")
            .replace("{user}", "u");
        let body = matches!(*method, "POST" | "PUT" | "PATCH").then(|| json!({}));
        let (status, _) = s.call(method, &path, body).await;
        assert!(!(200..300).contains(&status), "{method} {path}: {status}");
    }
    assert_eq!(
        s.lc.activity().uses(&entry),
        uses,
        "no request counted as a use of the entry"
    );
    // The egress proxy finds no rules for it: whatever it dials is refused.
    assert!(Sandboxes::rules(&*s.lc, &entry).await.is_none());
    assert!(Sandboxes::granted(&*s.lc, &entry).await.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn a_restart_keeps_the_pool_at_its_target_and_leaks_nothing() {
    let s = TestServer::start_with(pools(2)).await;
    wait_ready(&s, "hot", 2).await;
    let a = s.created_agent(json!({"name": "w", "preset": "hot"})).await;
    assert_eq!(a["warm"], true);
    let id = a["id"].as_str().unwrap().to_string();
    s.wait_state(&id, "running").await;
    wait_ready(&s, "hot", 2).await;
    let s = s.restart_with(pools(2)).await;
    wait_ready(&s, "hot", 2).await;
    let entries = s.store.list_pool_entries().await.unwrap();
    assert_eq!(entries.len(), 2);
    assert!(entries.iter().all(|e| e.id != id));
    assert_eq!(
        s.agent(&id).await["warm"],
        true,
        "the agent stays warm-made"
    );
    // A preset without a pool now: its entries go.
    let s = s.restart_with(pools(0)).await;
    wait_for("the pool emptied", || async {
        s.store.list_pool_entries().await.unwrap().is_empty()
    })
    .await;
    assert_eq!(s.get_json("/api/v1/pool").await, json!([]));
    s.stop().await;
}

/// The ids of the warm pool entries in the database of a server whose data is `dir/data`.
fn stored_entries(dir: &std::path::Path) -> Vec<String> {
    let db = rusqlite::Connection::open_with_flags(
        dir.join("data/agenthold.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open the database");
    let mut q = db
        .prepare("SELECT id FROM pool_entries ORDER BY id")
        .expect("prepare");
    let rows = q.query_map([], |r| r.get(0)).expect("query");
    rows.map(|r| r.expect("row")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_replaces_stale_entries_and_empties_a_pool_it_drops() {
    use crate::common::process::ServerConfig;
    let dir = tempfile::tempdir().expect("tempdir");
    let sandbox = "  driver: fake\npresets:\n  hot:\n    image: example/pool:1\n    warm: 2\n";
    let cfg = ServerConfig::write(dir.path(), "127.0.0.1", sandbox, crate::common::DEADLINE);
    let p = cfg.start().await;
    let ready = |want: u64| {
        let cfg = &cfg;
        async move {
            wait_for_value(&format!("{want} ready entries of hot"), || async {
                let pools = cfg.get_json("/api/v1/pool").await;
                let hot = pools
                    .as_array()?
                    .iter()
                    .find(|p| p["preset"] == "hot")?
                    .clone();
                (hot["ready"] == want && hot["starting"] == 0).then_some(hot)
            })
            .await
        }
    };
    ready(2).await;
    let before = stored_entries(dir.path());
    assert_eq!(before.len(), 2);

    // The preset's image changes: both entries are stale, and the pool refills with the new.
    let yaml = std::fs::read_to_string(&cfg.path).expect("read");
    std::fs::write(&cfg.path, yaml.replace("example/pool:1", "example/pool:2")).expect("write");
    let (st, body) = cfg.call("POST", "/api/v1/admin/reload", None).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["applied"], json!(["presets.hot.image"]), "{body}");
    wait_for("the stale entries replaced", || async {
        let now = stored_entries(dir.path());
        now.len() == 2 && now.iter().all(|id| !before.contains(id))
    })
    .await;
    ready(2).await;
    let id = cfg
        .running_agent(json!({"name": "after-reload", "preset": "hot"}))
        .await;
    let agent = cfg.agent(&id).await;
    assert_eq!(
        (agent["warm"].clone(), agent["image"].clone()),
        (json!(true), json!("example/pool:2")),
        "{agent}"
    );
    for old in &before {
        let (st, _) = cfg
            .call("GET", &format!("/api/v1/agents/{old}"), None)
            .await;
        assert_eq!(st, 404, "a stale entry became no agent");
    }

    // `warm: 0`: the pool is emptied and no longer listed.
    let yaml = std::fs::read_to_string(&cfg.path).expect("read");
    std::fs::write(&cfg.path, yaml.replace("warm: 2", "warm: 0")).expect("write");
    let (st, body) = cfg.call("POST", "/api/v1/admin/reload", None).await;
    assert_eq!(st, 200, "{body}");
    wait_for("the pool emptied", || async {
        stored_entries(dir.path()).is_empty() && cfg.get_json("/api/v1/pool").await == json!([])
    })
    .await;
    p.kill();
}
