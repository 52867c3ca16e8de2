//! What the server's administration routes answer: `POST /api/v1/admin/reload`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /api/v1/admin/reload`: what reading the config file again changed, by dotted key as
/// the file writes them. Both lists empty: the file says what the server runs on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigReload {
    /// Keys whose new values are in force now: new agents, requests and the egress proxy's
    /// decisions from now on follow them; running agents keep what they were made with.
    #[schema(example = json!(["presets.dev.image", "sandbox.egress.default.allow"]))]
    pub applied: Vec<String>,
    /// Keys the file changed that only a restart puts in force (listeners, `server.data_dir`,
    /// the driver and its settings, …); the server keeps their running values until then.
    #[schema(example = json!(["server.listen"]))]
    pub needs_restart: Vec<String>,
}
