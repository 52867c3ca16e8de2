//! The OpenAPI document served at `/api/v1/openapi.json` (and printed by `agenthold openapi`):
//! generated from the handlers' annotations and the body types, then completed for the server
//! that serves it. What every route shares (`401`, `403`, `500`, the JSON body's `400` and
//! `413`) is added here once, the configured limits (`sandbox.max_cpus`, `max_memory_mb`,
//! `max_disk_mb`, `server.exec_max_timeout`) become the schemas' maxima, and links lead from a
//! created agent to the routes that take its id. The document is the contract: a request it
//! allows is one the server accepts, and every status the server answers is in it.

use serde_json::{json, Map, Value};
use utoipa::OpenApi;

use super::types::ErrorCode;
use super::{agents, events, exec, files, processes, session, terminal, terminals, types};
use crate::config::{Config, DriverKind};

#[derive(OpenApi)]
#[openapi(
    info(title = "agenthold", description = "Self-hosted sandboxes for AI agents: HTTP API v1. \
        Every route but `/api/v1/health` and signing in needs `Authorization: Bearer <token>` \
        (or the web UI's session cookie); a request from the sandbox network is refused with \
        `403` whatever it carries. Errors are `{\"error\": {\"code\", \"message\", \"field\"?}}`. \
        The limits in this document are this server's configuration."),
    paths(
        agents::health, agents::limits, agents::presets, agents::list, agents::create, agents::get, agents::update, agents::destroy,
        agents::start, agents::stop, agents::rebuild, agents::rerun_setup, events::events,
        files::list, files::read, files::write, files::mkdir, files::remove,
        terminal::terminal, terminals::list, terminals::kill, exec::exec,
        processes::start, processes::list, processes::get, processes::output, processes::stdin,
        processes::signal, processes::wait, processes::remove,
        session::sign_in, session::status, session::sign_out,
    ),
    components(schemas(
        crate::model::Agent, crate::model::AgentState, types::CreateAgent, types::UpdateAgent,
        crate::config::PresetInfo, crate::model::SetupStatus, crate::model::SetupState,
        types::Health, types::Limits, files::DirEntry, types::ExecBody, types::ExecResult, types::ErrorBody,
        types::ErrorDetail, session::SignIn, session::SessionStatus, terminals::TerminalSession,
        crate::egress::EgressRules, crate::egress::EgressEvent,
        types::process::StartProcess, types::process::Process, types::process::ProcessState,
        types::process::SignalBody, types::process::StdinWritten, types::process::ProcessEvent,
        types::process::Gap,
    )),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// What the document says that depends on the running server rather than on its config.
#[derive(Debug, Clone)]
pub struct Facts {
    /// The driver can limit an agent's disk (`maxDiskMb` in `/limits` is not null): `diskMb`
    /// is accepted.
    pub disk_limits: bool,
    /// `preset` on create lists this server's presets as its only values. `agenthold openapi`
    /// leaves it an open name, so that client types generated from it (web/src/api.gen.ts) do
    /// not depend on one server's presets.
    pub preset_names: bool,
    /// The runtimes agents may ask for, when known (a running server's engine decides the
    /// default list): `runtime`'s enum. `None` leaves it any name.
    pub runtimes: Option<Vec<String>>,
}

/// The operations that cannot fail inside the server (no store, no sandbox): no `500`.
const NEVER_INTERNAL: &[&str] = &["getHealth", "getLimits", "events", "getSession"];

/// A file path as sandboxd accepts it: components of 1 to 255 characters (bytes, in fact) without
/// NUL, none of them `..` (with `maxLength` 4096 beside it).
const PATH_PATTERN: &str = r"^/*(?:(?!\.\.(?:/|(?![\s\S])))[^/\x00]{1,255}(?:/+|(?![\s\S])))*$";

/// The same, on the fake driver, which serves nothing outside the home: an absolute path is
/// under `/home/agent`.
const FAKE_PATH_PATTERN: &str = concat!(
    r"^(?:/+(?:\./+)*home/+(?:\./+)*agent(?=/|(?![\s\S]))/*|(?!/))",
    r"(?:(?!\.\.(?:/|(?![\s\S])))[^/\x00]{1,255}(?:/+|(?![\s\S])))*$",
);

/// An egress rule as the API reads it (see `crate::egress` and `types::rules_object`): ASCII;
/// after trimming white space, an IP address, a CIDR network, or `*`, `*.NAME`, `NAME`, an IPv4 address or network, or
/// one in brackets, each with an optional `:PORT`; an IPv6 one takes a port only in brackets. The
/// addresses are read as `std` reads them, the networks as `ipnet` does (which allows leading
/// zeros in IPv4 octets, and `::` for no group at all).
pub fn egress_rule_pattern() -> String {
    // ASCII only: the API refuses other white space in a rule (see `types::rules_object`).
    const WS: &str = r"[\t\n\x0b\x0c\r ]";
    const PORT: &str = r"\+?0*(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])";
    const LABEL: &str = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?";
    const H: &str = "[0-9A-Fa-f]{1,4}";
    const P4: &str = "(?:3[0-2]|[0-2]?[0-9])";
    const P6: &str = "(?:12[0-8]|1[01][0-9]|0?[0-9]?[0-9])";
    // At most 253 characters without the trailing dot.
    let name = format!(
        r"(?![A-Za-z0-9_.-]{{255}})(?![A-Za-z0-9_.-]{{253}}[A-Za-z0-9_-]){LABEL}(?:\.{LABEL})*\.?"
    );
    let v4 = |octet: &str| format!(r"{octet}(?:\.{octet}){{3}}");
    // `std` refuses leading zeros; `ipnet` takes up to three digits.
    let v4s = v4("(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])");
    let v4n = v4("(?:25[0-5]|2[0-4][0-9]|[01]?[0-9]?[0-9])");
    // `zero_min`: how many groups `::` stands for at least (1 for `std`, 0 for `ipnet`).
    let v6 = |v4: &str, zero_min: usize| {
        let total = 8 - zero_min;
        let mut alts = vec![
            format!("(?:{H}:){{7}}{H}"),
            format!("(?:{H}:){{6}}{v4}"),
            format!("(?:{H}:){{1,{}}}:", total.min(7)),
        ];
        for t in 1..total {
            alts.push(format!("(?:{H}:){{1,{}}}(?::{H}){{{t}}}", total - t));
        }
        alts.push(format!("::(?:{H}(?::{H}){{0,{}}})?", total - 1));
        for t in 0..total - 2 {
            alts.push(format!(
                "(?:{H}:){{1,{}}}:(?:{H}:){{{t}}}{v4}",
                total - 2 - t
            ));
        }
        alts.push(format!("::(?:{H}:){{0,{}}}{v4}", total - 2));
        format!("(?:{})", alts.join("|"))
    };
    let (v6s, v6n) = (v6(&v4s, 1), v6(&v4n, 0));
    let body = [
        v4s.clone(),
        v6s.clone(),
        format!("{v4n}/{P4}"),
        format!("{v6n}/{P6}"),
        format!(r"(?:\*|\*\.{name}|{name}|{v4n}/{P4}|\[(?:{v4n}/{P4}|{v4s})\])(?::{PORT})?"),
        format!(r"\[(?:{v6n}/{P6}|{v6s})\]:{PORT}"),
    ]
    .join("|");
    format!("^{WS}*(?:{body}){WS}*$")
}

/// The document this server serves: the generated one, completed (see the module's comment).
pub fn document(config: &Config, facts: Facts) -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_else(|_| json!({}));
    shared_responses(&mut doc);
    let list_presets = facts.preset_names;
    configured_limits(&mut doc, config, facts);
    egress_rules(&mut doc);
    agent_env(&mut doc);
    if list_presets {
        preset_names(&mut doc, config);
    }
    error_codes(&mut doc);
    exec_stream(&mut doc);
    agent_links(&mut doc);
    doc
}

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
    })
}

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

/// Every operation, mutably, with its path.
fn operations(doc: &mut Value) -> Vec<(String, &mut Map<String, Value>)> {
    let mut out = Vec::new();
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for (path, item) in paths.iter_mut() {
            if let Some(item) = item.as_object_mut() {
                for (method, op) in item.iter_mut() {
                    if METHODS.contains(&method.as_str()) {
                        if let Some(op) = op.as_object_mut() {
                            out.push((path.clone(), op));
                        }
                    }
                }
            }
        }
    }
    out
}

/// The answers every route can give, added where an operation does not say them itself.
fn shared_responses(doc: &mut Value) {
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

fn property<'a>(doc: &'a mut Value, schema: &str, prop: &str) -> Option<&'a mut Value> {
    doc.pointer_mut(&format!("/components/schemas/{schema}/properties/{prop}"))
}

fn query_parameter<'a>(
    doc: &'a mut Value,
    path: &str,
    method: &str,
    name: &str,
) -> Option<&'a mut Value> {
    doc.get_mut("paths")?
        .get_mut(path)?
        .get_mut(method)?
        .get_mut("parameters")?
        .as_array_mut()?
        .iter_mut()
        .find(|p| p["name"] == name && p["in"] == "query")?
        .get_mut("schema")
}

fn set(target: Option<&mut Value>, key: &str, value: Value) {
    if let Some(Value::Object(o)) = target {
        o.insert(key.to_string(), value);
    }
}

/// The configured limits as the schemas' bounds.
fn configured_limits(doc: &mut Value, config: &Config, facts: Facts) {
    let sb = &config.sandbox;
    for schema in ["CreateAgent", "UpdateAgent"] {
        set(property(doc, schema, "cpus"), "maximum", json!(sb.max_cpus));
        set(
            property(doc, schema, "memoryMb"),
            "maximum",
            json!(sb.max_memory_mb),
        );
        if facts.disk_limits {
            set(
                property(doc, schema, "diskMb"),
                "maximum",
                json!(sb.max_disk_mb),
            );
        } else if let Some(Value::Object(props)) =
            doc.pointer_mut(&format!("/components/schemas/{schema}/properties"))
        {
            // This server cannot limit a home: any `diskMb` is refused.
            props.remove("diskMb");
        }
        if let Some(runtimes) = &facts.runtimes {
            set(property(doc, schema, "runtime"), "enum", json!(runtimes));
        }
    }
    let max_timeout = u64::try_from(config.server.exec_max_timeout.as_millis()).unwrap_or(u64::MAX);
    set(
        property(doc, "ExecBody", "timeoutMs"),
        "maximum",
        json!(max_timeout),
    );
    set(
        query_parameter(
            doc,
            "/api/v1/agents/{id}/processes/{pid}/wait",
            "get",
            "timeoutMs",
        ),
        "maximum",
        json!(max_timeout),
    );
    let pattern = if sb.driver == DriverKind::Fake {
        FAKE_PATH_PATTERN
    } else {
        PATH_PATTERN
    };
    for (op, method) in [
        ("list", "get"),
        ("read", "get"),
        ("write", "put"),
        ("mkdir", "post"),
        ("remove", "delete"),
    ] {
        set(
            query_parameter(
                doc,
                &format!("/api/v1/agents/{{id}}/fs/{op}"),
                method,
                "path",
            ),
            "pattern",
            json!(pattern),
        );
    }
}

/// `env`'s rules (`agent_env::check`) as a schema: names, their count, and values of at most
/// 4096 characters without NUL.
fn agent_env(doc: &mut Value) {
    let env = json!({
        "maxProperties": crate::agent_env::MAX_VARS,
        "propertyNames": {
            "pattern": crate::agent_env::NAME_PATTERN,
        },
        "additionalProperties": {
            "type": "string",
            "maxLength": crate::agent_env::MAX_VALUE,
            "pattern": "^[^\\u0000]*$",
        },
    });
    for schema in ["CreateAgent", "UpdateAgent"] {
        // Merged into the generated schema, which keeps its description and its null.
        if let (Some(Value::Object(slot)), Value::Object(rules)) =
            (property(doc, schema, "env"), &env)
        {
            slot.extend(rules.clone());
        }
    }
}

/// The configured presets are the only names `preset` takes; with none, it is not accepted.
fn preset_names(doc: &mut Value, config: &Config) {
    if config.presets.is_empty() {
        if let Some(Value::Object(props)) =
            doc.pointer_mut("/components/schemas/CreateAgent/properties")
        {
            props.remove("preset");
        }
        return;
    }
    let names: Vec<&str> = config.presets.keys().map(String::as_str).collect();
    if let Some(slot) = property(doc, "CreateAgent", "preset") {
        *slot = json!({"type": ["string", "null"], "enum": names.iter().map(|n| json!(n)).chain([Value::Null]).collect::<Vec<_>>()});
    }
}

fn egress_rules(doc: &mut Value) {
    let rule = json!({
        "type": "string",
        // `egress::rules::MAX_RULE_LEN`: a host name, `*.` and `:65535`.
        "maxLength": 261,
        "pattern": egress_rule_pattern(),
    });
    for list in ["allow", "deny"] {
        set(
            doc.pointer_mut(&format!(
                "/components/schemas/EgressRules/properties/{list}"
            )),
            "items",
            rule.clone(),
        );
    }
}

/// An exec answers NDJSON when asked for it with `Accept: application/x-ndjson`.
fn exec_stream(doc: &mut Value) {
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

fn error_codes(doc: &mut Value) {
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    set(property(doc, "ErrorDetail", "code"), "enum", json!(codes));
}

/// Links from a created agent to every operation that takes its id, so that a client (or a
/// fuzzer) can follow the `id` of `201` to them.
fn agent_links(doc: &mut Value) {
    let mut links = Map::new();
    for (path, op) in operations(doc) {
        if !path.contains("{id}") {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn disk_mb(doc: &Value, schema: &str) -> Option<Value> {
        doc.pointer(&format!("/components/schemas/{schema}/properties/diskMb"))
            .cloned()
    }

    #[test]
    fn a_server_that_cannot_limit_disks_takes_no_disk_mb() {
        let config = Config::default();
        let doc = document(
            &config,
            Facts {
                disk_limits: true,
                preset_names: true,
                runtimes: None,
            },
        );
        for schema in ["CreateAgent", "UpdateAgent"] {
            let d = disk_mb(&doc, schema).unwrap_or_default();
            assert_eq!(d["maximum"], json!(config.sandbox.max_disk_mb), "{schema}");
        }
        let doc = document(
            &config,
            Facts {
                disk_limits: false,
                preset_names: true,
                runtimes: None,
            },
        );
        for schema in ["CreateAgent", "UpdateAgent"] {
            assert_eq!(disk_mb(&doc, schema), None, "{schema}");
            assert_eq!(
                doc.pointer(&format!(
                    "/components/schemas/{schema}/additionalProperties"
                )),
                Some(&json!(false)),
                "{schema}"
            );
        }
    }

    #[test]
    fn only_the_fake_driver_confines_paths_to_the_home() {
        let pattern = |driver| {
            let mut config = Config::default();
            config.sandbox.driver = driver;
            let doc = document(
                &config,
                Facts {
                    disk_limits: true,
                    preset_names: true,
                    runtimes: None,
                },
            );
            doc.pointer("/paths/~1api~1v1~1agents~1{id}~1fs~1read/get/parameters/1/schema/pattern")
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        assert_eq!(
            pattern(DriverKind::Fake).as_deref(),
            Some(FAKE_PATH_PATTERN)
        );
        assert_eq!(pattern(DriverKind::Docker).as_deref(), Some(PATH_PATTERN));
    }
}
