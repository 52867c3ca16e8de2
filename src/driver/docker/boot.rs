//! boot.json, what a sandbox is told before it starts (its agent, the server's tunnel address,
//! a fresh token), and boot tokens staged in a stopped container ahead of its next start.

use agenthold_proto::boot::BootConfig;
use bollard::models::ContainerStateStatusEnum;
use bollard::query_parameters::UploadToContainerOptionsBuilder;

use super::subnet::AgentNet;
use super::{files, log_step, DockerDriver, DockerError};
use crate::driver::SandboxSpec;

impl DockerDriver {
    /// Writes boot.json (the agent, the server's tunnel and proxy addresses on `net`,
    /// `token`) into the container.
    pub(super) async fn upload_boot(
        &self,
        id: &str,
        net: &AgentNet,
        token: &str,
    ) -> Result<(), DockerError> {
        let name = self.names.container(id);
        let t = std::time::Instant::now();
        let boot = BootConfig {
            agent_id: id.to_string(),
            token: token.to_string(),
            tunnel_url: self.tunnel_url(net),
            env: self.boot_env(net),
            ca_certificates: self.ca_certificates.clone(),
        };
        let tar = files::boot_tar(&boot)
            .map_err(|e| DockerError::Other(format!("packing boot.json: {e}")))?;
        self.docker
            .upload_to_container(
                &name,
                Some(UploadToContainerOptionsBuilder::default().path("/").build()),
                bollard::body_full(tar.into()),
            )
            .await
            .map_err(DockerError::api(format!("writing boot.json into {name}")))?;
        log_step(id, "boot.json", t);
        Ok(())
    }

    pub(super) fn tunnel_url(&self, net: &AgentNet) -> String {
        format!(
            "ws://{}:{}{}",
            self.server_on(net),
            self.tunnel_port,
            agenthold_proto::boot::TUNNEL_PATH
        )
    }

    /// The variables every program in the sandbox starts with: the proxy's, in both spellings
    /// since tools read one or the other, and with extra authorities the bundle that has them.
    fn boot_env(&self, net: &AgentNet) -> std::collections::BTreeMap<String, String> {
        let url = format!("http://{}:{}", self.server_on(net), self.egress_port);
        let local = "localhost,127.0.0.1,::1".to_string();
        let bundle: &[&str] = if self.ca_certificates.is_some() {
            agenthold_proto::boot::CA_BUNDLE_ENV
        } else {
            &[]
        };
        ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"]
            .into_iter()
            .map(|k| (k.to_string(), url.clone()))
            .chain(["NO_PROXY", "no_proxy"].map(|k| (k.to_string(), local.clone())))
            .chain(bundle.iter().map(|k| {
                (
                    k.to_string(),
                    agenthold_proto::boot::CA_BUNDLE_PATH.to_string(),
                )
            }))
            .collect()
    }

    /// Whether `token` was staged in `container` (and is no longer: a staged token serves one
    /// start).
    pub(super) fn take_staged(&self, id: &str, container: &str, token: &str) -> bool {
        self.forget_staged(id)
            .is_some_and(|(c, t)| c == container && t == token)
    }

    /// Drops what was staged for the agent, returning it (the container and the token).
    pub(super) fn forget_staged(&self, id: &str) -> Option<(String, String)> {
        self.staged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
    }

    /// Uploads boot.json into a stopped container ahead of its next start.
    pub(super) async fn stage_boot_inner(
        &self,
        spec: &SandboxSpec,
        token: &str,
    ) -> Result<bool, DockerError> {
        let id = &spec.id;
        let Some(info) = self.own_container(id).await? else {
            return Ok(false);
        };
        let stopped = matches!(
            info.state.and_then(|s| s.status),
            Some(ContainerStateStatusEnum::EXITED | ContainerStateStatusEnum::CREATED)
        );
        let (Some(container), true) = (info.id, stopped) else {
            return Ok(false);
        };
        let net = self.ensure_network(id).await?.net;
        self.upload_boot(id, &net, token).await?;
        self.staged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.clone(), (container, token.to_string()));
        Ok(true)
    }
}
