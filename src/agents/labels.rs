//! Labels: an agent's `key: value` tags, which the caller chooses and the server only keeps and
//! filters by, and [`AgentFilter`], the filter of a listing (`label`, `state`, `preset`).

use std::collections::BTreeMap;

use crate::model::{Agent, AgentState};

/// Longest label key.
pub const MAX_KEY: usize = 63;
/// Longest label value, in characters.
pub const MAX_VALUE: usize = 256;
/// Most labels one agent may have.
pub const MAX_LABELS: usize = 64;

/// A key is 1 to [`MAX_KEY`] of `[a-z0-9._/-]`.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY {
        return Err(format!(
            "label key {:?} must be 1 to {MAX_KEY} characters",
            shown(key)
        ));
    }
    if !key
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b".-_/".contains(&b))
    {
        return Err(format!(
            "label key {:?} may only hold lowercase letters, digits and . _ / -",
            shown(key)
        ));
    }
    Ok(())
}

/// At most [`MAX_LABELS`], each key by [`check_key`], each value at most [`MAX_VALUE`]
/// characters.
pub fn check(labels: &BTreeMap<String, String>) -> Result<(), String> {
    if labels.len() > MAX_LABELS {
        return Err(format!(
            "an agent may have at most {MAX_LABELS} labels ({} given)",
            labels.len()
        ));
    }
    for (key, value) in labels {
        check_key(key)?;
        if value.chars().count() > MAX_VALUE {
            return Err(format!(
                "the value of label {key:?} is longer than {MAX_VALUE} characters"
            ));
        }
    }
    Ok(())
}

fn shown(s: &str) -> String {
    s.chars().take(80).collect()
}

/// Which agents a listing shows: every condition holds (AND). Empty: every agent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentFilter {
    /// Each `(key, value)`: the agent has the label `key` with that value, or with any value
    /// when `None`.
    pub labels: Vec<(String, Option<String>)>,
    pub state: Option<AgentState>,
    pub preset: Option<String>,
    /// The agent's name (among agents being destroyed, a newer one may share it).
    pub name: Option<String>,
}

impl AgentFilter {
    /// The filter a listing's query asks for: its `(name, value)` pairs in order. `label` may be
    /// repeated (`key=value`, or `key` for any value); `state`, `preset` and `name` may each be
    /// given once. Anything else is an error naming the parameter.
    pub fn from_query<I, K, V>(pairs: I) -> Result<AgentFilter, (&'static str, String)>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut filter = AgentFilter::default();
        for (name, value) in pairs {
            let value = value.as_ref();
            match name.as_ref() {
                "label" => {
                    let (key, want) = match value.split_once('=') {
                        Some((k, v)) => (k, Some(v.to_string())),
                        None => (value, None),
                    };
                    check_key(key).map_err(|why| ("label", why))?;
                    if filter.labels.len() >= MAX_LABELS {
                        return Err(("label", format!("at most {MAX_LABELS} label filters")));
                    }
                    filter.labels.push((key.to_string(), want));
                }
                "state" => {
                    let state = AgentState::parse(value).ok_or_else(|| {
                        let known: Vec<&str> = AgentState::ALL.iter().map(|s| s.as_str()).collect();
                        (
                            "state",
                            format!(
                                "state {:?} is not one of {}",
                                shown(value),
                                known.join(", ")
                            ),
                        )
                    })?;
                    if filter.state.replace(state).is_some() {
                        return Err(("state", "state may be given once".to_string()));
                    }
                }
                "preset" => {
                    if filter.preset.replace(value.to_string()).is_some() {
                        return Err(("preset", "preset may be given once".to_string()));
                    }
                }
                "name" => {
                    if filter.name.replace(value.to_string()).is_some() {
                        return Err(("name", "name may be given once".to_string()));
                    }
                }
                other => {
                    return Err((
                        "query",
                        format!(
                            "unknown query parameter {:?}; the filters are label, state, preset and name",
                            shown(other)
                        ),
                    ))
                }
            }
        }
        Ok(filter)
    }

    /// Whether `agent` passes every condition.
    pub fn matches(&self, agent: &Agent) -> bool {
        self.state.is_none_or(|s| agent.state == s)
            && self.name.as_deref().is_none_or(|n| agent.name == n)
            && self
                .preset
                .as_deref()
                .is_none_or(|p| agent.preset.as_deref() == Some(p))
            && self
                .labels
                .iter()
                .all(|(key, want)| match (agent.labels.get(key), want) {
                    (Some(_), None) => true,
                    (Some(have), Some(want)) => have == want,
                    (None, _) => false,
                })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn keys_values_and_counts_are_bounded() {
        assert!(check(&labels(&[("team", "ml"), ("example.com/owner", "a b=c")])).is_ok());
        assert!(check(&labels(&[("k-1._/x", "")])).is_ok());
        assert!(check(&labels(&[("Team", "x")])).is_err());
        assert!(check(&labels(&[("", "x")])).is_err());
        assert!(check(&labels(&[("a b", "x")])).is_err());
        assert!(check(&labels(&[(&"k".repeat(63), "x")])).is_ok());
        assert!(check(&labels(&[(&"k".repeat(64), "x")])).is_err());
        assert!(check(&labels(&[("k", &"é".repeat(256))])).is_ok());
        assert!(check(&labels(&[("k", &"é".repeat(257))])).is_err());
        let many: BTreeMap<String, String> =
            (0..65).map(|i| (format!("k{i}"), String::new())).collect();
        assert!(check(&many).is_err());
    }

    #[test]
    fn a_query_becomes_a_filter_or_names_what_is_wrong() {
        let f = AgentFilter::from_query([
            ("label", "team=ml"),
            ("label", "gpu"),
            ("label", "note=a=b"),
            ("state", "running"),
            ("preset", "dev"),
        ])
        .unwrap();
        assert_eq!(
            f.labels,
            vec![
                ("team".into(), Some("ml".into())),
                ("gpu".into(), None),
                ("note".into(), Some("a=b".into()))
            ]
        );
        assert_eq!(f.state, Some(AgentState::Running));
        assert_eq!(f.preset.as_deref(), Some("dev"));
        let none: [(&str, &str); 0] = [];
        assert_eq!(
            AgentFilter::from_query(none).unwrap(),
            AgentFilter::default()
        );
        for (bad, field) in [
            (("label", "Bad=x"), "label"),
            (("label", "=x"), "label"),
            (("state", "asleep"), "state"),
            (("sort", "name"), "query"),
        ] {
            assert_eq!(AgentFilter::from_query([bad]).unwrap_err().0, field);
        }
        assert!(AgentFilter::from_query([("state", "running"), ("state", "error")]).is_err());
    }
}
