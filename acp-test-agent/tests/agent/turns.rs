//! What each command of the prompt language makes of a turn.

use agent_client_protocol_schema::v1::{
    ContentBlock, Error, ErrorCode, PlanEntryStatus, SessionId, SessionUpdate, StopReason,
};
use serde_json::json;

use crate::harness::{said, AgentProcess, Message};

fn agent_with_session() -> (tempfile::TempDir, AgentProcess, SessionId) {
    let state = tempfile::tempdir().expect("tempdir");
    let mut agent = AgentProcess::initialized(state.path(), &[]);
    let session = agent.new_session(state.path());
    (state, agent, session)
}

#[test]
fn plain_text_is_echoed_in_one_chunk() {
    let (_state, mut agent, session) = agent_with_session();
    let turn = agent.turn(&session, "hello there");
    assert_eq!(turn.said(), ["hello there"]);
    assert_eq!(turn.updates.len(), 1);
    assert_eq!(turn.stop_reason(), StopReason::EndTurn);

    // `echo` for text that starts with a command word.
    let turn = agent.turn(&session, "echo stream 3");
    assert_eq!(turn.said(), ["stream 3"]);
    agent.stop();
}

#[test]
fn stream_sends_its_chunks_in_order() {
    let (_state, mut agent, session) = agent_with_session();
    let turn = agent.turn(&session, "stream 5");
    let expected: Vec<String> = (1..=5).map(|i| format!("chunk {i} of 5\n")).collect();
    assert_eq!(turn.said(), expected);
    assert_eq!(turn.updates.len(), 5);
    assert_eq!(turn.stop_reason(), StopReason::EndTurn);
    agent.stop();
}

#[test]
fn think_and_plan_send_their_updates() {
    let (_state, mut agent, session) = agent_with_session();
    let turn = agent.turn(&session, "think about the tests");
    match turn.updates.as_slice() {
        [SessionUpdate::AgentThoughtChunk(chunk)] => {
            assert!(
                matches!(&chunk.content, ContentBlock::Text(text) if text.text == "about the tests")
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(turn.stop_reason(), StopReason::EndTurn);

    let turn = agent.turn(&session, "plan");
    match turn.updates.as_slice() {
        [SessionUpdate::Plan(plan)] => {
            assert_eq!(plan.entries.len(), 3);
            assert_eq!(plan.entries[0].status, PlanEntryStatus::Completed);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(turn.stop_reason(), StopReason::EndTurn);
    agent.stop();
}

#[test]
fn stop_and_fail_end_the_turn_as_asked() {
    let (_state, mut agent, session) = agent_with_session();
    for (reason, expected) in [
        ("refusal", StopReason::Refusal),
        ("max_tokens", StopReason::MaxTokens),
        ("max_turn_requests", StopReason::MaxTurnRequests),
    ] {
        let turn = agent.turn(&session, &format!("stop {reason}"));
        assert!(turn.updates.is_empty());
        assert_eq!(turn.stop_reason(), expected);
    }

    let turn = agent.turn(&session, "fail the disk is on fire");
    let error = turn.answer.expect_err("fail fails");
    assert_eq!(error.code, ErrorCode::InternalError);
    assert_eq!(error.message, "the disk is on fire");

    // A command word with bad arguments: the prompt is refused, saying what it expects.
    let turn = agent.turn(&session, "stream lots");
    let error = turn.answer.expect_err("refused");
    assert_eq!(error.code, ErrorCode::InvalidParams);
    assert!(error.data.expect("data").to_string().contains("stream 5"));
    agent.stop();
}

#[test]
fn wait_ends_cancelled_on_session_cancel() {
    let (_state, mut agent, session) = agent_with_session();
    let id = agent.prompt(&session, "wait");
    let first = agent.next_update(&session);
    assert_eq!(said(&first), Some("waiting for session/cancel"));
    agent.cancel(&session);
    let turn = agent.finish_turn(&id);
    assert!(turn.updates.is_empty());
    assert_eq!(turn.stop_reason(), StopReason::Cancelled);
    // The session takes the next prompt.
    assert_eq!(agent.turn(&session, "after").said(), ["after"]);
    agent.stop();
}

#[test]
fn a_busy_session_refuses_a_second_prompt_while_others_go_on() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut agent = AgentProcess::initialized(state.path(), &[]);
    let busy = agent.new_session(state.path());
    let other = agent.new_session(state.path());
    let waiting = agent.prompt(&busy, "wait");
    agent.next_update(&busy);

    let second = agent.prompt(&busy, "hello");
    let refused = agent.response(&second).expect_err("busy");
    assert_eq!(refused.code, ErrorCode::InvalidRequest);
    // Another session's turn runs meanwhile.
    assert_eq!(agent.turn(&other, "meanwhile").said(), ["meanwhile"]);

    agent.cancel(&busy);
    assert_eq!(
        agent.finish_turn(&waiting).stop_reason(),
        StopReason::Cancelled
    );
    agent.stop();
}

#[test]
fn flood_sends_every_update_in_order() {
    let (_state, mut agent, session) = agent_with_session();
    let turn = agent.turn(&session, "flood 5000");
    assert_eq!(turn.updates.len(), 5000);
    for (index, text) in turn.said().iter().enumerate() {
        assert_eq!(text, &format!("{}\n", index + 1));
    }
    assert_eq!(turn.stop_reason(), StopReason::EndTurn);
    agent.stop();
}

#[test]
fn a_cancel_stops_a_flood_midway() {
    let (_state, mut agent, session) = agent_with_session();
    let count: u64 = 1_000_000_000;
    let id = agent.prompt(&session, &format!("flood {count}"));
    agent.next_update(&session);
    agent.cancel(&session);
    // Counted, not kept: the rest of the flood until the cancel is seen.
    let mut received: u64 = 1;
    let stop_reason = loop {
        match agent.next_message() {
            Message::Update(_) => received += 1,
            Message::Response {
                id: answered,
                result,
            } if answered == id => {
                break result.expect("answered")["stopReason"].clone();
            }
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(stop_reason, json!("cancelled"));
    assert!(received < count);
    agent.stop();
}

#[test]
fn big_sends_one_update_of_that_many_bytes() {
    let (_state, mut agent, session) = agent_with_session();
    let size = 3 * 1024 * 1024 + 7;
    let turn = agent.turn(&session, &format!("big {size}"));
    let said = turn.said();
    assert_eq!(said.len(), 1);
    assert_eq!(said[0].len(), size);
    assert!(said[0].starts_with("abcdefghijklmnopqrstuvwxyzabc"));
    assert_eq!(turn.stop_reason(), StopReason::EndTurn);
    agent.stop();
}

#[test]
fn crash_exits_mid_turn_with_its_code() {
    for (prompt, code) in [("crash", 3), ("crash 7", 7)] {
        let (_state, mut agent, session) = agent_with_session();
        agent.prompt(&session, prompt);
        let chunk = agent.next_update(&session);
        assert_eq!(
            said(&chunk),
            Some(format!("crashing with exit code {code}").as_str())
        );
        // No answer to the prompt: stdout ends, and the exit code says why.
        assert_eq!(agent.exit_status().code(), Some(code));
    }
}

#[test]
fn garbage_sends_a_bad_line_and_an_unknown_request_then_ends() {
    let (_state, mut agent, session) = agent_with_session();
    let id = agent.prompt(&session, "garbage");
    assert_eq!(
        agent.next_line().as_deref(),
        Some("this line is not JSON {\n")
    );
    match agent.next_message() {
        Message::Request {
            id: request,
            method,
            ..
        } => {
            assert_eq!(method, "acp-test-agent/no-such-method");
            agent.answer::<()>(request, Err(Error::method_not_found()));
        }
        other => panic!("{other:?}"),
    }
    let turn = agent.finish_turn(&id);
    assert_eq!(turn.updates.len(), 1);
    assert_eq!(turn.stop_reason(), StopReason::EndTurn);
    // The answer to the unknown request changed nothing.
    assert_eq!(agent.turn(&session, "still here").said(), ["still here"]);
    agent.stop();
}
