//! The `tool` command: a tool call that needs the user's permission, asked of the client with
//! all four kinds of option. The options' order and ids say nothing of their kind (the first is
//! a rejection, and no id names its kind), so a client that answers by position or guesses from
//! ids takes the wrong path.

use std::sync::atomic::{AtomicU64, Ordering};

use agent_client_protocol_schema::v1::{
    AgentRequest, ClientResponse, Error, PermissionOption, PermissionOptionKind,
    RequestPermissionOutcome, RequestPermissionRequest, SessionUpdate, StopReason, ToolCall,
    ToolCallContent, ToolCallId, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};

use super::Turn;

const TITLE: &str = "Run the test tool";

/// (optionId, name, kind), in the order they are offered.
const OPTIONS: [(&str, &str, PermissionOptionKind); 4] = [
    ("b7", "Reject always", PermissionOptionKind::RejectAlways),
    ("a2", "Allow once", PermissionOptionKind::AllowOnce),
    ("c9", "Reject once", PermissionOptionKind::RejectOnce),
    ("d4", "Allow always", PermissionOptionKind::AllowAlways),
];

/// Tool call ids are unique in the process, across sessions.
static NEXT_TOOL_CALL: AtomicU64 = AtomicU64::new(1);

impl Turn {
    pub(super) async fn tool(&mut self) -> Result<StopReason, Error> {
        let id = ToolCallId::new(format!(
            "call_{}",
            NEXT_TOOL_CALL.fetch_add(1, Ordering::Relaxed)
        ));
        let call = ToolCall::new(id.clone(), TITLE)
            .kind(ToolKind::Execute)
            .status(ToolCallStatus::Pending)
            .raw_input(serde_json::json!({ "command": "true" }));
        self.send(SessionUpdate::ToolCall(call)).await;

        let options = OPTIONS
            .iter()
            .map(|&(option_id, name, kind)| PermissionOption::new(option_id, name, kind))
            .collect();
        let question = RequestPermissionRequest::new(
            self.session_id.clone(),
            ToolCallUpdate::new(id.clone(), ToolCallUpdateFields::new().title(TITLE)),
            options,
        );
        let Some(answer) = self
            .call(AgentRequest::RequestPermissionRequest(question))
            .await
        else {
            self.settle(
                &id,
                ToolCallStatus::Failed,
                "cancelled before the client answered".into(),
            )
            .await;
            return Ok(StopReason::Cancelled);
        };

        let outcome = match answer {
            Ok(ClientResponse::RequestPermissionResponse(response)) => response.outcome,
            Ok(other) => {
                let text = format!("an answer of the wrong kind: {other:?}");
                self.settle(&id, ToolCallStatus::Failed, text).await;
                return Ok(self.ending(StopReason::EndTurn));
            }
            Err(error) => {
                let text = format!("session/request_permission failed: {error}");
                self.settle(&id, ToolCallStatus::Failed, text).await;
                return Ok(self.ending(StopReason::EndTurn));
            }
        };
        let chosen = match outcome {
            RequestPermissionOutcome::Selected(selected) => selected.option_id,
            // `cancelled`, and any outcome newer than this schema: the turn is over.
            _ => {
                let text = "the client cancelled the permission request".to_owned();
                self.settle(&id, ToolCallStatus::Failed, text).await;
                return Ok(StopReason::Cancelled);
            }
        };
        match OPTIONS
            .iter()
            .find(|(option_id, ..)| *option_id == &*chosen.0)
        {
            Some(&(_, _, kind)) if allows(kind) => {
                let text = format!("allowed ({}): the test tool ran", kind_name(kind));
                self.settle(&id, ToolCallStatus::Completed, text).await;
            }
            Some(&(_, _, kind)) => {
                let text = format!("rejected ({}): the test tool did not run", kind_name(kind));
                self.settle(&id, ToolCallStatus::Failed, text).await;
            }
            None => {
                let text = format!("the client chose `{chosen}`, which was not offered");
                self.settle(&id, ToolCallStatus::Failed, text).await;
            }
        }
        Ok(self.ending(StopReason::EndTurn))
    }

    /// The tool call's last `tool_call_update`: its final status and a line saying why.
    async fn settle(&mut self, id: &ToolCallId, status: ToolCallStatus, text: String) {
        let fields = ToolCallUpdateFields::new()
            .status(status)
            .content(vec![ToolCallContent::from(text)]);
        let update = ToolCallUpdate::new(id.clone(), fields);
        self.send(SessionUpdate::ToolCallUpdate(update)).await;
    }
}

fn allows(kind: PermissionOptionKind) -> bool {
    matches!(
        kind,
        PermissionOptionKind::AllowOnce | PermissionOptionKind::AllowAlways
    )
}

/// The kind as it is spelled on the wire (`allow_once`).
fn kind_name(kind: PermissionOptionKind) -> String {
    match serde_json::to_value(kind) {
        Ok(serde_json::Value::String(name)) => name,
        _ => format!("{kind:?}"),
    }
}
