//! JSON-RPC 2.0 framing: one JSON object per line, in both directions. Decoding sorts a line into
//! request, notification or response; anything else becomes the error the client is owed.

use std::sync::Arc;

use agent_client_protocol_schema::v1::{
    Error, JsonRpcMessage, Notification, Request, RequestId, Response,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message from the client, its payload still untyped: the method decides its type.
#[derive(Debug)]
pub enum Incoming {
    Request {
        id: RequestId,
        method: Arc<str>,
        params: Value,
    },
    Notification {
        method: Arc<str>,
        params: Value,
    },
    Response {
        id: RequestId,
        result: Result<Value, Error>,
    },
}

/// A line that is not a JSON-RPC message. Each one is answered with an error response.
#[derive(Debug, thiserror::Error)]
pub enum Malformed {
    #[error("not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("not a JSON-RPC 2.0 message: {reason}")]
    NotJsonRpc { id: RequestId, reason: String },
}

impl Malformed {
    /// The error response this line gets: -32700 (parse error) with a null id for text that is not
    /// JSON, -32600 (invalid request) with the message's id, when it has a usable one, otherwise.
    pub fn into_response(self) -> (RequestId, Error) {
        match self {
            Malformed::NotJson(error) => (
                RequestId::Null,
                Error::parse_error().data(error.to_string()),
            ),
            Malformed::NotJsonRpc { id, reason } => (id, Error::invalid_request().data(reason)),
        }
    }
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

pub fn decode(line: &[u8]) -> Result<Incoming, Malformed> {
    let value: Value = serde_json::from_slice(line).map_err(Malformed::NotJson)?;
    // Kept for the error response, in case the message is unusable.
    let id = value
        .get("id")
        .and_then(|id| RequestId::deserialize(id).ok())
        .unwrap_or(RequestId::Null);
    let message =
        JsonRpcMessage::<Envelope>::deserialize(value).map_err(|error| Malformed::NotJsonRpc {
            id,
            reason: error.to_string(),
        })?;
    Ok(match message.into_inner() {
        Envelope::Request(request) => Incoming::Request {
            id: request.id,
            method: request.method,
            params: request.params.unwrap_or(Value::Null),
        },
        Envelope::Notification(notification) => Incoming::Notification {
            method: notification.method,
            params: notification.params.unwrap_or(Value::Null),
        },
        Envelope::Response(Response::Result { id, result }) => Incoming::Response {
            id,
            result: Ok(result),
        },
        Envelope::Response(Response::Error { id, error }) => Incoming::Response {
            id,
            result: Err(error),
        },
    })
}

/// Encodes one message as a line (without its newline). The schema's types serialize without
/// fail unless a path is not UTF-8, and every path here came in as JSON text.
pub fn encode<M: Serialize>(message: M) -> Result<String, serde_json::Error> {
    serde_json::to_string(&JsonRpcMessage::wrap(message))
}

pub fn response<R: Serialize>(id: RequestId, result: Result<R, Error>) -> Response<R> {
    Response::new(id, result)
}

pub fn request<P: Serialize>(id: RequestId, method: &str, params: P) -> Request<P> {
    Request {
        id,
        method: method.into(),
        params: Some(params),
    }
}

pub fn notification<P: Serialize>(method: &str, params: P) -> Notification<P> {
    Notification {
        method: method.into(),
        params: Some(params),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol_schema::v1::ErrorCode;
    use serde_json::json;

    #[test]
    fn sorts_lines_by_their_fields() {
        let request = decode(br#"{"jsonrpc":"2.0","id":7,"method":"session/new","params":{}}"#);
        assert!(matches!(
            request,
            Ok(Incoming::Request {
                id: RequestId::Number(7),
                ..
            })
        ));
        let notification = decode(br#"{"jsonrpc":"2.0","method":"session/cancel"}"#);
        assert!(matches!(
            notification,
            Ok(Incoming::Notification {
                params: Value::Null,
                ..
            })
        ));
        let answer = decode(br#"{"jsonrpc":"2.0","id":"a","result":null}"#);
        assert!(matches!(
            answer,
            Ok(Incoming::Response {
                result: Ok(Value::Null),
                ..
            })
        ));
        let refusal = decode(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#);
        assert!(matches!(
            refusal,
            Ok(Incoming::Response { result: Err(_), .. })
        ));
    }

    #[test]
    fn bad_lines_get_parse_or_invalid_request_errors() {
        let (id, error) = decode(b"hello {").expect_err("decoded").into_response();
        assert_eq!((id, error.code), (RequestId::Null, ErrorCode::ParseError));

        // Valid JSON, but no `jsonrpc` member: the id is still echoed.
        let (id, error) = decode(br#"{"id":3,"method":"initialize"}"#)
            .expect_err("decoded")
            .into_response();
        assert_eq!(
            (id, error.code),
            (RequestId::Number(3), ErrorCode::InvalidRequest)
        );
    }

    #[test]
    fn encodes_with_the_version_member() {
        let line = encode(notification("session/update", json!({"a": 1}))).expect("encoded");
        assert_eq!(
            serde_json::from_str::<Value>(&line).expect("JSON"),
            json!({"jsonrpc": "2.0", "method": "session/update", "params": {"a": 1}})
        );
    }
}
