//! The `fs-read` and `fs-write` commands: the agent reads and writes files through the client,
//! which decides what the agent may touch. The result (or the client's refusal) comes back as
//! a message chunk, so a test can compare it.

use std::path::PathBuf;

use agent_client_protocol_schema::v1::{
    AgentRequest, ClientResponse, ReadTextFileRequest, WriteTextFileRequest,
};

use super::Turn;

impl Turn {
    pub(super) async fn read_file(&mut self, path: PathBuf) {
        // The protocol lets an agent call only the `fs/*` methods the client offered.
        if !self.fs.read_text_file {
            self.say("the client does not offer fs/read_text_file".to_owned())
                .await;
            return;
        }
        let request = ReadTextFileRequest::new(self.session_id.clone(), path);
        let text = match self.call(AgentRequest::ReadTextFileRequest(request)).await {
            None => return,
            Some(Ok(ClientResponse::ReadTextFileResponse(response))) => response.content,
            Some(Ok(other)) => format!("an answer of the wrong kind: {other:?}"),
            Some(Err(error)) => format!("fs/read_text_file failed: {error}"),
        };
        self.say(text).await;
    }

    pub(super) async fn write_file(&mut self, path: PathBuf, text: String) {
        if !self.fs.write_text_file {
            self.say("the client does not offer fs/write_text_file".to_owned())
                .await;
            return;
        }
        let size = text.len();
        let shown = path.display().to_string();
        let request = WriteTextFileRequest::new(self.session_id.clone(), path, text);
        let report = match self.call(AgentRequest::WriteTextFileRequest(request)).await {
            None => return,
            Some(Ok(ClientResponse::WriteTextFileResponse(_))) => {
                format!("wrote {size} bytes to {shown}")
            }
            Some(Ok(other)) => format!("an answer of the wrong kind: {other:?}"),
            Some(Err(error)) => format!("fs/write_text_file failed: {error}"),
        };
        self.say(report).await;
    }
}
