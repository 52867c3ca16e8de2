//! Sessions across processes (the sandbox slept in between): `session/load` replays the
//! history, `session/resume` does not, and neither answers unless `initialize` offered it.

use crate::harness::{AgentProcess, Message};
use agent_client_protocol_schema::v1::{
    ContentBlock, ErrorCode, LoadSessionRequest, PromptRequest, ResumeSessionRequest, SessionId,
    SessionUpdate, StopReason,
};

/// The history as (who, text) pairs: "user" for `user_message_chunk`, "agent" for
/// `agent_message_chunk`.
fn transcript(updates: &[SessionUpdate]) -> Vec<(&'static str, String)> {
    updates
        .iter()
        .map(|update| {
            let (who, chunk) = match update {
                SessionUpdate::UserMessageChunk(chunk) => ("user", chunk),
                SessionUpdate::AgentMessageChunk(chunk) => ("agent", chunk),
                other => panic!("{other:?}"),
            };
            match &chunk.content {
                ContentBlock::Text(text) => (who, text.text.clone()),
                other => panic!("{other:?}"),
            }
        })
        .collect()
}

fn pairs(expected: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    expected
        .iter()
        .map(|&(who, text)| (who, text.to_owned()))
        .collect()
}

/// Loads the session: the updates replayed before the answer.
fn load(
    agent: &mut AgentProcess,
    session: &SessionId,
    cwd: &std::path::Path,
) -> Vec<SessionUpdate> {
    let id = agent.request(
        "session/load",
        LoadSessionRequest::new(session.clone(), cwd),
    );
    let mut replayed = Vec::new();
    loop {
        match agent.next_message() {
            Message::Update(notification) => {
                assert_eq!(&notification.session_id, session);
                replayed.push(notification.update);
            }
            Message::Response {
                id: answered,
                result,
            } if answered == id => {
                result.expect("session/load");
                return replayed;
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn load_replays_the_history_after_a_restart() {
    let state = tempfile::tempdir().expect("tempdir");
    let cwd = state.path();
    let mut first = AgentProcess::initialized(state.path(), &["--restore", "load"]);
    let session = first.new_session(cwd);
    first.turn(&session, "hello");
    first.turn(&session, "stream 2");
    first.stop();

    let mut second = AgentProcess::initialized(state.path(), &["--restore", "load"]);
    // Not open in this process until loaded.
    assert_eq!(
        second.call_error(
            "session/prompt",
            PromptRequest::new(session.clone(), vec!["too early".into()])
        ),
        ErrorCode::ResourceNotFound
    );
    let replayed = load(&mut second, &session, cwd);
    let history = pairs(&[
        ("user", "hello"),
        ("agent", "hello"),
        ("user", "stream 2"),
        ("agent", "chunk 1 of 2\n"),
        ("agent", "chunk 2 of 2\n"),
    ]);
    assert_eq!(transcript(&replayed), history);
    // The loaded session goes on, and its history grows.
    assert_eq!(second.turn(&session, "again").said(), ["again"]);
    second.stop();

    let mut third = AgentProcess::initialized(state.path(), &["--restore", "load"]);
    let replayed = load(&mut third, &session, cwd);
    let mut longer = history.clone();
    longer.extend(pairs(&[("user", "again"), ("agent", "again")]));
    assert_eq!(transcript(&replayed), longer);
    third.stop();
}

#[test]
fn resume_reopens_without_replay() {
    let state = tempfile::tempdir().expect("tempdir");
    let cwd = state.path();
    let mut first = AgentProcess::initialized(state.path(), &["--restore", "resume"]);
    let session = first.new_session(cwd);
    first.turn(&session, "hello");
    first.stop();

    let mut second = AgentProcess::initialized(state.path(), &["--restore", "resume"]);
    // The answer is the very next message: nothing replayed before it.
    let answer = second
        .call(
            "session/resume",
            ResumeSessionRequest::new(session.clone(), cwd),
        )
        .expect("session/resume");
    assert!(answer.is_object(), "{answer}");
    assert_eq!(second.turn(&session, "after").said(), ["after"]);
    second.stop();

    // Both turns are in the history.
    let mut third = AgentProcess::initialized(state.path(), &["--restore", "both"]);
    let replayed = load(&mut third, &session, cwd);
    assert_eq!(
        transcript(&replayed),
        pairs(&[
            ("user", "hello"),
            ("agent", "hello"),
            ("user", "after"),
            ("agent", "after")
        ])
    );
    third.stop();
}

#[test]
fn restore_methods_not_advertised_are_not_found() {
    let state = tempfile::tempdir().expect("tempdir");
    let cwd = state.path();
    let mut maker = AgentProcess::initialized(state.path(), &[]);
    let session = maker.new_session(cwd);
    maker.stop();

    for (flag, load_works, resume_works) in [
        ("load", true, false),
        ("resume", false, true),
        ("none", false, false),
    ] {
        let mut agent = AgentProcess::initialized(state.path(), &["--restore", flag]);
        let load = agent.call(
            "session/load",
            LoadSessionRequest::new(session.clone(), cwd),
        );
        let resume = agent.call(
            "session/resume",
            ResumeSessionRequest::new(session.clone(), cwd),
        );
        for (answer, works) in [(load, load_works), (resume, resume_works)] {
            match answer {
                Ok(result) => assert!(works, "{flag}: {result}"),
                Err(error) => {
                    assert!(!works, "{flag}: {error:?}");
                    assert_eq!(error.code, ErrorCode::MethodNotFound, "{flag}");
                }
            }
        }
        agent.stop();
    }
}

#[test]
fn a_turn_cut_short_by_a_crash_is_not_in_the_history() {
    let state = tempfile::tempdir().expect("tempdir");
    let cwd = state.path();
    let mut first = AgentProcess::initialized(state.path(), &[]);
    let session = first.new_session(cwd);
    first.turn(&session, "kept");
    first.prompt(&session, "crash");
    first.next_update(&session);
    assert_eq!(first.exit_status().code(), Some(3));

    let mut second = AgentProcess::initialized(state.path(), &[]);
    let replayed = load(&mut second, &session, cwd);
    assert_eq!(
        transcript(&replayed),
        pairs(&[("user", "kept"), ("agent", "kept")])
    );
    // A cancelled turn, by contrast, is kept.
    let id = second.prompt(&session, "wait");
    second.next_update(&session);
    second.cancel(&session);
    assert_eq!(second.finish_turn(&id).stop_reason(), StopReason::Cancelled);
    second.stop();

    let mut third = AgentProcess::initialized(state.path(), &[]);
    let replayed = load(&mut third, &session, cwd);
    assert_eq!(replayed.len(), 4);
    third.stop();
}
