//! [`ApiClient`]'s calls for agent sessions (`/api/v1/agents/{id}/sessions…`) and the approval
//! queue (`/api/v1/approvals…`), with the types of `api::types::conversation`.

use futures::stream::{BoxStream, StreamExt};
use reqwest::header::ACCEPT;
use reqwest::Method;
use serde_json::Value;

use super::client::ApiClient;
use super::error::ClientError;
use super::sse::{SseEvent, SseParser};
use crate::api::types::conversation::{
    AnswerApproval, Approval, ApprovalState, CreateSession, PromptAccepted, PromptBody, Session,
    SessionEventKind, TranscriptEvent,
};

/// One event of a session's stream (`GET …/sessions/{sid}/events`): its sequence number (the
/// SSE `id:`), its name, and its data. Events of a name this client does not know are passed on
/// with `kind: None`, so the server can add some.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionEvent {
    pub seq: u64,
    pub kind: Option<SessionEventKind>,
    /// The SSE `event:` as it came.
    pub name: String,
    pub data: Value,
}

impl SessionEvent {
    pub fn decode(ev: SseEvent) -> Result<Self, ClientError> {
        let seq = ev
            .id
            .as_deref()
            .and_then(|id| id.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                ClientError::Protocol(format!(
                    "a session event ({}) without a sequence number as its id",
                    ev.event
                ))
            })?;
        let kind = serde_json::from_value(Value::String(ev.event.clone())).ok();
        let data = serde_json::from_str(&ev.data).map_err(|e| {
            ClientError::Protocol(format!("the data of session event {seq} is not JSON: {e}"))
        })?;
        Ok(SessionEvent {
            seq,
            kind,
            name: ev.event,
            data,
        })
    }
}

impl ApiClient {
    pub async fn list_sessions(&self, agent: &str) -> Result<Vec<Session>, ClientError> {
        self.json(self.request(Method::GET, &["agents", agent, "sessions"]))
            .await
    }

    pub async fn get_session(&self, agent: &str, sid: &str) -> Result<Session, ClientError> {
        self.json(self.request(Method::GET, &["agents", agent, "sessions", sid]))
            .await
    }

    pub async fn create_session(
        &self,
        agent: &str,
        req: &CreateSession,
    ) -> Result<Session, ClientError> {
        self.json(
            self.request(Method::POST, &["agents", agent, "sessions"])
                .json(req),
        )
        .await
    }

    pub async fn delete_session(&self, agent: &str, sid: &str) -> Result<(), ClientError> {
        self.send(self.request(Method::DELETE, &["agents", agent, "sessions", sid]))
            .await
            .map(drop)
    }

    /// Starts a turn: `202 {"turn"}`; `409` while one runs.
    pub async fn prompt(
        &self,
        agent: &str,
        sid: &str,
        req: &PromptBody,
    ) -> Result<PromptAccepted, ClientError> {
        self.json(
            self.request(Method::POST, &["agents", agent, "sessions", sid, "prompt"])
                .json(req),
        )
        .await
    }

    /// Asks the running turn to stop; `409` when none runs.
    pub async fn cancel_turn(&self, agent: &str, sid: &str) -> Result<(), ClientError> {
        self.send(self.request(Method::POST, &["agents", agent, "sessions", sid, "cancel"]))
            .await
            .map(drop)
    }

    /// The transcript's events after `after`, at most `limit` (1 to 10000), oldest first.
    pub async fn transcript(
        &self,
        agent: &str,
        sid: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<TranscriptEvent>, ClientError> {
        self.json(
            self.request(Method::GET, &["agents", agent, "sessions", sid, "events"])
                .query(&[
                    ("format", "json".to_string()),
                    ("after", after.to_string()),
                    ("limit", limit.to_string()),
                ])
                .header(ACCEPT, "application/json"),
        )
        .await
    }

    /// Follows the session's events after `after`, live; the subscription is open once this
    /// returns.
    pub async fn session_events(
        &self,
        agent: &str,
        sid: &str,
        after: u64,
    ) -> Result<BoxStream<'static, Result<SessionEvent, ClientError>>, ClientError> {
        let resp = self
            .send(
                self.request(Method::GET, &["agents", agent, "sessions", sid, "events"])
                    .query(&[("after", after.to_string())])
                    .header(ACCEPT, "text/event-stream"),
            )
            .await?;
        let lines = self.line_stream(resp);
        Ok(Box::pin(async_stream::try_stream! {
            let mut lines = lines;
            let mut parser = SseParser::new();
            while let Some(line) = lines.next().await {
                let line = line?;
                if let Some(ev) = parser.line(&String::from_utf8_lossy(&line)) {
                    yield SessionEvent::decode(ev)?;
                }
            }
        }))
    }

    /// `state`: only pending or only resolved ones; `None` for both. `agent`: an agent's id.
    pub async fn list_approvals(
        &self,
        state: Option<ApprovalState>,
        agent: Option<&str>,
    ) -> Result<Vec<Approval>, ClientError> {
        let mut query = Vec::new();
        if let Some(state) = state {
            let state = match state {
                ApprovalState::Pending => "pending",
                ApprovalState::Resolved => "resolved",
            };
            query.push(("state", state));
        }
        if let Some(agent) = agent {
            query.push(("agent", agent));
        }
        self.json(self.request(Method::GET, &["approvals"]).query(&query))
            .await
    }

    pub async fn get_approval(&self, id: &str) -> Result<Approval, ClientError> {
        self.json(self.request(Method::GET, &["approvals", id]))
            .await
    }

    /// Answers an approval with one of its options, by the option's id.
    pub async fn answer_approval(
        &self,
        id: &str,
        option_id: &str,
    ) -> Result<Approval, ClientError> {
        let body = AnswerApproval {
            option_id: option_id.to_string(),
        };
        self.json(self.request(Method::POST, &["approvals", id]).json(&body))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_events_decode_with_their_sequence_numbers() {
        let ev = SseEvent {
            event: "turn".into(),
            data: r#"{"turn":2,"state":"ended","stopReason":"end_turn"}"#.into(),
            id: Some("17".into()),
        };
        match SessionEvent::decode(ev) {
            Ok(e) => {
                assert_eq!(e.seq, 17);
                assert_eq!(e.kind, Some(SessionEventKind::Turn));
                assert_eq!(e.data["stopReason"], "end_turn");
            }
            Err(e) => panic!("{e}"),
        }
        let later = SseEvent {
            event: "something_new".into(),
            data: "{}".into(),
            id: Some("3".into()),
        };
        assert!(matches!(
            SessionEvent::decode(later),
            Ok(SessionEvent { kind: None, .. })
        ));
        let no_id = SseEvent {
            event: "update".into(),
            data: "{}".into(),
            id: None,
        };
        assert!(SessionEvent::decode(no_id).is_err());
        let permission = SseEvent {
            event: "permission_resolved".into(),
            data: "{}".into(),
            id: Some("9".into()),
        };
        assert!(matches!(
            SessionEvent::decode(permission),
            Ok(SessionEvent {
                kind: Some(SessionEventKind::PermissionResolved),
                ..
            })
        ));
    }
}
