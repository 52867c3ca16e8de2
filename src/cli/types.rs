//! What the client adds to the API's own types ([`crate::api::types`]): the lifecycle actions,
//! and tolerant decoders for the exec stream and the event stream.

use serde::Deserialize;

use super::error::ClientError;
use super::sse::SseEvent;
use crate::api::types::{Agent, ErrorCode, ExecExit, OutputStream, PullProgress};

/// The lifecycle operations under `POST /api/v1/agents/{id}/…`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentAction {
    Start,
    Stop,
    Pause,
    Rebuild,
}

impl AgentAction {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentAction::Start => "start",
            AgentAction::Stop => "stop",
            AgentAction::Pause => "pause",
            AgentAction::Rebuild => "rebuild",
        }
    }
}

/// One line of a streamed exec (`Accept: application/x-ndjson`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEvent {
    Output { stream: OutputStream, data: String },
    Exit(ExecExit),
}

/// Decodes one NDJSON line. Blank lines and objects of kinds we do not know yield `None`, so the
/// server can add line kinds without breaking older clients; an `{"error": …}` line is an error.
pub fn decode_exec_line(line: &[u8]) -> Result<Option<ExecEvent>, ClientError> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let value: serde_json::Value = serde_json::from_slice(line)
        .map_err(|e| ClientError::Protocol(format!("bad exec stream line: {e}")))?;
    let Some(obj) = value.as_object() else {
        return Err(ClientError::Protocol(
            "exec stream line is not a JSON object".into(),
        ));
    };
    if let Some(stream) = obj.get("stream") {
        let stream = match stream.as_str() {
            Some("stdout") => OutputStream::Stdout,
            Some("stderr") => OutputStream::Stderr,
            _ => return Ok(None),
        };
        let data = obj
            .get("data")
            .and_then(|d| d.as_str())
            .ok_or_else(|| ClientError::Protocol("exec output line without data".into()))?;
        return Ok(Some(ExecEvent::Output {
            stream,
            data: data.to_string(),
        }));
    }
    if obj.contains_key("error") {
        let body = serde_json::to_vec(&value).unwrap_or_default();
        let mut err = ClientError::from_status(500, &body);
        if let ClientError::Api { status, code, .. } = &mut err {
            // An error inside a 200 stream has no status of its own: take its code's.
            *status = ErrorCode::parse(code)
                .unwrap_or(ErrorCode::Internal)
                .status();
        }
        return Err(err);
    }
    if obj.contains_key("exitCode") || obj.contains_key("timedOut") {
        let exit = serde_json::from_value(value)
            .map_err(|e| ClientError::Protocol(format!("bad exec exit line: {e}")))?;
        return Ok(Some(ExecEvent::Exit(exit)));
    }
    Ok(None)
}

/// One event of `GET /api/v1/events`.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    /// An agent changed state; the object as it is now.
    Agent(Box<Agent>),
    /// How far the image pull for agent `id` has got.
    Pull { id: String, progress: PullProgress },
    /// An event kind this client does not know, passed on as it came.
    Other(SseEvent),
}

/// A `pull` event's data: the agent's id beside the progress fields.
#[derive(Deserialize)]
struct PullEvent {
    id: String,
    #[serde(flatten)]
    progress: PullProgress,
}

impl ServerEvent {
    pub fn decode(ev: SseEvent) -> Result<Self, ClientError> {
        match ev.event.as_str() {
            "agent" => serde_json::from_str(&ev.data)
                .map(|a| ServerEvent::Agent(Box::new(a)))
                .map_err(|e| ClientError::Protocol(format!("bad agent event: {e}"))),
            "pull" => serde_json::from_str(&ev.data)
                .map(|p: PullEvent| ServerEvent::Pull {
                    id: p.id,
                    progress: p.progress,
                })
                .map_err(|e| ClientError::Protocol(format!("bad pull event: {e}"))),
            _ => Ok(ServerEvent::Other(ev)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_and_exit_lines_decode() {
        assert_eq!(
            decode_exec_line(br#"{"stream":"stdout","data":"hi\n"}"#).ok(),
            Some(Some(ExecEvent::Output {
                stream: OutputStream::Stdout,
                data: "hi\n".into()
            }))
        );
        assert_eq!(
            decode_exec_line(br#"{"stream":"stderr","data":""}"#).ok(),
            Some(Some(ExecEvent::Output {
                stream: OutputStream::Stderr,
                data: String::new()
            }))
        );
        assert_eq!(
            decode_exec_line(br#"{"exitCode":3,"timedOut":false,"durationMs":12}"#).ok(),
            Some(Some(ExecEvent::Exit(ExecExit {
                exit_code: 3,
                timed_out: false,
                duration_ms: 12,
                truncated: false,
                egress_denied: Vec::new(),
            })))
        );
        assert_eq!(
            decode_exec_line(br#"{"exitCode":137,"timedOut":true,"durationMs":5}"#).ok(),
            Some(Some(ExecEvent::Exit(ExecExit {
                exit_code: 137,
                timed_out: true,
                duration_ms: 5,
                truncated: false,
                egress_denied: Vec::new(),
            })))
        );
    }

    #[test]
    fn unknown_and_blank_lines_are_skipped() {
        assert_eq!(decode_exec_line(b"").ok(), Some(None));
        assert_eq!(decode_exec_line(b"  \r").ok(), Some(None));
        assert_eq!(decode_exec_line(br#"{"progress":1}"#).ok(), Some(None));
        assert_eq!(
            decode_exec_line(br#"{"stream":"stdlog","data":"x"}"#).ok(),
            Some(None)
        );
    }

    #[test]
    fn broken_lines_and_error_lines_are_errors() {
        assert!(matches!(
            decode_exec_line(b"{not json"),
            Err(ClientError::Protocol(_))
        ));
        assert!(matches!(
            decode_exec_line(b"[1]"),
            Err(ClientError::Protocol(_))
        ));
        assert!(matches!(
            decode_exec_line(br#"{"stream":"stdout"}"#),
            Err(ClientError::Protocol(_))
        ));
        let err = decode_exec_line(br#"{"error":{"code":"unavailable","message":"driver down"}}"#);
        match err {
            Err(e @ ClientError::Api { .. }) => {
                assert_eq!(e.status(), Some(503));
                assert_eq!(e.to_string(), "driver down (unavailable)");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pull_events_decode_and_unknown_kinds_pass_through() {
        let ev = SseEvent {
            event: "pull".into(),
            data: r#"{"id":"a1","image":"x:1","status":"pulling","layersDone":1,"layersTotal":2,"bytesDone":5,"bytesTotal":10,"percent":45,"error":null}"#.into(),
            id: None,
        };
        match ServerEvent::decode(ev) {
            Ok(ServerEvent::Pull { id, progress }) => {
                assert_eq!(id, "a1");
                assert_eq!(progress.image, "x:1");
                assert_eq!(progress.status, crate::api::types::PullStatus::Pulling);
                assert_eq!((progress.bytes_done, progress.bytes_total), (5, 10));
                assert_eq!(progress.percent, 45);
            }
            other => panic!("{other:?}"),
        }
        let bad = SseEvent {
            event: "pull".into(),
            data: "{}".into(),
            id: None,
        };
        assert!(matches!(
            ServerEvent::decode(bad),
            Err(ClientError::Protocol(_))
        ));
        let other = SseEvent {
            event: "later".into(),
            data: "{}".into(),
            id: None,
        };
        assert!(matches!(
            ServerEvent::decode(other),
            Ok(ServerEvent::Other(_))
        ));
    }

    #[test]
    fn requests_serialize_in_camel_case_without_empty_fields() {
        let req = crate::api::types::ExecBody {
            command: vec!["ls".into()],
            timeout_ms: Some(5000),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&req).ok(),
            Some(serde_json::json!({"command":["ls"],"timeoutMs":5000}))
        );
        let create = crate::api::types::CreateAgent {
            name: "b".into(),
            memory_mb: Some(512),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&create).ok(),
            Some(serde_json::json!({"name":"b","memoryMb":512}))
        );
    }
}
