//! The HTTP API v1 (see docs/api.md), the web UI and the OpenAPI description, on `server.listen`.

pub mod agents;
pub mod auth;
pub mod error;
pub mod events;
pub mod exec;
pub mod files;
pub mod metrics;
pub mod origin;
pub mod output_lines;
pub mod processes;
pub mod session;
pub mod terminal;
pub mod terminals;
pub mod types;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use utoipa::OpenApi;

use crate::config::Config;
use crate::lifecycle::Lifecycle;

/// Largest JSON body (an exec's stdin is the big one). File uploads stream and have their own
/// limit, `server.max_file_mb`.
const MAX_JSON_BODY: usize = 16 * 1024 * 1024;

#[derive(Clone)]
pub struct AppState {
    pub lc: Arc<Lifecycle>,
    pub auth: Arc<auth::Auth>,
    pub config: Arc<Config>,
}

#[derive(OpenApi)]
#[openapi(
    info(title = "agenthold", description = "Self-hosted sandboxes for AI agents: HTTP API v1"),
    paths(
        agents::health, agents::limits, agents::list, agents::create, agents::get, agents::update, agents::destroy,
        agents::start, agents::stop, agents::rebuild, events::events,
        files::list, files::read, files::write, files::mkdir, files::remove,
        terminal::terminal, terminals::list, terminals::kill, exec::exec,
        processes::start, processes::list, processes::get, processes::output, processes::stdin,
        processes::signal, processes::wait, processes::remove,
        session::sign_in, session::status, session::sign_out,
    ),
    components(schemas(
        crate::model::Agent, crate::model::AgentState, types::CreateAgent, types::UpdateAgent,
        types::Health, types::Limits, files::DirEntry, types::ExecBody, types::ExecResult, error::ErrorBody,
        error::ErrorDetail, session::SignIn, session::SessionStatus, terminals::TerminalSession,
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

async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/health", get(agents::health))
        .route("/openapi.json", get(openapi))
        .route("/limits", get(agents::limits))
        .route(
            "/session",
            post(session::sign_in)
                .get(session::status)
                .delete(session::sign_out),
        )
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
        .route("/agents/{id}/rebuild", post(agents::rebuild))
        .route("/agents/{id}/exec", post(exec::exec))
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
        .route("/agents/{id}/terminal", get(terminal::terminal))
        .route("/agents/{id}/terminals", get(terminals::list))
        .route("/agents/{id}/terminals/{sid}", delete(terminals::kill))
        .route("/agents/{id}/fs/list", get(files::list))
        .route("/agents/{id}/fs/read", get(files::read))
        .route("/agents/{id}/fs/write", put(files::write))
        .route("/agents/{id}/fs/mkdir", post(files::mkdir))
        .route("/agents/{id}/fs/remove", delete(files::remove))
        .fallback(|| async { error::ApiError::not_found("no such API route") })
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY));
    Router::new()
        .nest("/api/v1", api)
        .route(crate::metrics::PATH, get(metrics::metrics))
        .merge(crate::web::router())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::guard,
        ))
        .with_state(state)
}
