//! `fs-read` and `fs-write`: the agent reads and writes through the client, and only through the
//! methods the client offered.

use agent_client_protocol_schema::v1::{
    AgentRequest, ClientCapabilities, Error, ReadTextFileResponse, StopReason,
    WriteTextFileResponse,
};

use crate::harness::AgentProcess;

#[test]
fn fs_read_echoes_what_the_client_read() {
    let state = tempfile::tempdir().expect("tempdir");
    let file = state.path().join("notes.txt");
    std::fs::write(&file, "first line\nsecond line\n").expect("written");
    let mut agent = AgentProcess::initialized(state.path(), &[]);
    let session = agent.new_session(state.path());

    let prompt = agent.prompt(&session, &format!("fs-read {}", file.display()));
    let (id, request) = agent.next_message().into_agent_request();
    let AgentRequest::ReadTextFileRequest(read) = request else {
        panic!("expected fs/read_text_file, got {request:?}");
    };
    assert_eq!(read.path, file);
    assert_eq!(read.session_id, session);
    let content = std::fs::read_to_string(&read.path).expect("read");
    agent.answer(id, Ok(ReadTextFileResponse::new(content)));
    let turn = agent.finish_turn(&prompt);
    assert_eq!(turn.said(), ["first line\nsecond line\n"]);
    assert_eq!(turn.stop_reason(), StopReason::EndTurn);

    // The client's refusal is reported, and the turn still ends normally.
    let prompt = agent.prompt(&session, "fs-read /nonexistent");
    let (id, _) = agent.next_message().into_agent_request();
    agent.answer::<()>(
        id,
        Err(Error::resource_not_found(Some("/nonexistent".into()))),
    );
    let turn = agent.finish_turn(&prompt);
    let said = turn.said();
    assert!(
        said[0].starts_with("fs/read_text_file failed: "),
        "{said:?}"
    );
    assert!(said[0].contains("-32002"), "{said:?}");
    assert_eq!(turn.stop_reason(), StopReason::EndTurn);
    agent.stop();
}

#[test]
fn fs_write_asks_the_client_to_write() {
    let state = tempfile::tempdir().expect("tempdir");
    let file = state.path().join("out.txt");
    let mut agent = AgentProcess::initialized(state.path(), &[]);
    let session = agent.new_session(state.path());

    let prompt = agent.prompt(&session, &format!("fs-write {} two words", file.display()));
    let (id, request) = agent.next_message().into_agent_request();
    let AgentRequest::WriteTextFileRequest(write) = request else {
        panic!("expected fs/write_text_file, got {request:?}");
    };
    assert_eq!(write.path, file);
    assert_eq!(write.content, "two words");
    std::fs::write(&write.path, &write.content).expect("written");
    agent.answer(id, Ok(WriteTextFileResponse::new()));
    let turn = agent.finish_turn(&prompt);
    assert_eq!(
        turn.said(),
        [format!("wrote 9 bytes to {}", file.display())]
    );
    assert_eq!(turn.stop_reason(), StopReason::EndTurn);
    agent.stop();
}

#[test]
fn fs_methods_the_client_did_not_offer_are_not_called() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut agent = AgentProcess::start(state.path(), &[]);
    agent.initialize(ClientCapabilities::new());
    let session = agent.new_session(state.path());
    // `turn` fails on any request of the client during the turn.
    let turn = agent.turn(&session, "fs-read /etc/hostname");
    assert_eq!(turn.said(), ["the client does not offer fs/read_text_file"]);
    let turn = agent.turn(&session, "fs-write /tmp/x y");
    assert_eq!(
        turn.said(),
        ["the client does not offer fs/write_text_file"]
    );
    agent.stop();
}
