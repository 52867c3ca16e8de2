//! Agent sessions on the fake driver, with the model-free ACP agent as the harness: prompts
//! and their transcripts (JSON and SSE), approvals, cancel, a harness that crashes, restoring
//! a conversation after sleep by each path, the idle rule, and hostile harnesses and input.
//! The Docker group (`docker::sessions`) repeats what needs a real sandbox: server restarts
//! mid-turn, files as the agent account.

use std::time::Duration;

use agenthold::config::Config;
use futures::StreamExt;
use serde_json::{json, Value};

use crate::common::acp::{harness, test_agent, Chat};
use crate::common::{expect_error, wait_for, TestServer};

fn with_harnesses(c: &mut Config) {
    let agent = test_agent();
    let path = agent.to_str().expect("utf-8 path");
    for (name, restore) in [("test", "load"), ("resume", "resume"), ("none", "none")] {
        c.harnesses
            .insert(name.into(), harness(path, &["--restore", restore]));
    }
    c.harnesses
        .insert("mute".into(), harness(path, &["--never-initialize"]));
    c.sandbox.default_harness = Some("test".into());
    c.sessions.start_timeout = Duration::from_secs(2);
}

async fn server() -> TestServer {
    TestServer::start_with(with_harnesses).await
}

fn kinds(events: &[(u64, String, Value)]) -> Vec<String> {
    events
        .iter()
        .map(|(_, e, d)| match e.as_str() {
            "update" => format!("update:{}", d["sessionUpdate"].as_str().unwrap_or("?")),
            "notice" => format!("notice:{}", d["kind"].as_str().unwrap_or("?")),
            "turn" => format!("turn:{}", d["state"].as_str().unwrap_or("?")),
            other => other.to_string(),
        })
        .collect()
}

#[tokio::test]
async fn a_prompt_streams_in_order_and_sse_agrees_with_the_transcript_and_resumes() {
    let s = server().await;
    let id = s.running_agent("chatty").await;
    let chat = Chat::open(&s, &id, json!({"title": "first"})).await;
    let session = chat.session().await;
    assert_eq!(session["state"], "idle");
    assert_eq!(session["harness"], "test");
    assert_eq!(session["title"], "first");
    assert_eq!(session["cwd"], "/home/agent");

    // Followed from the start, before the prompt.
    let sse = s.get(&chat.path("/events")).send().await.expect("events");
    assert_eq!(sse.status(), 200);
    let mut body = sse.bytes_stream();

    let events = chat.ask("stream 50").await;
    assert_eq!(Chat::stop_reason(&events), "end_turn");
    let text = Chat::text(&events);
    let want: String = (1..=50).map(|i| format!("chunk {i} of 50\n")).collect();
    assert_eq!(text, want, "chunks in order");

    // The SSE stream carries the same events, with the same ids, in the same order.
    let mut got = String::new();
    let end = tokio::time::Instant::now() + crate::common::DEADLINE;
    while !got.contains("\"state\":\"ended\"") {
        let chunk = tokio::time::timeout_at(end, body.next())
            .await
            .expect("SSE in time")
            .expect("SSE open")
            .expect("SSE bytes");
        got.push_str(&String::from_utf8_lossy(&chunk));
    }
    let sse_events = parse_sse(&got);
    let transcript = chat.events(0).await;
    assert_eq!(sse_events.len(), transcript.len());
    for ((id, name, data), (seq, event, tdata)) in sse_events.iter().zip(&transcript) {
        assert_eq!((id, name, data), (seq, event, tdata));
    }

    // A client that comes back with Last-Event-ID gets exactly what it missed.
    let middle = transcript[20].0;
    let again = s
        .get(&chat.path("/events"))
        .header("Last-Event-ID", middle.to_string())
        .send()
        .await
        .expect("events");
    let mut body = again.bytes_stream();
    let mut got = String::new();
    while !got.contains("\"state\":\"ended\"") {
        let chunk = tokio::time::timeout_at(end, body.next())
            .await
            .expect("SSE in time")
            .expect("SSE open")
            .expect("SSE bytes");
        got.push_str(&String::from_utf8_lossy(&chunk));
    }
    let rest = parse_sse(&got);
    assert_eq!(rest.first().map(|e| e.0), Some(middle + 1));
    assert_eq!(rest.len(), transcript.len() - 21);

    let session = chat.session().await;
    assert_eq!(session["turns"], 1);
    assert_eq!(session["state"], "idle");
    assert!(session["acpSessionId"].as_str().is_some());
    assert!(session["processId"].as_str().is_some());
    assert_eq!(session["restore"], Value::Null);
}

fn parse_sse(text: &str) -> Vec<(u64, String, Value)> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let (mut id, mut event, mut data) = (None, None, None);
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                id = v.parse::<u64>().ok();
            } else if let Some(v) = line.strip_prefix("event: ") {
                event = Some(v.to_string());
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = serde_json::from_str::<Value>(v).ok();
            }
        }
        if let (Some(i), Some(e), Some(d)) = (id, event, data) {
            out.push((i, e, d));
        }
    }
    out
}

#[tokio::test]
async fn permissions_are_answered_by_option_id_once_and_fail_closed_at_the_timeout() {
    let s = TestServer::start_with(|c| {
        with_harnesses(c);
        c.sessions.approval_timeout = Duration::from_secs(2);
    })
    .await;
    let id = s.running_agent("asker").await;
    let chat = Chat::open(&s, &id, json!({})).await;

    // Allow: the tool call completes.
    let turn = chat.prompt("tool").await;
    let a = chat.pending_approval().await;
    assert_eq!(a["kind"], "permission");
    assert_eq!(a["state"], "pending");
    assert_eq!(
        a["toolCall"]["toolCallId"]
            .as_str()
            .map(|t| t.starts_with("call_")),
        Some(true)
    );
    let ids: Vec<&str> = a["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["optionId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["b7", "a2", "c9", "d4"]);
    let aid = a["id"].as_str().unwrap().to_string();
    // An option that was not offered, and an unknown approval.
    let (status, body) = s
        .call(
            "POST",
            &format!("/api/v1/approvals/{aid}"),
            Some(json!({"optionId": "zz"})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("b7, a2, c9, d4"));
    let (status, _) = s
        .call(
            "POST",
            "/api/v1/approvals/nosuchapproval",
            Some(json!({"optionId": "a2"})),
        )
        .await;
    assert_eq!(status, 404);
    // Two answers at once: one wins.
    let path = format!("/api/v1/approvals/{aid}");
    let (one, two) = tokio::join!(
        s.call("POST", &path, Some(json!({"optionId": "a2"}))),
        s.call("POST", &path, Some(json!({"optionId": "b7"}))),
    );
    let mut statuses = [one.0, two.0];
    statuses.sort();
    assert_eq!(statuses, [200, 409]);
    let winner = if one.0 == 200 { one.1 } else { two.1 };
    let events = chat.turn(turn).await;
    let resolved = events
        .iter()
        .find(|(_, e, _)| e == "permission_resolved")
        .expect("resolved event");
    assert_eq!(resolved.2["outcome"], "selected");
    assert_eq!(resolved.2["by"], "admin");
    assert_eq!(resolved.2["optionId"], winner["optionId"]);
    let status = events
        .iter()
        .rev()
        .find(|(_, e, d)| e == "update" && d["sessionUpdate"] == "tool_call_update")
        .map(|(_, _, d)| d["status"].clone());
    let want = if winner["optionId"] == "a2" {
        "completed"
    } else {
        "failed"
    };
    assert_eq!(status, Some(json!(want)));

    // Reject: it fails.
    let turn = chat.prompt("tool").await;
    let a = chat.pending_approval().await;
    let (status, _) = s
        .call(
            "POST",
            &format!("/api/v1/approvals/{}", a["id"].as_str().unwrap()),
            Some(json!({"optionId": "c9"})),
        )
        .await;
    assert_eq!(status, 200);
    let events = chat.turn(turn).await;
    assert!(kinds(&events).contains(&"permission_resolved".to_string()));
    let last_tool = events
        .iter()
        .rev()
        .find(|(_, e, d)| e == "update" && d["sessionUpdate"] == "tool_call_update")
        .expect("tool update");
    assert_eq!(last_tool.2["status"], "failed");

    // Unanswered: at the timeout the offered reject_once is chosen.
    let turn = chat.prompt("tool").await;
    let a = chat.pending_approval().await;
    let events = chat.turn(turn).await;
    let resolved = events
        .iter()
        .find(|(_, e, _)| e == "permission_resolved")
        .expect("resolved");
    assert_eq!(resolved.2["outcome"], "expired");
    assert_eq!(resolved.2["optionId"], "c9");
    assert_eq!(resolved.2["by"], "timeout");
    let listed = s
        .get_json(&format!("/api/v1/approvals?state=resolved&agent={id}"))
        .await;
    let this = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == a["id"])
        .expect("listed as resolved");
    assert_eq!(this["state"], "resolved");
    assert_eq!(this["decidedBy"], "timeout");
    // An answer after it expired is a conflict.
    let (status, _) = s
        .call(
            "POST",
            &format!("/api/v1/approvals/{}", a["id"].as_str().unwrap()),
            Some(json!({"optionId": "a2"})),
        )
        .await;
    assert_eq!(status, 409);
}

#[tokio::test]
async fn cancel_ends_the_turn_cancelled_and_resolves_pending_approvals() {
    let s = server().await;
    let id = s.running_agent("canceller").await;
    let chat = Chat::open(&s, &id, json!({})).await;

    let turn = chat.prompt("wait").await;
    wait_for("the harness waits", || async {
        Chat::text(&chat.events(0).await).contains("waiting for session/cancel")
    })
    .await;
    assert_eq!(chat.session().await["state"], "running");
    let (status, _) = s
        .call("POST", &chat.path("/prompt"), Some(json!({"text": "x"})))
        .await;
    assert_eq!(status, 409, "a second prompt while a turn runs");
    let (status, _) = s.call("POST", &chat.path("/cancel"), None).await;
    assert_eq!(status, 202);
    assert_eq!(Chat::stop_reason(&chat.turn(turn).await), "cancelled");

    let turn = chat.prompt("tool").await;
    let a = chat.pending_approval().await;
    let (status, _) = s.call("POST", &chat.path("/cancel"), None).await;
    assert_eq!(status, 202);
    let events = chat.turn(turn).await;
    assert_eq!(Chat::stop_reason(&events), "cancelled");
    let resolved = events
        .iter()
        .find(|(_, e, _)| e == "permission_resolved")
        .expect("resolved");
    assert_eq!(resolved.2["outcome"], "cancelled");
    assert_eq!(resolved.2["id"], a["id"]);
    let (status, _) = s.call("POST", &chat.path("/cancel"), None).await;
    assert_eq!(status, 409, "no turn runs");
    assert_eq!(Chat::stop_reason(&chat.ask("hello").await), "end_turn");
}

#[tokio::test]
async fn a_harness_that_crashes_ends_the_turn_in_error_and_the_next_prompt_starts_it_again() {
    let s = server().await;
    let id = s.running_agent("crashy").await;
    let chat = Chat::open(&s, &id, json!({})).await;
    assert_eq!(Chat::stop_reason(&chat.ask("one").await), "end_turn");
    let first = chat.session().await["processId"].clone();

    let events = chat.ask("crash 7").await;
    assert_eq!(Chat::stop_reason(&events), "error");
    let notice = events
        .iter()
        .find(|(_, e, _)| e == "notice")
        .expect("a notice");
    assert_eq!(notice.2["kind"], "harness_exited");
    assert!(
        notice.2["text"].as_str().unwrap().contains("code 7"),
        "{}",
        notice.2
    );

    let events = chat.ask("two").await;
    assert_eq!(Chat::stop_reason(&events), "end_turn");
    assert_eq!(Chat::text(&events), "two");
    let session = chat.session().await;
    assert_ne!(session["processId"], first, "a new harness process");
    // The harness restarted with the conversation reloaded, its replay not added again.
    assert_eq!(session["restore"], "load");
    assert!(!kinds(&events)
        .iter()
        .any(|k| k == "update:user_message_chunk"));
}

#[tokio::test]
async fn after_sleep_a_prompt_wakes_the_agent_and_the_conversation_is_restored_by_each_path() {
    let s = server().await;
    for (harness, restore) in [("resume", "resume"), ("test", "load"), ("none", "new")] {
        let id = s.running_agent(format!("sleeper-{harness}").as_str()).await;
        let chat = Chat::open(&s, &id, json!({"harness": harness})).await;
        assert_eq!(Chat::text(&chat.ask("remember me").await), "remember me");
        let before = chat.events(0).await.len();
        s.stop_sleeping(&id).await;

        let events = chat.ask("again").await;
        let k = kinds(&events);
        assert_eq!(
            &k[..3],
            ["prompt", "turn:started", "notice:waking"],
            "{harness}: {k:?}"
        );
        assert_eq!(Chat::stop_reason(&events), "end_turn");
        assert_eq!(Chat::text(&events), "again");
        let session = chat.session().await;
        assert_eq!(session["restore"], restore, "{harness}");
        let reset = k.iter().any(|x| x == "notice:context_reset");
        assert_eq!(reset, restore == "new", "{harness}: {k:?}");
        // Nothing of the first turn was appended again.
        assert_eq!(chat.events(0).await.len(), before + events.len());
        assert_eq!(s.state(&id).await, "running");
    }
}

/// Paused between turns with its harness still running in it, the agent is thawed by the next
/// prompt before anything is written to the harness (the fake's pause is pretence: the state
/// tells; `docker::sessions` has a frozen one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_thaws_an_agent_paused_with_its_harness_running() {
    let s = server().await;
    let id = s.running_agent("paused-chat").await;
    let chat = Chat::open(&s, &id, json!({})).await;
    assert_eq!(Chat::text(&chat.ask("first").await), "first");
    s.pause(&id).await;
    let events = chat.ask("second").await;
    assert_eq!(Chat::stop_reason(&events), "end_turn");
    assert_eq!(Chat::text(&events), "second");
    assert!(
        !kinds(&events).iter().any(|k| k == "notice:waking"),
        "a thaw is no start: {:?}",
        kinds(&events)
    );
    assert_eq!(s.state(&id).await, "running");
}

#[tokio::test]
async fn a_running_turn_keeps_its_agent_awake_and_an_idle_session_does_not() {
    let s = TestServer::start_with(|c| {
        with_harnesses(c);
        c.sandbox.idle_minute = Duration::from_millis(500);
        c.sandbox.idle_check_interval = Duration::from_millis(100);
        c.sandbox.default_deep_sleep_minutes = 0;
    })
    .await;
    let id = s
        .running_agent(json!({"name": "busy", "idleMinutes": 1}))
        .await;
    let chat = Chat::open(&s, &id, json!({})).await;
    let turn = chat.prompt("wait").await;
    wait_for("the harness waits", || async {
        Chat::text(&chat.events(0).await).contains("waiting for session/cancel")
    })
    .await;
    // Well past its idle time (0.5 s) and many checks, the quiet turn keeps it running.
    let until = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < until {
        assert_eq!(s.state(&id).await, "running", "slept mid-turn");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s.call("POST", &chat.path("/cancel"), None).await;
    chat.turn(turn).await;
    // The idle session lets it sleep.
    s.wait_state(&id, "sleeping").await;
}

#[tokio::test]
async fn hostile_harness_output_is_bounded_and_other_sessions_go_on() {
    let s = TestServer::start_with(|c| {
        with_harnesses(c);
        c.sessions.update_max_kb = 16;
    })
    .await;
    let id = s.running_agent("hostile").await;
    let chat = Chat::open(&s, &id, json!({})).await;

    // A line of 100 MB: dropped with a notice (and, where it outran sandboxd's buffer, a gap
    // notice); the turn still ends.
    let events = chat.ask("big 100000000").await;
    assert_eq!(Chat::stop_reason(&events), "end_turn");
    let notices: Vec<&Value> = events
        .iter()
        .filter(|(_, e, _)| e == "notice")
        .map(|(_, _, d)| d)
        .collect();
    assert!(
        notices
            .iter()
            .any(|n| n["kind"] == "error" && n["text"].as_str().unwrap().contains("16 KiB")),
        "{notices:?}"
    );
    assert!(notices
        .iter()
        .all(|n| n["kind"] == "error" || n["kind"] == "gap"));
    assert!(!kinds(&events).contains(&"update:agent_message_chunk".to_string()));

    // Not JSON, and a request for a method nobody offers: ignored and -32601; the turn goes on.
    let events = chat.ask("garbage").await;
    assert_eq!(Chat::stop_reason(&events), "end_turn");

    // A flood: every update arrives, in order.
    let events = chat.ask("flood 20000").await;
    assert_eq!(Chat::stop_reason(&events), "end_turn");
    let n: Vec<u64> = events
        .iter()
        .filter(|(_, e, _)| e == "update")
        .filter_map(|(_, _, d)| d["content"]["text"].as_str()?.trim().parse().ok())
        .collect();
    assert_eq!(n.len(), 20000);
    assert!(n.windows(2).all(|w| w[1] == w[0] + 1));

    // A harness that never answers initialize: the turn ends `error` with a notice, and
    // another session of the same agent is not affected.
    let mute = Chat::open(&s, &id, json!({"harness": "mute"})).await;
    let turn = mute.prompt("hello").await;
    assert_eq!(Chat::text(&chat.ask("still here").await), "still here");
    let events = mute.turn(turn).await;
    assert_eq!(Chat::stop_reason(&events), "error");
    let notice = events
        .iter()
        .find(|(_, e, _)| e == "notice")
        .expect("notice");
    assert!(
        notice.2["text"].as_str().unwrap().contains("initialize"),
        "{}",
        notice.2
    );
}

#[tokio::test]
async fn a_permission_request_with_ten_thousand_options_is_refused_with_a_notice() {
    let dir = tempfile::tempdir().expect("dir");
    // A harness that asks permission with 10,000 options at its first prompt.
    let script = dir.path().join("many-options.py");
    std::fs::write(
        &script,
        r#"
import json, sys
def send(m): sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    if m.get("method") == "initialize":
        send({"jsonrpc": "2.0", "id": m["id"], "result": {"protocolVersion": 1, "agentCapabilities": {}}})
    elif m.get("method") == "session/new":
        send({"jsonrpc": "2.0", "id": m["id"], "result": {"sessionId": "s1"}})
    elif m.get("method") == "session/prompt":
        opts = [{"optionId": "o%d" % i, "name": "x", "kind": "allow_once"} for i in range(10000)]
        send({"jsonrpc": "2.0", "id": "perm", "method": "session/request_permission", "params": {"sessionId": "s1", "toolCall": {"toolCallId": "t"}, "options": opts}})
        answer = json.loads(sys.stdin.readline())
        text = "refused %s" % answer.get("error", {}).get("code")
        send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}})
        send({"jsonrpc": "2.0", "id": m["id"], "result": {"stopReason": "end_turn"}})
"#,
    )
    .expect("script");
    let script = script.to_str().expect("utf-8").to_string();
    let s = TestServer::start_with(|c| {
        with_harnesses(c);
        c.harnesses
            .insert("many".into(), harness("python3", &[script.as_str()]));
    })
    .await;
    let id = s.running_agent("options").await;
    let chat = Chat::open(&s, &id, json!({"harness": "many"})).await;
    let events = chat.ask("go").await;
    assert_eq!(Chat::text(&events), "refused -32602");
    let notice = events
        .iter()
        .find(|(_, e, _)| e == "notice")
        .expect("notice");
    assert!(
        notice.2["text"].as_str().unwrap().contains("10000 options"),
        "{}",
        notice.2
    );
    let pending = s.get_json("/api/v1/approvals?state=pending").await;
    assert_eq!(pending.as_array().map(Vec::len), Some(0));
}

#[tokio::test]
async fn bad_session_requests_get_clear_errors() {
    let s = TestServer::start_with(|c| {
        with_harnesses(c);
        c.sessions.max_per_agent = 2;
    })
    .await;
    let id = s.running_agent("strict").await;
    let base = format!("/api/v1/agents/{id}/sessions");
    let r = s.send("POST", &base, &json!({"harness": "nope"})).await;
    let msg = expect_error(r, 400, "invalid").await;
    assert!(
        msg.contains("the configured ones are: mute, none, resume, test"),
        "{msg}"
    );
    let r = s.send("POST", &base, &json!({"cwd": "relative"})).await;
    expect_error(r, 400, "invalid").await;
    let r = s
        .send("POST", &base, &json!({"title": "x".repeat(201)}))
        .await;
    expect_error(r, 400, "invalid").await;
    let r = s
        .send("POST", "/api/v1/agents/nosuchagent/sessions", &json!({}))
        .await;
    expect_error(r, 404, "not_found").await;

    let chat = Chat::open(&s, &id, json!({})).await;
    Chat::open(&s, &id, json!({})).await;
    let r = s.send("POST", &base, &json!({})).await;
    let msg = expect_error(r, 409, "conflict").await;
    assert!(msg.contains("sessions.max_per_agent"), "{msg}");

    let r = s
        .get(&format!("{base}/nosuchsession"))
        .send()
        .await
        .unwrap();
    expect_error(r, 404, "not_found").await;
    let r = s
        .send(
            "POST",
            &format!("{base}/nosuchsession/prompt"),
            &json!({"text": "x"}),
        )
        .await;
    expect_error(r, 404, "not_found").await;
    let big = "x".repeat(10 * 1024 * 1024);
    let r = s
        .send("POST", &chat.path("/prompt"), &json!({ "text": big }))
        .await;
    expect_error(r, 413, "too_large").await;
    let r = s.send("POST", &chat.path("/prompt"), &json!({})).await;
    expect_error(r, 400, "invalid").await;
    let r = s
        .send(
            "POST",
            &chat.path("/prompt"),
            &json!({"prompt": [{"type": "nonsense"}]}),
        )
        .await;
    let msg = expect_error(r, 400, "invalid").await;
    assert!(msg.contains("prompt[0]"), "{msg}");
    let r = s
        .get(&chat.path("/events?format=xml"))
        .send()
        .await
        .unwrap();
    expect_error(r, 400, "invalid").await;

    // Renamed, then deleted: gone, with its transcript.
    let (status, renamed) = s
        .call("PATCH", &chat.path(""), Some(json!({"title": "renamed"})))
        .await;
    assert_eq!((status, renamed["title"].clone()), (200, json!("renamed")));
    chat.ask("hello").await;
    let (status, _) = s.call("DELETE", &chat.path(""), None).await;
    assert_eq!(status, 204);
    let r = s
        .get(&chat.path("/events?format=json"))
        .send()
        .await
        .unwrap();
    expect_error(r, 404, "not_found").await;
    assert_eq!(s.get_json(&base).await.as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn session_and_approval_changes_are_announced_on_the_event_stream() {
    let s = server().await;
    let id = s.running_agent("announced").await;
    let mut events = crate::common::sse::Events::open(&s).await;
    let chat = Chat::open(&s, &id, json!({})).await;
    let turn = chat.prompt("tool").await;
    let a = chat.pending_approval().await;
    let deadline = tokio::time::Instant::now() + crate::common::DEADLINE;
    let (mut saw_session, mut saw_approval) = (false, false);
    while !(saw_session && saw_approval) {
        let (kind, data) = events.next(deadline).await;
        saw_session |= kind == "session" && data["id"] == chat.sid.as_str();
        saw_approval |= kind == "approval" && data["id"] == a["id"] && data["state"] == "pending";
    }
    s.call(
        "POST",
        &format!("/api/v1/approvals/{}", a["id"].as_str().unwrap()),
        Some(json!({"optionId": "a2"})),
    )
    .await;
    loop {
        let (kind, data) = events.next(deadline).await;
        if kind == "approval" && data["id"] == a["id"] {
            assert_eq!(data["state"], "resolved");
            break;
        }
    }
    chat.turn(turn).await;
    s.call("DELETE", &chat.path(""), None).await;
    loop {
        let (kind, data) = events.next(deadline).await;
        if kind == "session_deleted" {
            assert_eq!(data["id"], chat.sid.as_str());
            break;
        }
    }
}

#[tokio::test]
async fn a_turn_whose_harness_died_with_the_server_ends_in_error_after_a_restart() {
    // The fake driver's sandboxes live in the server's process: a SIGKILL takes the harness
    // with it, and the restarted server must end the turn rather than leave it running.
    let dir = tempfile::tempdir().expect("dir");
    let agent = test_agent();
    let yaml = format!(
        "  driver: fake\n  default_harness: test\nharnesses:\n  test:\n    command: [{}]\n",
        agent.display()
    );
    let server = crate::common::process::ServerConfig::write(
        dir.path(),
        "127.0.0.1",
        &yaml,
        crate::common::DEADLINE,
    );
    let running = server.start().await;
    let id = server.create_agent("phoenix").await;
    server.wait_state(&id, "running").await;
    let chat = Chat::open(&server, &id, json!({})).await;
    let turn = chat.prompt("wait").await;
    wait_for("the harness waits", || async {
        Chat::text(&chat.events(0).await).contains("waiting for session/cancel")
    })
    .await;
    running.kill();
    let _running = server.start().await;
    let events = chat.turn(turn).await;
    assert_eq!(Chat::stop_reason(&events), "error");
    let notice = events
        .iter()
        .rev()
        .find(|(_, e, _)| e == "notice")
        .expect("a notice");
    assert_eq!(notice.2["kind"], "harness_exited", "{}", notice.2);
    assert_eq!(chat.session().await["state"], "idle");
    // The next prompt starts a harness again and reopens the conversation.
    let events = chat.ask("back").await;
    assert_eq!(Chat::text(&events), "back");
}

#[tokio::test]
async fn a_transcript_over_its_limit_drops_its_oldest_events_with_a_gap_notice() {
    let s = TestServer::start_with(|c| {
        with_harnesses(c);
        c.sessions.transcript_max_mb = 1;
        // Room for the whole flood in sandboxd's buffer: this test is about the transcript.
        c.sandbox.process_output_kb = 64 * 1024;
    })
    .await;
    let id = s.running_agent("talkative").await;
    let chat = Chat::open(&s, &id, json!({})).await;
    // About 4 MB of updates: several trims, the turn's own start among what goes.
    chat.prompt("flood 40000").await;
    wait_for("the turn ends", || async {
        chat.session().await["state"] == "idle"
    })
    .await;
    // Read once nothing is written any more (pages read while trims go on would mix).
    let all = chat.events(0).await;
    let (_, _, last) = all.last().expect("events");
    assert_eq!(last["stopReason"], "end_turn");
    let first = all.first().expect("events").0;
    assert!(
        first > 1,
        "the oldest events were dropped: {} events, the first {:?}",
        all.len(),
        all.iter().take(3).collect::<Vec<_>>()
    );
    let gap = all
        .iter()
        .find(|(_, e, d)| e == "notice" && d["kind"] == "gap")
        .expect("a gap notice");
    assert!(gap.2["text"]
        .as_str()
        .unwrap()
        .contains("transcript_max_mb"));
    let bytes: usize = all.iter().map(|(_, _, d)| d.to_string().len() + 32).sum();
    assert!(bytes <= 1024 * 1024, "{bytes} bytes kept");
    // What is kept has no holes after the first kept event.
    assert!(all.windows(2).all(|w| w[1].0 == w[0].0 + 1));
}

#[tokio::test]
async fn a_cancel_while_the_harness_starts_ends_the_turn_at_once() {
    let s = TestServer::start_with(|c| {
        with_harnesses(c);
        // Far past the test's deadline: the cancel, not the timeout, must end the turn.
        c.sessions.start_timeout = Duration::from_secs(600);
    })
    .await;
    let id = s.running_agent("impatient").await;
    let chat = Chat::open(&s, &id, json!({"harness": "mute"})).await;
    let turn = chat.prompt("hello").await;
    wait_for("the harness started", || async {
        chat.session().await["processId"].is_string()
    })
    .await;
    let (status, _) = s.call("POST", &chat.path("/cancel"), None).await;
    assert_eq!(status, 202);
    assert_eq!(Chat::stop_reason(&chat.turn(turn).await), "cancelled");
}
