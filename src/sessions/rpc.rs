//! JSON-RPC 2.0 as ACP frames it, one message a line, seen from the client: what a harness's
//! line is, and the lines the server sends it. The envelope types are the ACP schema crate's.

use agent_client_protocol_schema::v1::{
    Error, JsonRpcMessage, Notification, Request, RequestId, Response,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message from the harness, its payload still untyped: the method decides its type.
#[derive(Debug)]
pub enum FromHarness {
    Request {
        id: RequestId,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// An answer to one of the server's requests (whose ids are numbers).
    Response {
        id: RequestId,
        result: Result<Value, Error>,
    },
}

// Tried in this order: a request has both `method` and `id`, a response `id` with `result` or
// `error`, a notification only `method`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Envelope {
    Request(Request<Value>),
    Response(Response<Value>),
    Notification(Notification<Value>),
}

/// The line as a message, or why it is none (the harness is told nothing: a client does not
/// answer what it cannot read).
pub fn decode(line: &[u8]) -> Result<FromHarness, String> {
    let message: JsonRpcMessage<Envelope> =
        serde_json::from_slice(line).map_err(|e| format!("not a JSON-RPC 2.0 message: {e}"))?;
    Ok(match message.into_inner() {
        Envelope::Request(r) => FromHarness::Request {
            id: r.id,
            method: r.method.to_string(),
            params: r.params.unwrap_or(Value::Null),
        },
        Envelope::Notification(n) => FromHarness::Notification {
            method: n.method.to_string(),
            params: n.params.unwrap_or(Value::Null),
        },
        Envelope::Response(Response::Result { id, result }) => FromHarness::Response {
            id,
            result: Ok(result),
        },
        Envelope::Response(Response::Error { id, error }) => FromHarness::Response {
            id,
            result: Err(error),
        },
    })
}

fn line<M: Serialize>(message: M) -> Vec<u8> {
    // The schema's types and `Value`s serialize without fail.
    let mut out = serde_json::to_vec(&JsonRpcMessage::wrap(message)).unwrap_or_default();
    out.push(b'\n');
    out
}

pub fn request<P: Serialize>(id: i64, method: &str, params: P) -> Vec<u8> {
    line(Request {
        id: RequestId::Number(id),
        method: method.into(),
        params: Some(params),
    })
}

pub fn notification<P: Serialize>(method: &str, params: P) -> Vec<u8> {
    line(Notification {
        method: method.into(),
        params: Some(params),
    })
}

pub fn response<R: Serialize>(id: RequestId, result: Result<R, Error>) -> Vec<u8> {
    line(Response::new(id, result))
}

/// A request id as stored (JSON), and back.
pub fn id_to_value(id: &RequestId) -> Value {
    serde_json::to_value(id).unwrap_or(Value::Null)
}

pub fn id_from_value(v: &Value) -> RequestId {
    RequestId::deserialize(v).unwrap_or(RequestId::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_sorted_by_their_fields() {
        assert!(matches!(
            decode(
                br#"{"jsonrpc":"2.0","id":"x","method":"session/request_permission","params":{}}"#
            ),
            Ok(FromHarness::Request { .. })
        ));
        assert!(matches!(
            decode(br#"{"jsonrpc":"2.0","method":"session/update","params":{"a":1}}"#),
            Ok(FromHarness::Notification { .. })
        ));
        assert!(matches!(
            decode(br#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}"#),
            Ok(FromHarness::Response {
                id: RequestId::Number(3),
                result: Ok(_)
            })
        ));
        assert!(matches!(
            decode(br#"{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"no"}}"#),
            Ok(FromHarness::Response { result: Err(_), .. })
        ));
        assert!(decode(b"this line is not JSON {").is_err());
        assert!(
            decode(br#"{"id":1,"method":"x"}"#).is_err(),
            "no jsonrpc member"
        );
    }

    #[test]
    fn lines_end_in_a_newline_and_ids_round_trip() {
        let l = request(7, "session/new", serde_json::json!({"cwd": "/"}));
        assert_eq!(l.last(), Some(&b'\n'));
        let v: Value = serde_json::from_slice(&l).expect("JSON");
        assert_eq!(v["id"], 7);
        assert_eq!(v["jsonrpc"], "2.0");
        for id in [RequestId::Number(4), RequestId::Str("a".into())] {
            assert_eq!(id_from_value(&id_to_value(&id)), id);
        }
    }
}
