//! Secrets: `/api/v1/secrets`. A value goes in with a `PUT` and never comes out.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::egress::Rule;
use crate::model::secrets::SecretInfo;

/// `PUT /api/v1/secrets/{name}`: a new secret, or a new value and description for one.
#[derive(Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PutSecret {
    /// The value: 1 to 16384 bytes without control characters. Kept sealed; never shown again.
    #[schema(min_length = 1, max_length = 16384, example = "sk-ant-api03-…")]
    pub value: String,
    /// The destinations the value may be sent to, as egress rules (not `*`): 1 to 32.
    #[schema(value_type = Vec<String>, min_items = 1, max_items = 32, example = json!(["api.anthropic.com"]))]
    pub hosts: Vec<Rule>,
    /// The request header the value goes in; absent: `Authorization`.
    #[serde(default)]
    #[schema(example = "x-api-key")]
    pub header: Option<String>,
    /// The header's value, `{value}` (exactly once) standing for the secret; absent:
    /// `Bearer {value}`.
    #[serde(default)]
    #[schema(max_length = 256, example = "Bearer {value}")]
    pub format: Option<String>,
    /// Whether a placeholder in a form or JSON request body is replaced too (default false).
    #[serde(default)]
    pub in_body: bool,
}

/// Never the value: a request body may end up in a log line by accident.
impl std::fmt::Debug for PutSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PutSecret")
            .field("hosts", &self.hosts)
            .field("header", &self.header)
            .field("format", &self.format)
            .field("in_body", &self.in_body)
            .finish_non_exhaustive()
    }
}

/// A secret, as the API shows it: everything but its value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Secret {
    /// Also the env variable granted agents see it as (holding a placeholder).
    #[schema(example = "ANTHROPIC_API_KEY")]
    pub name: String,
    #[schema(value_type = Vec<String>, example = json!(["api.anthropic.com"]))]
    pub hosts: Vec<Rule>,
    #[schema(example = "x-api-key")]
    pub header: String,
    #[schema(example = "{value}")]
    pub format: String,
    pub in_body: bool,
    pub created_at: DateTime<Utc>,
    /// When the value or description last changed.
    pub updated_at: DateTime<Utc>,
}

impl From<SecretInfo> for Secret {
    fn from(s: SecretInfo) -> Secret {
        Secret {
            name: s.name,
            hosts: s.hosts,
            header: s.header,
            format: s.format,
            in_body: s.in_body,
            created_at: s.created_at,
            updated_at: s.updated_at,
        }
    }
}
