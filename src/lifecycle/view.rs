//! What others read about agents: the agent as stored, decorated with what only the running
//! server knows (its activity, when it will sleep, the pull under way), and the answers the
//! egress proxy and resolver get. Reading never changes an agent.

use chrono::Utc;

use super::{Lifecycle, LifecycleError};
use crate::config::SandboxConfig;
use crate::model::{Agent, AgentState::*};

/// How long `idle_minutes` units of `sandbox.idle_minute` (a minute but in tests) last.
pub fn idle_time(config: &SandboxConfig, idle_minutes: u32) -> chrono::Duration {
    let total = config.idle_minute.saturating_mul(idle_minutes);
    chrono::Duration::from_std(total).unwrap_or(chrono::Duration::MAX)
}

impl Lifecycle {
    /// Adds what only the running server knows: the egress rules of an agent made before
    /// they existed (the server's default), activity, the time the agent will sleep, and
    /// the image pull under way.
    pub fn decorate(&self, mut agent: Agent) -> Agent {
        let config = self.config();
        agent
            .egress
            .get_or_insert_with(|| config.sandbox.egress.default.clone());
        if agent.runtime.is_empty() {
            agent.runtime = self.runtimes.default.clone();
        }
        agent
            .deep_sleep_minutes
            .get_or_insert(config.sandbox.default_deep_sleep_minutes);
        if matches!(agent.state, Destroying) {
            return agent;
        }
        agent.pull = self.hub.pull_of(&agent.id);
        let view = self.activity.view(&agent.id);
        agent.last_activity_at = Some(view.last_activity_at);
        // An agent with no idle time never sleeps.
        agent.sleeps_at = if agent.state == Running && agent.idle_minutes > 0 {
            let idle = idle_time(&config.sandbox, agent.idle_minutes);
            let from = if view.busy {
                Utc::now()
            } else {
                view.last_activity_at
            };
            from.checked_add_signed(idle)
        } else if agent.state == Paused {
            self.deep_sleep_at(&agent)
        } else {
            None
        };
        agent
    }

    pub async fn get(&self, id: &str) -> Result<Agent, LifecycleError> {
        let agent = self
            .store
            .get_agent(id)
            .await
            .map_err(|e| LifecycleError::from_store(e, "be read"))?;
        Ok(self.decorate(agent))
    }

    pub async fn list(&self) -> Result<Vec<Agent>, LifecycleError> {
        let agents = self
            .store
            .list_agents()
            .await
            .map_err(|e| LifecycleError::from_store(e, "be listed"))?;
        Ok(agents.into_iter().map(|a| self.decorate(a)).collect())
    }
}

/// What the egress proxy asks about agents.
#[async_trait::async_trait]
impl crate::egress::Sandboxes for Lifecycle {
    async fn agent_at(&self, local: std::net::IpAddr, peer: std::net::IpAddr) -> Option<String> {
        self.driver.sandbox_at(local, peer).await
    }

    fn publish(&self, event: crate::egress::EgressEvent) {
        self.hub.egress(event);
    }

    fn record(&self, event: &crate::egress::EgressEvent) {
        self.hub.egress_log().record(event);
    }

    async fn rules(&self, id: &str) -> Option<(String, crate::egress::EgressRules)> {
        let agent = self.get(id).await.ok()?;
        // `decorate` fills in the default for agents made before rules existed.
        Some((agent.name, agent.egress.unwrap_or_default()))
    }

    /// The agent's grants in the boot its sandboxd connected with, read anew at each call: a
    /// grant taken away, a secret rotated or deleted counts from the next request.
    async fn granted(&self, id: &str) -> std::sync::Arc<crate::egress::Granted> {
        let granted = match (self.boot_of(id), self.store.get_agent(id).await) {
            (Some(boot), Ok(agent)) if !agent.secrets.is_empty() => {
                self.secrets.granted(id, &boot, &agent.secrets)
            }
            _ => crate::egress::Granted::default(),
        };
        std::sync::Arc::new(granted)
    }
}

/// What the egress resolver asks about agents.
#[async_trait::async_trait]
impl crate::egress::dns::Askers for Lifecycle {
    async fn asker(&self, peer: std::net::IpAddr) -> Option<(String, std::net::IpAddr)> {
        self.driver.sandbox_from(peer).await
    }

    async fn rules_of(&self, id: &str) -> Option<crate::egress::EgressRules> {
        crate::egress::Sandboxes::rules(self, id)
            .await
            .map(|(_, rules)| rules)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn idle_minutes_are_counted_in_idle_minute_units() {
        let mut c = SandboxConfig::default();
        assert_eq!(idle_time(&c, 15), chrono::Duration::minutes(15));
        c.idle_minute = Duration::from_secs(2);
        assert_eq!(idle_time(&c, 3), chrono::Duration::seconds(6));
        c.idle_minute = Duration::MAX;
        assert_eq!(idle_time(&c, u32::MAX), chrono::Duration::MAX);
    }
}
