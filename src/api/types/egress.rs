//! The egress rules as the API shows and takes them (and how a create or update body reads
//! them), and the `egress` event; each made from, or into, the egress proxy's own type by a `From`
//! that names every field.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::egress::{self, Rule, MAX_RULES};

/// An agent's `egress`: what its sandbox may reach through the server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EgressRules {
    /// Destinations the sandbox may reach: `pypi.org`, `*.pythonhosted.org`, `203.0.113.0/24`,
    /// `*` (any public destination), each optionally ending in `:PORT`.
    #[serde(default)]
    #[schema(value_type = Vec<String>, max_items = 256, example = json!(["pypi.org", "*.pythonhosted.org:443"]))]
    pub allow: Vec<Rule>,
    /// Destinations refused even when an allow rule matches them; same forms.
    #[serde(default)]
    #[schema(value_type = Vec<String>, max_items = 256)]
    pub deny: Vec<Rule>,
}

impl From<egress::EgressRules> for EgressRules {
    fn from(r: egress::EgressRules) -> Self {
        EgressRules {
            allow: r.allow,
            deny: r.deny,
        }
    }
}

impl From<EgressRules> for egress::EgressRules {
    fn from(r: EgressRules) -> Self {
        egress::EgressRules {
            allow: r.allow,
            deny: r.deny,
        }
    }
}

/// A `PATCH`'s `egress`: each list it names replaces the agent's, and a list it leaves out (or
/// gives as null) stays as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EgressChange {
    /// The new allow list, replacing the agent's; absent or null: the agent's stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<String>>, max_items = 256, example = json!(["pypi.org"]))]
    pub allow: Option<Vec<Rule>>,
    /// The new deny list, replacing the agent's; absent or null: the agent's stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<String>>, max_items = 256)]
    pub deny: Option<Vec<Rule>>,
}

impl EgressChange {
    /// A change that replaces both lists with `rules`'.
    pub fn both(rules: EgressRules) -> EgressChange {
        EgressChange {
            allow: Some(rules.allow),
            deny: Some(rules.deny),
        }
    }
}

impl From<EgressChange> for egress::EgressChange {
    fn from(c: EgressChange) -> Self {
        egress::EgressChange {
            allow: c.allow,
            deny: c.deny,
        }
    }
}

// The `egress` event's data: one per decision of the egress proxy, and one more when an allowed
// connection closes. A plain comment, as a doc comment would add a description to the schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EgressEvent {
    /// The agent.
    pub id: String,
    /// The destination as the sandbox named it (a host name or an address).
    pub host: String,
    pub port: u16,
    pub allowed: bool,
    /// The rule that decided, or null when no rule matched (so it was refused).
    pub rule: Option<String>,
    /// Why it was refused (or could not be reached), for a person to read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// True on the event sent when an allowed connection closes; the byte counts are then final.
    pub closed: bool,
    /// Bytes sent from the sandbox to the destination.
    pub bytes_up: u64,
    /// Bytes sent from the destination to the sandbox.
    pub bytes_down: u64,
    /// The secret this event is about (never its value): swapped into a request to the
    /// destination when `allowed`, or what got the request refused when not. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl From<egress::EgressEvent> for EgressEvent {
    fn from(e: egress::EgressEvent) -> Self {
        EgressEvent {
            id: e.id,
            host: e.host,
            port: e.port,
            allowed: e.allowed,
            rule: e.rule,
            reason: e.reason,
            closed: e.closed,
            bytes_up: e.bytes_up,
            bytes_down: e.bytes_down,
            secret: e.secret,
        }
    }
}

/// A destination the egress proxy refused while a command or process ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EgressDenied {
    /// As the sandbox named it (a host name or an address).
    pub host: String,
    pub port: u16,
    /// The deny rule that refused it, or null when no allow rule matched it.
    pub rule: Option<String>,
}

impl From<egress::Denied> for EgressDenied {
    fn from(d: egress::Denied) -> Self {
        EgressDenied {
            host: d.host,
            port: d.port,
            rule: d.rule,
        }
    }
}

/// One of an agent's recent egress decisions (`GET /api/v1/agents/{id}/egress/log`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EgressLogEntry {
    /// When the proxy decided.
    pub at: chrono::DateTime<chrono::Utc>,
    /// The destination as the sandbox named it (a host name or an address).
    pub host: String,
    pub port: u16,
    pub allowed: bool,
    /// The rule that decided, or null when no rule matched (so it was refused).
    pub rule: Option<String>,
    /// Why it was refused or could not be reached, or why an allowed connection was closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Bytes sent from the sandbox, once an allowed connection has closed; null before.
    pub bytes_up: Option<u64>,
    /// Bytes sent to the sandbox, once an allowed connection has closed; null before.
    pub bytes_down: Option<u64>,
    /// The secret the decision was about (never its value): swapped into a request when
    /// `allowed`, or what got the request refused when not. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl From<egress::LogEntry> for EgressLogEntry {
    fn from(e: egress::LogEntry) -> Self {
        EgressLogEntry {
            at: e.at,
            host: e.host,
            port: e.port,
            allowed: e.allowed,
            rule: e.rule,
            reason: e.reason,
            bytes_up: e.bytes.map(|b| b.0),
            bytes_down: e.bytes.map(|b| b.1),
            secret: e.secret,
        }
    }
}

/// `egress` as a JSON object or null (serde would read the rules from an array too, which the
/// schema does not allow), with rules of ASCII only: `Rule` would take one padded with Unicode
/// white space, whose bytes its length limit counts, so no schema could state it.
pub(super) fn rules_object<'de, D>(d: D) -> Result<Option<EgressRules>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Ok(lists_object(d)?.map(|(allow, deny)| EgressRules {
        allow: allow.unwrap_or_default(),
        deny: deny.unwrap_or_default(),
    }))
}

/// A `PATCH`'s `egress`, read as [`rules_object`] reads a create's, keeping which lists it names.
pub(super) fn change_object<'de, D>(d: D) -> Result<Option<EgressChange>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Ok(lists_object(d)?.map(|(allow, deny)| EgressChange { allow, deny }))
}

type Lists = (Option<Vec<Rule>>, Option<Vec<Rule>>);

/// An object `{"allow"?, "deny"?}` or null: each list as given (`None` when absent or null).
fn lists_object<'de, D>(d: D) -> Result<Option<Lists>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RulesText {
        #[serde(default)]
        allow: Option<Vec<String>>,
        #[serde(default)]
        deny: Option<Vec<String>>,
    }

    fn parse(list: &str, rules: Option<Vec<String>>) -> Result<Option<Vec<Rule>>, String> {
        let Some(rules) = rules else { return Ok(None) };
        if rules.len() > MAX_RULES {
            return Err(format!(
                "egress.{list} holds {} rules; at most {MAX_RULES} are allowed (a wildcard or a \
                 CIDR covers many)",
                rules.len()
            ));
        }
        let parse_one = |(i, rule): (usize, String)| {
            if !rule.is_ascii() {
                let shown: String = rule.chars().take(80).collect();
                return Err(format!(
                    "{list}[{i}]: {shown:?} is not an egress rule: it holds characters other than \
                     ASCII"
                ));
            }
            rule.parse::<Rule>()
                .map_err(|e| format!("{list}[{i}]: {e}"))
        };
        rules
            .into_iter()
            .enumerate()
            .map(parse_one)
            .collect::<Result<_, _>>()
            .map(Some)
    }

    struct RulesObject;
    impl<'de> serde::de::Visitor<'de> for RulesObject {
        type Value = Option<Lists>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(r#"an object {"allow": [..], "deny": [..]} or null"#)
        }

        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(RulesObject)
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            use serde::de::Error;
            let text = RulesText::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
            Ok(Some((
                parse("allow", text.allow).map_err(A::Error::custom)?,
                parse("deny", text.deny).map_err(A::Error::custom)?,
            )))
        }
    }
    d.deserialize_option(RulesObject)
}
