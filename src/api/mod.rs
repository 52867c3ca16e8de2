//! The HTTP API v1 (see docs/api.md), the web UI and the OpenAPI description, on `server.listen`.

pub mod access;
pub mod admin;
pub mod agent_sessions;
pub mod agent_state;
pub mod agents;
pub mod approvals;
pub mod audit;
pub mod auth;
pub mod code;
mod command_gate;
pub mod download;
pub mod error;
pub mod events;
pub mod exec;
pub mod files;
pub mod members;
pub mod metrics;
pub mod openapi;
pub mod origin;
pub mod output_lines;
pub mod previews;
pub mod processes;
pub mod secrets;
pub mod session;
pub mod terminal;
pub mod terminals;
pub mod tokens;
pub mod types;
pub mod users;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderValue};
use axum::routing::{delete, get, patch, post, put};
use axum::{Json, Router};

use tower_http::set_header::SetResponseHeaderLayer;

use crate::config::reload::Reloader;
use crate::config::Config;
use crate::lifecycle::Lifecycle;
use crate::sessions::Sessions;
pub use openapi::ApiDoc;

/// Largest JSON body (an exec's stdin is the big one). File uploads stream and have their own
/// limit, `server.max_file_mb`.
const MAX_JSON_BODY: usize = 16 * 1024 * 1024;

#[derive(Clone)]
pub struct AppState {
    pub lc: Arc<Lifecycle>,
    pub auth: Arc<auth::Auth>,
    pub reloader: Arc<Reloader>,
    pub sessions: Arc<Sessions>,
    pub previews: Arc<crate::previews::Previews>,
    pub secrets: Arc<crate::secrets::Secrets>,
    pub audit: Arc<crate::audit::Audit>,
}

impl AppState {
    /// The config in force now (a reload may replace it between two requests).
    pub fn config(&self) -> Arc<Config> {
        self.lc.config()
    }
}

/// The OpenAPI document, as this server stands (see [`openapi::document`]).
async fn openapi(State(st): State<AppState>) -> Json<serde_json::Value> {
    let facts = openapi::Facts {
        disk_limits: st.lc.disk_limits_unavailable().is_none(),
        preset_names: true,
        runtimes: Some(st.lc.runtimes().allowed.clone()),
    };
    Json(openapi::document(&st.config(), facts))
}

pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/health", get(agents::health))
        .route("/openapi.json", get(openapi))
        .route("/limits", get(agents::limits))
        .route("/presets", get(agents::presets))
        .route("/pool", get(agents::pool))
        .route("/admin/reload", post(admin::reload))
        .route(
            "/session",
            post(session::sign_in)
                .get(session::status)
                .delete(session::sign_out),
        )
        .route("/me", get(users::me))
        .route("/secrets", get(secrets::list))
        .route("/secrets/{name}", put(secrets::put).delete(secrets::delete))
        .route("/users", get(users::list).post(users::create))
        .route("/users/{id}", patch(users::update).delete(users::delete))
        .route("/tokens", get(tokens::list).post(tokens::create))
        .route("/tokens/{id}", delete(tokens::revoke))
        .route("/audit", get(audit::list))
        .route("/events", get(events::events))
        .route("/agents", get(agents::list).post(agents::create))
        .route(
            "/agents/{id}",
            get(agents::get)
                .patch(agents::update)
                .delete(agents::destroy),
        )
        .route("/agents/{id}/start", post(agents::start))
        .route("/agents/{id}/stop", post(agents::stop))
        .route("/agents/{id}/pause", post(agents::pause))
        .route("/agents/{id}/rebuild", post(agents::rebuild))
        .route("/agents/{id}/setup", post(agents::rerun_setup))
        .route("/agents/{id}/keep-alive", post(agents::keep_alive))
        .route("/agents/{id}/egress/log", get(agents::egress_log))
        .route(
            "/agents/{id}/members",
            get(members::list).post(members::add),
        )
        .route("/agents/{id}/members/{user}", delete(members::remove))
        .route(
            "/agents/{id}/access-token",
            post(members::rotate_access_token),
        )
        .route("/agents/{id}/join", post(members::join))
        .route("/agents/{id}/exec", post(exec::exec))
        .route("/agents/{id}/code", post(code::run))
        .route(
            "/agents/{id}/code/contexts",
            get(code::list_contexts).post(code::create_context),
        )
        .route(
            "/agents/{id}/code/contexts/{cid}",
            delete(code::remove_context),
        )
        .route(
            "/agents/{id}/code/contexts/{cid}/restart",
            post(code::restart_context),
        )
        .route(
            "/agents/{id}/processes",
            get(processes::list).post(processes::start),
        )
        .route(
            "/agents/{id}/processes/{pid}",
            get(processes::get).delete(processes::remove),
        )
        .route(
            "/agents/{id}/processes/{pid}/output",
            get(processes::output),
        )
        .route("/agents/{id}/processes/{pid}/stdin", post(processes::stdin))
        .route(
            "/agents/{id}/processes/{pid}/signal",
            post(processes::signal),
        )
        .route("/agents/{id}/processes/{pid}/wait", get(processes::wait))
        .route(
            "/agents/{id}/sessions",
            get(agent_sessions::list).post(agent_sessions::create),
        )
        .route(
            "/agents/{id}/sessions/{sid}",
            get(agent_sessions::get)
                .patch(agent_sessions::update)
                .delete(agent_sessions::delete),
        )
        .route(
            "/agents/{id}/sessions/{sid}/prompt",
            post(agent_sessions::prompt),
        )
        .route(
            "/agents/{id}/sessions/{sid}/cancel",
            post(agent_sessions::cancel),
        )
        .route(
            "/agents/{id}/sessions/{sid}/events",
            get(agent_sessions::events),
        )
        .route("/agents/{id}/ports", get(previews::ports))
        .route(
            "/agents/{id}/previews",
            get(previews::list).post(previews::create),
        )
        .route("/agents/{id}/previews/{pid}", delete(previews::delete))
        .route("/previews/{pid}/open", get(previews::open))
        .route("/approvals", get(approvals::list))
        .route(
            "/approvals/{aid}",
            get(approvals::get).post(approvals::answer),
        )
        .route("/agents/{id}/terminal", get(terminal::terminal))
        .route("/agents/{id}/terminals", get(terminals::list))
        .route("/agents/{id}/terminals/{sid}", delete(terminals::kill))
        .route("/agents/{id}/fs/list", get(files::list))
        .route("/agents/{id}/fs/read", get(files::read))
        .route("/agents/{id}/fs/write", put(files::write))
        .route("/agents/{id}/fs/mkdir", post(files::mkdir))
        .route("/agents/{id}/fs/remove", delete(files::remove))
        .route("/agents/{id}/fs/rename", post(files::rename))
        .route("/agents/{id}/fs/stat", get(files::stat))
        .route("/agents/{id}/fs/exists", get(files::exists))
        .route("/agents/{id}/fs/watch", get(files::watch))
        // Streamed part by part, each file bounded by `server.max_file_mb`: not the JSON limit.
        .route(
            "/agents/{id}/fs/write-files",
            post(files::write_files).layer(DefaultBodyLimit::disable()),
        )
        // After routing only: it needs the route's `{id}`. Inside `authorize`, so that a caller
        // refused the agent learns nothing of its state.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            agent_state::add,
        ))
        // After routing, so that it knows which route it guards; the fallback is no route.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            access::authorize,
        ))
        .fallback(|| async { error::ApiError::not_found("no such API route") })
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        // The API serves a sandbox's bytes (files, process output) on the UI's origin: a
        // browser must never guess that they are a page and run them there.
        .layer(SetResponseHeaderLayer::overriding(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ));
    Router::new()
        .nest("/api/v1", api)
        .route(
            crate::metrics::PATH,
            get(metrics::metrics).route_layer(axum::middleware::from_fn_with_state(
                state.clone(),
                access::authorize,
            )),
        )
        .merge(crate::web::router())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::guard,
        ))
        .with_state(state)
}
