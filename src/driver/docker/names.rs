//! Names and labels of everything the Docker driver makes. The labels are what lets list,
//! reconcile and cleanup find exactly this installation's objects, never another's.

use std::collections::HashMap;

/// Set to `true` on every object agenthold makes.
pub const LABEL_MANAGED: &str = "agenthold.managed";
/// The installation's `name_prefix`, so several installations can share one engine.
pub const LABEL_PREFIX: &str = "agenthold.prefix";
/// The agent the object belongs to.
pub const LABEL_AGENT: &str = "agenthold.agent";
/// What the object is for (`sandbox`, `home`, `network`, `sandboxd`).
pub const LABEL_ROLE: &str = "agenthold.role";

#[derive(Debug, Clone)]
pub struct Names {
    prefix: String,
}

impl Names {
    pub fn new(prefix: &str) -> Names {
        Names {
            prefix: prefix.to_string(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn container(&self, id: &str) -> String {
        format!("{}-{id}", self.prefix)
    }

    pub fn volume(&self, id: &str) -> String {
        format!("{}-home-{id}", self.prefix)
    }

    /// The agent whose home is called `name` (see [`Names::volume`]).
    pub fn agent_of_volume(&self, name: &str) -> Option<String> {
        name.strip_prefix(&self.prefix)?
            .strip_prefix("-home-")
            .filter(|id| !id.is_empty())
            .map(str::to_string)
    }

    pub fn network(&self, id: &str) -> String {
        format!("{}-net-{id}", self.prefix)
    }

    /// Labels for an object of agent `id` (or of the installation itself when `id` is `None`).
    pub fn labels(&self, role: &str, id: Option<&str>) -> HashMap<String, String> {
        let mut l = HashMap::from([
            (LABEL_MANAGED.to_string(), "true".to_string()),
            (LABEL_PREFIX.to_string(), self.prefix.clone()),
            (LABEL_ROLE.to_string(), role.to_string()),
        ]);
        if let Some(id) = id {
            l.insert(LABEL_AGENT.to_string(), id.to_string());
        }
        l
    }

    /// A Docker `label` filter matching this installation's objects of `role`.
    pub fn filter(&self, role: &str) -> HashMap<String, Vec<String>> {
        HashMap::from([(
            "label".to_string(),
            vec![
                format!("{LABEL_MANAGED}=true"),
                format!("{LABEL_PREFIX}={}", self.prefix),
                format!("{LABEL_ROLE}={role}"),
            ],
        )])
    }

    /// A Docker `label` filter matching this installation's objects of `role` that belong to
    /// agent `id`.
    pub fn filter_agent(&self, role: &str, id: &str) -> HashMap<String, Vec<String>> {
        let mut f = self.filter(role);
        if let Some(labels) = f.get_mut("label") {
            labels.push(format!("{LABEL_AGENT}={id}"));
        }
        f
    }

    /// Whether an object with these labels is agent `id`'s, made by this installation.
    pub fn is_agents(&self, labels: Option<&HashMap<String, String>>, id: &str) -> bool {
        self.agent_of(labels).as_deref() == Some(id)
    }

    /// The agent id of an object, if its labels say it is ours.
    pub fn agent_of(&self, labels: Option<&HashMap<String, String>>) -> Option<String> {
        let labels = labels?;
        if labels.get(LABEL_MANAGED).map(String::as_str) != Some("true")
            || labels.get(LABEL_PREFIX) != Some(&self.prefix)
        {
            return None;
        }
        labels.get(LABEL_AGENT).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_documented_scheme() {
        let n = Names::new("ah");
        assert_eq!(n.container("k3f9"), "ah-k3f9");
        assert_eq!(n.volume("k3f9"), "ah-home-k3f9");
        assert_eq!(n.network("k3f9"), "ah-net-k3f9");
    }

    #[test]
    fn only_our_prefix_counts_as_ours() {
        let ours = Names::new("ah");
        let theirs = Names::new("other");
        let labels = ours.labels("sandbox", Some("abc"));
        assert_eq!(ours.agent_of(Some(&labels)), Some("abc".to_string()));
        assert_eq!(theirs.agent_of(Some(&labels)), None);
        assert_eq!(ours.agent_of(None), None);
        let unmanaged = HashMap::from([(LABEL_AGENT.to_string(), "abc".to_string())]);
        assert_eq!(ours.agent_of(Some(&unmanaged)), None);
    }
}
