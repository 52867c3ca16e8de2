//! `tool`: a tool call behind `session/request_permission`, and each way the client can answer.

use agent_client_protocol_schema::v1::{
    AgentRequest, ContentBlock, Error, PermissionOptionKind, RequestId, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome, SessionId,
    SessionUpdate, StopReason, ToolCallContent, ToolCallStatus, ToolCallUpdate, ToolKind,
};

use crate::harness::{AgentProcess, TurnResult};

/// Prompts `tool` and reads up to the permission question: the prompt's id, the question's id,
/// and the question.
fn ask(
    agent: &mut AgentProcess,
    session: &SessionId,
) -> (RequestId, RequestId, RequestPermissionRequest) {
    let prompt = agent.prompt(session, "tool");
    let call = match agent.next_update(session) {
        SessionUpdate::ToolCall(call) => call,
        other => panic!("expected a tool call, got {other:?}"),
    };
    assert_eq!(call.status, ToolCallStatus::Pending);
    assert_eq!(call.kind, ToolKind::Execute);
    let (id, request) = agent.next_message().into_agent_request();
    let AgentRequest::RequestPermissionRequest(question) = request else {
        panic!("expected session/request_permission, got {request:?}");
    };
    assert_eq!(question.session_id, *session);
    assert_eq!(question.tool_call.tool_call_id, call.tool_call_id);
    (prompt, id, question)
}

fn option_of(
    question: &RequestPermissionRequest,
    kind: PermissionOptionKind,
) -> SelectedPermissionOutcome {
    let option = question
        .options
        .iter()
        .find(|option| option.kind == kind)
        .unwrap_or_else(|| panic!("no {kind:?} option"));
    SelectedPermissionOutcome::new(option.option_id.clone())
}

/// The turn's one `tool_call_update`: its status and its text.
fn settled(turn: &TurnResult) -> (ToolCallStatus, String) {
    match turn.updates.as_slice() {
        [SessionUpdate::ToolCallUpdate(ToolCallUpdate { fields, .. })] => {
            let text = match fields.content.as_deref() {
                Some([ToolCallContent::Content(content)]) => match &content.content {
                    ContentBlock::Text(text) => text.text.clone(),
                    other => panic!("{other:?}"),
                },
                other => panic!("{other:?}"),
            };
            (fields.status.expect("a status"), text)
        }
        other => panic!("expected one tool_call_update, got {other:?}"),
    }
}

#[test]
fn the_options_cover_every_kind_and_their_order_means_nothing() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut agent = AgentProcess::initialized(state.path(), &[]);
    let session = agent.new_session(state.path());
    let (prompt, id, question) = ask(&mut agent, &session);
    let kinds: Vec<PermissionOptionKind> =
        question.options.iter().map(|option| option.kind).collect();
    for kind in [
        PermissionOptionKind::AllowOnce,
        PermissionOptionKind::AllowAlways,
        PermissionOptionKind::RejectOnce,
        PermissionOptionKind::RejectAlways,
    ] {
        assert_eq!(kinds.iter().filter(|&&k| k == kind).count(), 1, "{kind:?}");
    }
    // A client that takes the first option as "allow" would be wrong.
    assert_ne!(kinds[0], PermissionOptionKind::AllowOnce);
    assert_ne!(kinds[0], PermissionOptionKind::AllowAlways);
    let mut ids: Vec<&str> = question
        .options
        .iter()
        .map(|option| &*option.option_id.0)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 4);

    agent.answer(
        id,
        Ok(RequestPermissionResponse::new(
            RequestPermissionOutcome::Cancelled,
        )),
    );
    agent.finish_turn(&prompt);
    agent.stop();
}

#[test]
fn allowing_completes_the_tool_and_rejecting_fails_it() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut agent = AgentProcess::initialized(state.path(), &[]);
    let session = agent.new_session(state.path());
    for (kind, status, word) in [
        (
            PermissionOptionKind::AllowOnce,
            ToolCallStatus::Completed,
            "allow_once",
        ),
        (
            PermissionOptionKind::AllowAlways,
            ToolCallStatus::Completed,
            "allow_always",
        ),
        (
            PermissionOptionKind::RejectOnce,
            ToolCallStatus::Failed,
            "reject_once",
        ),
        (
            PermissionOptionKind::RejectAlways,
            ToolCallStatus::Failed,
            "reject_always",
        ),
    ] {
        let (prompt, id, question) = ask(&mut agent, &session);
        let chosen = RequestPermissionOutcome::Selected(option_of(&question, kind));
        agent.answer(id, Ok(RequestPermissionResponse::new(chosen)));
        let turn = agent.finish_turn(&prompt);
        let (settled_status, text) = settled(&turn);
        assert_eq!(settled_status, status, "{kind:?}");
        assert!(text.contains(word), "{kind:?}: {text}");
        assert_eq!(turn.stop_reason(), StopReason::EndTurn);
    }
    agent.stop();
}

#[test]
fn a_cancelled_outcome_ends_the_turn_cancelled() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut agent = AgentProcess::initialized(state.path(), &[]);
    let session = agent.new_session(state.path());
    let (prompt, id, _) = ask(&mut agent, &session);
    agent.answer(
        id,
        Ok(RequestPermissionResponse::new(
            RequestPermissionOutcome::Cancelled,
        )),
    );
    let turn = agent.finish_turn(&prompt);
    assert_eq!(settled(&turn).0, ToolCallStatus::Failed);
    assert_eq!(turn.stop_reason(), StopReason::Cancelled);
    agent.stop();
}

#[test]
fn session_cancel_while_the_question_is_open_ends_the_turn_cancelled() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut agent = AgentProcess::initialized(state.path(), &[]);
    let session = agent.new_session(state.path());
    let (prompt, id, _) = ask(&mut agent, &session);
    agent.cancel(&session);
    let turn = agent.finish_turn(&prompt);
    assert_eq!(settled(&turn).0, ToolCallStatus::Failed);
    assert_eq!(turn.stop_reason(), StopReason::Cancelled);
    // The protocol has the client answer the question `cancelled` after its cancel; that late
    // answer is harmless.
    agent.answer(
        id,
        Ok(RequestPermissionResponse::new(
            RequestPermissionOutcome::Cancelled,
        )),
    );
    assert_eq!(agent.turn(&session, "next").said(), ["next"]);
    agent.stop();
}

#[test]
fn an_option_never_offered_or_an_error_fails_the_tool() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut agent = AgentProcess::initialized(state.path(), &[]);
    let session = agent.new_session(state.path());

    let (prompt, id, _) = ask(&mut agent, &session);
    let made_up = RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new("allow_once"));
    agent.answer(id, Ok(RequestPermissionResponse::new(made_up)));
    let turn = agent.finish_turn(&prompt);
    let (status, text) = settled(&turn);
    assert_eq!(status, ToolCallStatus::Failed);
    assert!(text.contains("not offered"), "{text}");
    assert_eq!(turn.stop_reason(), StopReason::EndTurn);

    let (prompt, id, _) = ask(&mut agent, &session);
    agent.answer::<()>(id, Err(Error::internal_error()));
    let turn = agent.finish_turn(&prompt);
    let (status, text) = settled(&turn);
    assert_eq!(status, ToolCallStatus::Failed);
    assert!(text.contains("-32603"), "{text}");
    assert_eq!(turn.stop_reason(), StopReason::EndTurn);
    agent.stop();
}
