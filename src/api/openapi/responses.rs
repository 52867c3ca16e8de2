//! The answers the handlers' annotations leave out: what every route shares (`401`, `403`,
//! `500`, the JSON body's `400` and `413`), the agent's state in a header of its routes' answers,
//! the exec's NDJSON stream, the error codes, and the links from a created agent to the routes
//! that take its id.

use serde_json::{json, Map, Value};

use super::{operations, property, set};
use crate::api::agent_state;
use crate::api::types::ErrorCode;

/// The operations that cannot fail inside the server (no store, no sandbox): no `500`.
const NEVER_INTERNAL: &[&str] = &[
    "getHealth",
    "getLimits",
    "events",
    "getSession",
    "reloadConfig",
];

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
    })
}

/// The answers every route can give, added where an operation does not say them itself.
pub(super) fn shared_responses(doc: &mut Value) {
    for (_, op) in operations(doc) {
        let id = op
            .get("operationId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        // `security: []` marks a route anyone may call.
        let public = op
            .get("security")
            .and_then(Value::as_array)
            .is_some_and(|s| s.is_empty());
        let json_body = op
            .get("requestBody")
            .and_then(|b| b.pointer("/content/application~1json"))
            .is_some();
        let has_query = op
            .get("parameters")
            .and_then(Value::as_array)
            .is_some_and(|ps| ps.iter().any(|p| p["in"] == "query"));
        let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
            continue;
        };
        let mut add = |status: &str, description: &str| {
            responses
                .entry(status.to_string())
                .or_insert_with(|| error_response(description));
        };
        if json_body || has_query {
            add(
                "400",
                "The request is malformed: its JSON or query does not fit the schema",
            );
        }
        if !public {
            add(
                "401",
                "No valid credential: send `Authorization: Bearer <token>` (or the web UI's session cookie)",
            );
        }
        add(
            "403",
            "The request came from the sandbox network, or it carries the session cookie without coming from the server's own origin",
        );
        if json_body {
            add("413", "The JSON body is over 16 MiB");
        }
        if !NEVER_INTERNAL.contains(&id.as_str()) {
            add(
                "500",
                "The server failed inside (its database); never the answer to bad input",
            );
        }
    }
}

/// An exec answers NDJSON when asked for it with `Accept: application/x-ndjson`.
pub(super) fn exec_stream(doc: &mut Value) {
    set(
        doc.pointer_mut("/paths/~1api~1v1~1agents~1{id}~1exec/post/responses/200/content"),
        "application/x-ndjson",
        json!({
            "schema": {
                "type": "string",
                "description": "One JSON object a line: `{\"stream\": \"stdout\"|\"stderr\", \"data\"}` as \
                    the output comes, then `{\"exitCode\", \"timedOut\", \"durationMs\", \"truncated\"}`; \
                    an `ErrorBody` line instead when the sandbox connection is lost",
            },
            "example": "{\"stream\":\"stdout\",\"data\":\"ok\\n\"}\n\
                {\"exitCode\":0,\"timedOut\":false,\"durationMs\":12,\"truncated\":false}\n",
        }),
    );
}

pub(super) fn code_stream(doc: &mut Value) {
    set(
        doc.pointer_mut("/paths/~1api~1v1~1agents~1{id}~1code/post/responses/200/content"),
        "application/x-ndjson",
        json!({
            "schema": {
                "type": "string",
                "description": "One JSON object a line, as the run goes: `{\"stdout\": text}`, \
                    `{\"stderr\": text}`, `{\"result\": {mime: data}}`, `{\"error\": {\"name\", \
                    \"value\", \"traceback\"}}`, then `{\"done\": {\"executionCount\", \"truncated\"}}`; \
                    an `ErrorBody` line (`{\"error\": {\"code\", \"message\"}}`) instead when the \
                    sandbox connection is lost",
            },
            "example": "{\"stdout\":\"hi\\n\"}\n{\"result\":{\"text/plain\":\"42\"}}\n\
                {\"done\":{\"executionCount\":1,\"truncated\":false}}\n",
        }),
    );
}

pub(super) fn error_codes(doc: &mut Value) {
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    set(property(doc, "ErrorDetail", "code"), "enum", json!(codes));
}

/// Links from a created agent to every operation that takes its id, so that a client (or a
/// fuzzer) can follow the `id` of `201` to them.
pub(super) fn agent_links(doc: &mut Value) {
    let mut links = Map::new();
    for (path, op) in operations(doc) {
        // The file routes answer `404` for a path that does not exist in the sandbox, which a
        // link's follower would take for the agent missing.
        if !path.contains("{id}") || path.contains("/fs/") {
            continue;
        }
        let Some(id) = op.get("operationId").and_then(Value::as_str) else {
            continue;
        };
        links.insert(
            id.to_string(),
            json!({"operationId": id, "parameters": {"id": "$response.body#/id"}}),
        );
    }
    set(
        doc.pointer_mut("/paths/~1api~1v1~1agents/post/responses/201"),
        "links",
        Value::Object(links),
    );
}

/// Every answer of a route under `/api/v1/agents/{id}` that got past the guard (not `401`,
/// `403`) may carry the agent's state after the request: absent when there is no such agent.
pub(super) fn agent_state_header(doc: &mut Value) {
    let header = json!({
        "description": "The agent's state once the request was handled (one that woke it says `running`), so that a client's view of the agent follows without asking again; absent when there is no such agent",
        "required": false,
        "schema": {"$ref": "#/components/schemas/AgentState"},
    });
    for (path, op) in operations(doc) {
        if !path.starts_with("/api/v1/agents/{id}") {
            continue;
        }
        let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
            continue;
        };
        for (status, response) in responses.iter_mut() {
            if matches!(status.as_str(), "401" | "403") {
                continue;
            }
            if let Some(r) = response.as_object_mut() {
                let headers = r.entry("headers").or_insert_with(|| json!({}));
                if let Some(h) = headers.as_object_mut() {
                    h.insert(agent_state::HEADER_NAME.to_string(), header.clone());
                }
            }
        }
    }
}
