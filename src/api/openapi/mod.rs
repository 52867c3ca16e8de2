//! The OpenAPI document served at `/api/v1/openapi.json` (and printed by `agenthold openapi`):
//! generated from the handlers' annotations and the body types, then completed for the server
//! that serves it. What every route shares (`401`, `403`, `500`, the JSON body's `400` and
//! `413`) is added here once, the configured limits (`sandbox.max_cpus`, `max_memory_mb`,
//! `max_disk_mb`, `server.exec_max_timeout`) become the schemas' maxima, and links lead from a
//! created agent to the routes that take its id. The document is the contract: a request it
//! allows is one the server accepts, and every status the server answers is in it.
//!
//! The completion is in [`responses`] (the answers) and [`schemas`] (the request bodies'
//! bounds), the hand-written patterns in [`patterns`].

mod patterns;
mod responses;
mod schemas;

use serde_json::{json, Map, Value};
use utoipa::OpenApi;

use super::{
    admin, agent_sessions, agents, approvals, audit, code, events, exec, files, members, previews,
    processes, secrets, session, terminal, terminals, tokens, types, users,
};
use crate::config::Config;

#[derive(OpenApi)]
#[openapi(
    info(title = "agenthold", description = "Self-hosted sandboxes for AI agents: HTTP API v1. \
        Every route but `/api/v1/health` and signing in needs `Authorization: Bearer <token>` \
        (the admin token or an API token) or the web UI's session cookie; a credential without \
        the scope a route needs gets `403`, and an agent a token is not limited to does not \
        exist for it (`404`). A private agent exists only for its owner, its members and admins \
        (`404` for everyone else); see the agent routes' `access`, `members` and `join`. A request from the sandbox network is refused with `403` \
        whatever it carries. Errors are `{\"error\": {\"code\", \"message\", \"field\"?}}`. \
        The limits in this document are this server's configuration."),
    paths(
        agents::health, agents::limits, agents::presets, agents::pool, agents::list, agents::create, agents::get, agents::update, agents::destroy,
        agents::start, agents::stop, agents::pause, agents::rebuild, agents::rerun_setup, agents::keep_alive, agents::egress_log, events::events,
        files::list, files::read, files::write, files::mkdir, files::remove, files::rename,
        files::stat, files::exists, files::write_files, files::watch,
        terminal::terminal, terminals::list, terminals::kill, exec::exec,
        code::run, code::create_context, code::list_contexts, code::restart_context, code::remove_context,
        processes::start, processes::list, processes::get, processes::output, processes::stdin,
        processes::signal, processes::wait, processes::remove,
        session::sign_in, session::status, session::sign_out, admin::reload,
        agent_sessions::create, agent_sessions::list, agent_sessions::get, agent_sessions::update,
        agent_sessions::delete, agent_sessions::prompt, agent_sessions::cancel, agent_sessions::events,
        approvals::list, approvals::get, approvals::answer,
        previews::ports, previews::create, previews::list, previews::delete, previews::open,
        users::list, users::create, users::update, users::delete, users::me,
        tokens::list, tokens::create, tokens::revoke, audit::list,
        secrets::list, secrets::put, secrets::delete,
        members::list, members::add, members::remove, members::rotate_access_token, members::join,
    ),
    components(schemas(
        types::Agent, types::AgentState, types::CreateAgent, types::UpdateAgent, types::KeepAlive, types::ExpiringEvent,
        types::PresetInfo, types::PoolInfo, types::SetupStatus, types::SetupState,
        types::Health, types::Limits, types::HarnessInfo, types::DirEntry, types::FileInfo, types::PathExists, types::RenameBody,
        types::FileEvent, types::FileEventKind, types::FileWritten, types::FilesWritten, types::ExecBody, types::ExecResult, types::RunUser, types::ErrorBody,
        types::RunCode, types::Execution, types::CodeError, types::CodeContext,
        types::ErrorDetail, types::SignIn, types::TokenSignIn, types::PasswordSignIn, types::SessionStatus, types::TerminalSession,
        types::EgressRules, types::EgressChange, types::EgressEvent, types::EgressDenied, types::EgressLogEntry,
        types::process::StartProcess, types::process::Process, types::process::ProcessState,
        types::process::SignalBody, types::process::StdinWritten, types::process::ProcessEvent,
        types::process::Gap, types::ConfigReload,
        types::conversation::CreateSession, types::conversation::UpdateSession,
        types::conversation::Session, types::conversation::SessionState, types::conversation::Restore,
        types::conversation::PromptBody, types::conversation::PromptAccepted,
        types::conversation::TranscriptEvent, types::conversation::SessionEventKind,
        types::conversation::TurnEvent, types::conversation::TurnState, types::conversation::Notice,
        types::conversation::NoticeKind, types::conversation::Approval, types::conversation::ApprovalKind,
        types::conversation::ApprovalState, types::conversation::ApprovalOutcome,
        types::conversation::ApprovalOption, types::conversation::AnswerApproval,
        types::conversation::PermissionResolved,
        types::ListeningPort, types::CreatePreview, types::Preview, types::PreviewAccess,
        types::User, types::Role, types::Scope, types::CreateUser, types::UpdateUser,
        types::Token, types::CreateToken, types::CreatedToken, types::Me,
        types::PutSecret, types::Secret,
        types::AuditEntry, types::AuditAction,
        types::AgentOwner, types::AgentAccess, types::MemberRole, types::AgentMember, types::AddMember,
        types::JoinAgent, types::AccessToken,
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

/// The document this server serves: the generated one, completed (see the module's comment).
pub fn document(config: &Config, facts: Facts) -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_else(|_| json!({}));
    responses::shared_responses(&mut doc);
    let list_presets = facts.preset_names;
    schemas::configured_limits(&mut doc, config, facts);
    schemas::egress_rules(&mut doc);
    schemas::secrets(&mut doc);
    schemas::audit_filters(&mut doc);
    schemas::agent_env(&mut doc);
    schemas::agent_secrets(&mut doc);
    schemas::agent_labels(&mut doc);
    schemas::sessions(&mut doc, config);
    // An empty body writes an empty file.
    set(
        doc.pointer_mut("/paths/~1api~1v1~1agents~1{id}~1fs~1write/put/requestBody"),
        "required",
        Value::Bool(false),
    );
    // A multipart form of files, each part's name its path: an object of binaries, one at least.
    set(
        doc.pointer_mut(
            "/paths/~1api~1v1~1agents~1{id}~1fs~1write-files/post/requestBody/content/multipart~1form-data",
        ),
        "schema",
        json!({
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": patterns::PART_NAME_PATTERN},
            "additionalProperties": {"type": "string", "format": "binary"}
        }),
    );
    if list_presets {
        schemas::preset_names(&mut doc, config);
    }
    responses::error_codes(&mut doc);
    responses::agent_state_header(&mut doc);
    responses::exec_stream(&mut doc);
    responses::code_stream(&mut doc);
    responses::agent_links(&mut doc);
    doc
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

#[cfg(test)]
mod tests {
    use super::patterns::{FAKE_PATH_PATTERN, PATH_PATTERN};
    use super::*;
    use crate::config::DriverKind;

    /// The document for `config`, on a driver that can limit disks when `disk_limits`.
    fn doc(config: &Config, disk_limits: bool) -> Value {
        document(
            config,
            Facts {
                disk_limits,
                preset_names: true,
                runtimes: None,
            },
        )
    }

    fn disk_mb(doc: &Value, schema: &str) -> Option<Value> {
        doc.pointer(&format!("/components/schemas/{schema}/properties/diskMb"))
            .cloned()
    }

    #[test]
    fn a_server_that_cannot_limit_disks_takes_no_disk_mb() {
        let config = Config::default();
        let doc = doc(&config, true);
        for schema in ["CreateAgent", "UpdateAgent"] {
            let d = disk_mb(&doc, schema).unwrap_or_default();
            assert_eq!(d["maximum"], json!(config.sandbox.max_disk_mb), "{schema}");
        }
        let doc = self::doc(&config, false);
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
    fn a_part_name_is_what_a_header_line_can_carry() {
        let doc = doc(&Config::default(), true);
        let names = doc.pointer(
            "/paths/~1api~1v1~1agents~1{id}~1fs~1write-files/post/requestBody/content/multipart~1form-data/schema/propertyNames/pattern",
        );
        assert_eq!(names, Some(&json!(r"^[^\x00-\x08\x0a-\x1f\x7f]*$")));
    }

    #[test]
    fn only_the_fake_driver_confines_paths_to_the_home() {
        let pattern = |driver| {
            let mut config = Config::default();
            config.sandbox.driver = driver;
            doc(&config, true)
                .pointer("/paths/~1api~1v1~1agents~1{id}~1fs~1read/get/parameters/1/schema/pattern")
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        assert_eq!(
            pattern(DriverKind::Fake).as_deref(),
            Some(FAKE_PATH_PATTERN)
        );
        assert_eq!(pattern(DriverKind::Docker).as_deref(), Some(PATH_PATTERN));
    }

    /// The bodies' schema attributes restate the rules of an agent's settings as numbers; they
    /// must stay the rules' own.
    #[test]
    fn the_bodies_bounds_are_the_agent_rules() {
        use crate::agents::spec::{
            MAX_IDLE_MINUTES, MAX_IMAGE, MAX_NAME, MIN_DISK_MB, MIN_MEMORY_MB,
        };
        let doc = doc(&Config::default(), true);
        for schema in ["CreateAgent", "UpdateAgent"] {
            let bound = |prop: &str, key: &str| {
                doc.pointer(&format!(
                    "/components/schemas/{schema}/properties/{prop}/{key}"
                ))
                .and_then(Value::as_u64)
            };
            assert_eq!(
                bound("name", "maxLength"),
                Some(MAX_NAME as u64),
                "{schema}"
            );
            assert_eq!(
                bound("image", "maxLength"),
                Some(MAX_IMAGE as u64),
                "{schema}"
            );
            assert_eq!(
                bound("memoryMb", "minimum"),
                Some(MIN_MEMORY_MB),
                "{schema}"
            );
            assert_eq!(bound("diskMb", "minimum"), Some(MIN_DISK_MB), "{schema}");
            assert_eq!(
                bound("idleMinutes", "maximum"),
                Some(u64::from(MAX_IDLE_MINUTES)),
                "{schema}"
            );
            assert_eq!(
                bound("deepSleepMinutes", "maximum"),
                Some(u64::from(MAX_IDLE_MINUTES)),
                "{schema}"
            );
        }
        // One rule for an `env`'s names, an agent's or one command's.
        for schema in ["CreateAgent", "UpdateAgent", "ExecBody", "StartProcess"] {
            let pattern = doc.pointer(&format!(
                "/components/schemas/{schema}/properties/env/propertyNames/pattern"
            ));
            assert_eq!(
                pattern.and_then(Value::as_str),
                Some(crate::agents::env::NAME_PATTERN),
                "{schema}"
            );
        }
    }
}
