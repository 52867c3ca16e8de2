//! An image pull's progress as the API shows it: on an agent (`pull`) and in `pull` events.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::model;

/// Where a pull is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PullStatus {
    Pulling,
    Done,
    Failed,
}

impl From<model::PullStatus> for PullStatus {
    fn from(s: model::PullStatus) -> Self {
        match s {
            model::PullStatus::Pulling => PullStatus::Pulling,
            model::PullStatus::Done => PullStatus::Done,
            model::PullStatus::Failed => PullStatus::Failed,
        }
    }
}

/// How far an image pull has got. Byte counts cover the layers whose size the registry has
/// announced so far (Docker learns a layer's size when its download starts); a layer that was
/// already on the machine counts as done without bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PullProgress {
    /// The image reference being pulled (with the tag the pull uses).
    pub image: String,
    pub status: PullStatus,
    /// Layers downloaded and unpacked (or already present).
    pub layers_done: u32,
    pub layers_total: u32,
    pub bytes_done: u64,
    pub bytes_total: u64,
    /// An estimate for display, 0–100: mostly the share of the (estimated) bytes downloaded,
    /// the rest the share of layers unpacked. It never goes down during a pull and is 100
    /// only when the pull is done.
    pub percent: u8,
    /// Why the pull failed, with `status: failed`.
    pub error: Option<String>,
}

impl From<model::PullProgress> for PullProgress {
    fn from(p: model::PullProgress) -> Self {
        PullProgress {
            image: p.image,
            status: p.status.into(),
            layers_done: p.layers_done,
            layers_total: p.layers_total,
            bytes_done: p.bytes_done,
            bytes_total: p.bytes_total,
            percent: p.percent,
            error: p.error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_shape_is_camel_case() {
        let failed = model::PullProgress {
            image: "x:1".into(),
            status: model::PullStatus::Failed,
            layers_done: 0,
            layers_total: 0,
            bytes_done: 0,
            bytes_total: 0,
            percent: 0,
            error: Some("manifest unknown".into()),
        };
        assert_eq!(
            serde_json::to_value(PullProgress::from(failed)).unwrap(),
            serde_json::json!({"image": "x:1", "status": "failed", "layersDone": 0,
                "layersTotal": 0, "bytesDone": 0, "bytesTotal": 0, "percent": 0,
                "error": "manifest unknown"})
        );
    }
}
