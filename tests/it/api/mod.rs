//! The agent API over real HTTP on the fake driver, by resource: auth, agents (validation of
//! hostile input, errors, updates), the web session and its origin rules, limits, events (SSE),
//! metrics, the OpenAPI document and the web UI.

mod agents;
mod auth;
mod events;
mod limits;
mod metrics;
mod openapi;
mod session;
mod web_ui;
