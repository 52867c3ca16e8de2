//! Ports and previews: what listens in a sandbox (`GET …/ports`) and the URLs that open it
//! from a browser (`…/previews`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A TCP port something listens on inside the sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListeningPort {
    #[schema(minimum = 1, maximum = 65535, example = 5173)]
    pub port: u16,
    /// The address it listens on (`0.0.0.0`, `127.0.0.1`, `::`…). A preview reaches the
    /// loopback: a server listening on another address alone cannot be previewed.
    #[schema(example = "127.0.0.1")]
    pub address: String,
    /// The command name of the process that listens, when the sandbox lets it be seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "node")]
    pub process: Option<String>,
}

impl From<agenthold_proto::ListeningPort> for ListeningPort {
    fn from(p: agenthold_proto::ListeningPort) -> Self {
        ListeningPort {
            port: p.port,
            address: p.address,
            process: p.process,
        }
    }
}

/// Who may open a preview.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PreviewAccess {
    /// People signed in to the web UI (the first visit goes through the sign-in), and
    /// programs with the admin token as `Authorization: Bearer`.
    #[default]
    Private,
    /// Whoever has the preview's token: `?token=` once (a cookie for that preview's host
    /// then), or `Authorization: Bearer` for programs.
    Token,
    /// Anyone who can reach the preview listener.
    Public,
}

/// `POST /api/v1/agents/{id}/previews`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreatePreview {
    /// The port inside the sandbox (on its loopback).
    #[serde(deserialize_with = "super::whole::required")]
    #[schema(minimum = 1, maximum = 65535, example = 5173)]
    pub port: u16,
    /// `private` when absent.
    #[serde(default)]
    pub access: PreviewAccess,
    /// The preview stops working this long after its creation (1 to 525600, a year); absent,
    /// it lasts until it is deleted or its agent is destroyed.
    #[serde(
        default,
        deserialize_with = "super::whole::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(minimum = 1, maximum = 525600)]
    pub expires_in_minutes: Option<u32>,
}

/// A preview: a URL, on an origin of its own, that opens a port of the agent's sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Preview {
    #[schema(example = "pk3m9x0b2c4d")]
    pub id: String,
    #[schema(minimum = 1, maximum = 65535, example = 5173)]
    pub port: u16,
    pub access: PreviewAccess,
    /// `{scheme}://{port}-{agent name}.{domain}[:{port}]/`.
    #[schema(example = "http://5173-builder.localhost:8081/")]
    pub url: String,
    /// A `token` preview's token: in the answer to its creation only (the server keeps its
    /// hash). Open the preview with `url?token=…` or `Authorization: Bearer …`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    pub created_at: String,
    /// When it stops working; absent when it lasts until deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}
