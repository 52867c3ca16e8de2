//! Concurrent lifecycle requests on one agent: every answer is 202 or 409, the winners explain
//! the final state, and nothing is left in a transient state.

use crate::common::{TestServer, DEADLINE};
use serde_json::Value;

const SETTLED: [&str; 3] = ["running", "sleeping", "error"];

async fn fire(s: &TestServer, id: &str, ops: &[&'static str]) -> Vec<(&'static str, u16)> {
    let reqs = ops.iter().map(|op| {
        let req = match *op {
            "destroy" => s.delete(&format!("/api/v1/agents/{id}")),
            op => s.post(&format!("/api/v1/agents/{id}/{op}")),
        };
        async move { (*op, req.send().await.unwrap().status().as_u16()) }
    });
    futures::future::join_all(reqs).await
}

/// Waits until the agent is settled (or gone), returning its state or None when deleted.
async fn settle(s: &TestServer, id: &str) -> Option<String> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let r = s.get(&format!("/api/v1/agents/{id}")).send().await.unwrap();
        if r.status() == 404 {
            return None;
        }
        let a: Value = r.json().await.unwrap();
        let state = a["state"].as_str().unwrap().to_string();
        if SETTLED.contains(&state.as_str()) {
            return Some(state);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "agent stuck in {state}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The settled state `op` leads to from `from`, or None when the state machine refuses it.
/// `Some(None)` means the agent is gone.
fn step(from: &str, op: &str) -> Option<Option<&'static str>> {
    match (from, op) {
        ("running", "stop") => Some(Some("sleeping")),
        ("sleeping" | "error", "start") => Some(Some("running")),
        ("running" | "sleeping" | "error", "rebuild") => Some(Some("running")),
        ("running" | "sleeping" | "error", "destroy") => Some(None),
        _ => None,
    }
}

/// True if some order of `winners`, each allowed where the previous left the agent, ends in
/// `end`: the single sequence of winners that explains the outcome.
fn explains(start: &Option<String>, winners: &[&str], end: &Option<String>) -> bool {
    if winners.is_empty() {
        return start == end;
    }
    let Some(from) = start else { return false };
    // Trying each distinct operation once per level keeps the search small.
    (0..winners.len())
        .filter(|&i| !winners[..i].contains(&winners[i]))
        .any(|i| match step(from, winners[i]) {
            None => false,
            Some(next) => {
                let rest: Vec<&str> = winners
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, w)| *w)
                    .collect();
                explains(&next.map(str::to_string), &rest, end)
            }
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_operations_leave_a_consistent_agent() {
    let s = TestServer::start().await;
    let id = s.running_agent("racer").await;
    let kinds = ["start", "stop", "rebuild", "destroy"];
    let mut start_state = Some("running".to_string());
    for round in 0..4 {
        // Destroy joins only the last round, so earlier rounds have an agent to race on.
        let pool: Vec<&'static str> = kinds
            .iter()
            .copied()
            .filter(|k| round == 3 || *k != "destroy")
            .collect();
        let ops: Vec<&'static str> = (0..50)
            .map(|i| pool[(i * 7 + round) % pool.len()])
            .collect();
        let answers = fire(&s, &id, &ops).await;
        let destroyed = answers
            .iter()
            .any(|(op, st)| *op == "destroy" && *st == 202);
        for (op, status) in &answers {
            // Once a destroy has finished, the truthful answer to a late request is 404.
            let gone = destroyed && *status == 404;
            assert!(
                *status == 202 || *status == 409 || gone,
                "{op} answered {status}"
            );
        }
        let winners: Vec<&str> = answers
            .iter()
            .filter(|(_, st)| *st == 202)
            .map(|(op, _)| *op)
            .collect();
        let before_state = settle(&s, &id).await;
        assert!(
            explains(&start_state, &winners, &before_state),
            "no order of the winners {winners:?} takes {start_state:?} to {before_state:?}"
        );
        start_state = before_state.clone();
        if before_state.is_none() {
            break;
        }
    }
}
