//! `initialize`, and the answers to messages the agent cannot use.

use agent_client_protocol_schema::v1::{
    ClientCapabilities, ErrorCode, InitializeRequest, LoadSessionRequest, NewSessionRequest,
    PromptRequest, RequestId, SessionId,
};
use agent_client_protocol_schema::ProtocolVersion;
use serde_json::json;

use crate::harness::{AgentProcess, Message};

#[test]
fn initialize_advertises_what_restore_asks_for() {
    let state = tempfile::tempdir().expect("tempdir");
    for (flag, load, resume) in [
        (Some("load"), true, false),
        (Some("resume"), false, true),
        (Some("both"), true, true),
        (Some("none"), false, false),
        // The default.
        (None, true, false),
    ] {
        let args: Vec<&str> = flag.map(|flag| vec!["--restore", flag]).unwrap_or_default();
        let mut agent = AgentProcess::start(state.path(), &args);
        let answer = agent.initialize(ClientCapabilities::new());
        assert_eq!(answer.protocol_version, ProtocolVersion::V1);
        let capabilities = answer.agent_capabilities;
        assert_eq!(capabilities.load_session, load, "{flag:?}");
        assert_eq!(
            capabilities.session_capabilities.resume.is_some(),
            resume,
            "{flag:?}"
        );
        let info = answer.agent_info.expect("agentInfo");
        assert_eq!(info.name, "acp-test-agent");
        agent.stop();
    }
}

#[test]
fn unknown_methods_answer_method_not_found() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut agent = AgentProcess::initialized(state.path(), &[]);
    assert_eq!(
        agent.call_error("session/frobnicate", json!({})),
        ErrorCode::MethodNotFound
    );
    // Extension methods, and methods of the protocol this agent does not offer.
    assert_eq!(
        agent.call_error("_vendor/thing", json!({})),
        ErrorCode::MethodNotFound
    );
    assert_eq!(
        agent.call_error("session/set_mode", json!({"sessionId": "s", "modeId": "m"})),
        ErrorCode::MethodNotFound
    );
    // Still serving.
    agent.new_session(state.path());
    agent.stop();
}

#[test]
fn bad_lines_answer_parse_error_or_invalid_request() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut agent = AgentProcess::initialized(state.path(), &[]);

    agent.send_line("this is not JSON");
    match agent.next_message() {
        Message::Response {
            id,
            result: Err(error),
        } => {
            assert_eq!(id, RequestId::Null);
            assert_eq!(error.code, ErrorCode::ParseError);
        }
        other => panic!("{other:?}"),
    }

    // JSON, but no `jsonrpc` member: the id is answered.
    agent.send_line(r#"{"id":41,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}"#);
    match agent.next_message() {
        Message::Response {
            id,
            result: Err(error),
        } => {
            assert_eq!(id, RequestId::Number(41));
            assert_eq!(error.code, ErrorCode::InvalidRequest);
        }
        other => panic!("{other:?}"),
    }

    // A payload that does not fit the method. `mcpServers` is required by the schema.
    assert_eq!(
        agent.call_error("session/new", json!({"cwd": "/"})),
        ErrorCode::InvalidParams
    );
    assert_eq!(
        agent.call_error("session/new", NewSessionRequest::new("relative/dir")),
        ErrorCode::InvalidParams
    );
    agent.new_session(state.path());
    agent.stop();
}

#[test]
fn requests_before_initialize_are_refused() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut agent = AgentProcess::start(state.path(), &[]);
    assert_eq!(
        agent.call_error("session/new", NewSessionRequest::new(state.path())),
        ErrorCode::InvalidRequest
    );
    agent
        .call("initialize", InitializeRequest::new(ProtocolVersion::V1))
        .expect("initialize");
    agent.new_session(state.path());
    agent.stop();
}

#[test]
fn sessions_never_opened_here_are_not_found() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut agent = AgentProcess::initialized(state.path(), &["--restore", "both"]);
    for id in ["sess_0123456789abcdef", "../../etc/passwd", ""] {
        let session = SessionId::new(id);
        assert_eq!(
            agent.call_error(
                "session/prompt",
                PromptRequest::new(session.clone(), vec!["hi".into()])
            ),
            ErrorCode::ResourceNotFound,
            "{id}"
        );
        assert_eq!(
            agent.call_error(
                "session/load",
                LoadSessionRequest::new(session, state.path())
            ),
            ErrorCode::ResourceNotFound,
            "{id}"
        );
    }
    agent.stop();
}

#[test]
fn never_initialize_stays_silent() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut agent = AgentProcess::start(state.path(), &["--never-initialize"]);
    agent.request("initialize", InitializeRequest::new(ProtocolVersion::V1));
    agent.request("session/new", NewSessionRequest::new(state.path()));
    agent.send_line("not JSON either");
    // Once its stdin closes the agent exits; not one line may have come out before.
    agent.close_stdin();
    assert!(agent.exit_status().success());
}
