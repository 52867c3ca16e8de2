//! The Jupyter wire format over ZeroMQ: a message's frames (`<IDS|MSG>`, the HMAC-SHA256 of
//! header, parent header, metadata and content, then those four as JSON) to and from
//! jupyter-protocol's typed messages.
//!
//! Written here rather than taken from nteract's `jupyter-zmq-client` because that crate turns
//! on ZeroMQ's TCP transport, whose name resolution links glibc's NSS calls into the static
//! sandboxd (see `check-static.sh`); the kernels are reached over IPC sockets instead.

use bytes::Bytes;
use hmac::{Hmac, Mac};
use jupyter_protocol::JupyterMessage;
use sha2::Sha256;
use zeromq::ZmqMessage;

const DELIMITER: &[u8] = b"<IDS|MSG>";

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("a kernel message without the <IDS|MSG> delimiter or its four parts")]
    Malformed,
    #[error("a kernel message whose signature does not match")]
    BadSignature,
    #[error("a kernel message that does not parse: {0}")]
    Parse(String),
}

/// Signs and checks messages with the kernel's key.
#[derive(Clone)]
pub struct Signer {
    mac: Hmac<Sha256>,
}

impl Signer {
    pub fn new(key: &str) -> Signer {
        // HMAC takes a key of any length: this cannot fail.
        let mac = <Hmac<Sha256> as Mac>::new_from_slice(key.as_bytes())
            .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
        Signer { mac }
    }

    fn mac_of(&self, parts: &[Bytes]) -> Hmac<Sha256> {
        let mut mac = self.mac.clone();
        for p in parts {
            mac.update(p);
        }
        mac
    }

    /// The frames of `msg`, signed, with `session` as its header's session.
    pub fn encode(&self, msg: &JupyterMessage, session: &str) -> Result<ZmqMessage, WireError> {
        let mut header = msg.header.clone();
        header.session = session.to_string();
        let json = |v: &dyn erased::Json| v.to_bytes().map_err(|e| WireError::Parse(e.to_string()));
        let parent = match &msg.parent_header {
            Some(p) => json(p)?,
            None => Bytes::from_static(b"{}"),
        };
        let parts = [
            json(&header)?,
            parent,
            json(&msg.metadata)?,
            json(&msg.content)?,
        ];
        let sig = hex::encode(self.mac_of(&parts).finalize().into_bytes());
        let mut frames = vec![Bytes::from_static(DELIMITER), Bytes::from(sig)];
        frames.extend(parts);
        ZmqMessage::try_from(frames).map_err(|_| WireError::Malformed)
    }

    /// The message in `frames`, once its signature checks out.
    pub fn decode(&self, frames: ZmqMessage) -> Result<JupyterMessage, WireError> {
        let frames = frames.into_vec();
        let at = frames
            .iter()
            .position(|f| &f[..] == DELIMITER)
            .ok_or(WireError::Malformed)?;
        let rest = &frames[at + 1..];
        if rest.len() < 5 {
            return Err(WireError::Malformed);
        }
        let sig = hex::decode(&rest[0]).map_err(|_| WireError::BadSignature)?;
        self.mac_of(&rest[1..5])
            .verify_slice(&sig)
            .map_err(|_| WireError::BadSignature)?;
        let part = |b: &Bytes| {
            serde_json::from_slice::<serde_json::Value>(b)
                .map_err(|e| WireError::Parse(e.to_string()))
        };
        let value = serde_json::json!({
            "header": part(&rest[1])?,
            "parent_header": part(&rest[2])?,
            "metadata": part(&rest[3])?,
            "content": part(&rest[4])?,
        });
        JupyterMessage::from_value(value).map_err(|e| WireError::Parse(e.to_string()))
    }
}

/// Serialising the four parts through one signature.
mod erased {
    pub trait Json {
        fn to_bytes(&self) -> serde_json::Result<bytes::Bytes>;
    }
    impl<T: serde::Serialize> Json for T {
        fn to_bytes(&self) -> serde_json::Result<bytes::Bytes> {
            serde_json::to_vec(self).map(bytes::Bytes::from)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jupyter_protocol::{ExecuteRequest, JupyterMessageContent};

    #[test]
    fn a_message_round_trips_and_a_forged_one_is_refused() {
        let signer = Signer::new("k3y");
        let msg = JupyterMessage::new(ExecuteRequest::new("1+1".into()), None);
        let frames = signer.encode(&msg, "s").unwrap();
        let back = signer.decode(frames.clone()).unwrap();
        assert!(
            matches!(back.content, JupyterMessageContent::ExecuteRequest(r) if r.code == "1+1")
        );
        assert_eq!(back.header.session, "s");
        assert!(matches!(
            Signer::new("other").decode(frames),
            Err(WireError::BadSignature)
        ));
        let short = ZmqMessage::try_from(vec![Bytes::from_static(DELIMITER)]).unwrap();
        assert!(matches!(signer.decode(short), Err(WireError::Malformed)));
    }
}
