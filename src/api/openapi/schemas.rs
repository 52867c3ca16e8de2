//! The request schemas completed for this server: its configured limits as bounds, `env`'s
//! rules, the presets `preset` may name, and the egress rules' pattern.

use serde_json::{json, Value};

use super::patterns::{egress_rule_pattern, FAKE_PATH_PATTERN, PATH_PATTERN};
use super::{property, query_parameter, set, Facts};
use crate::config::{Config, DriverKind};

/// The configured limits as the schemas' bounds.
pub(super) fn configured_limits(doc: &mut Value, config: &Config, facts: Facts) {
    let sb = &config.sandbox;
    for schema in ["CreateAgent", "UpdateAgent"] {
        set(property(doc, schema, "cpus"), "maximum", json!(sb.max_cpus));
        set(
            property(doc, schema, "memoryMb"),
            "maximum",
            json!(sb.max_memory_mb),
        );
        if facts.disk_limits {
            set(
                property(doc, schema, "diskMb"),
                "maximum",
                json!(sb.max_disk_mb),
            );
        } else if let Some(Value::Object(props)) =
            doc.pointer_mut(&format!("/components/schemas/{schema}/properties"))
        {
            // This server cannot limit a home: any `diskMb` is refused.
            props.remove("diskMb");
        }
        if let Some(runtimes) = &facts.runtimes {
            set(property(doc, schema, "runtime"), "enum", json!(runtimes));
        }
    }
    let max_timeout = u64::try_from(config.server.exec_max_timeout.as_millis()).unwrap_or(u64::MAX);
    set(
        property(doc, "ExecBody", "timeoutMs"),
        "maximum",
        json!(max_timeout),
    );
    set(
        query_parameter(
            doc,
            "/api/v1/agents/{id}/processes/{pid}/wait",
            "get",
            "timeoutMs",
        ),
        "maximum",
        json!(max_timeout),
    );
    let pattern = if sb.driver == DriverKind::Fake {
        FAKE_PATH_PATTERN
    } else {
        PATH_PATTERN
    };
    for (op, method) in [
        ("list", "get"),
        ("read", "get"),
        ("write", "put"),
        ("mkdir", "post"),
        ("remove", "delete"),
        ("stat", "get"),
        ("watch", "get"),
    ] {
        set(
            query_parameter(
                doc,
                &format!("/api/v1/agents/{{id}}/fs/{op}"),
                method,
                "path",
            ),
            "pattern",
            json!(pattern),
        );
    }
    // Outside the home is `false` there, not an error, whatever the driver.
    set(
        query_parameter(doc, "/api/v1/agents/{id}/fs/exists", "get", "path"),
        "pattern",
        json!(PATH_PATTERN),
    );
    for field in ["from", "to"] {
        if let Some(Value::Object(slot)) = property(doc, "RenameBody", field) {
            slot.insert("pattern".into(), json!(pattern));
        }
    }
}

/// `env`'s rules (`agents::env::check`) as a schema: names, their count, and values of at most
/// 4096 characters without NUL.
pub(super) fn agent_env(doc: &mut Value) {
    let env = json!({
        "maxProperties": crate::agents::env::MAX_VARS,
        "propertyNames": {
            "pattern": crate::agents::env::NAME_PATTERN,
        },
        "additionalProperties": {
            "type": "string",
            "maxLength": crate::agents::env::MAX_VALUE,
            "pattern": "^[^\\u0000]*$",
        },
    });
    for schema in ["CreateAgent", "UpdateAgent"] {
        // Merged into the generated schema, which keeps its description and its null.
        if let (Some(Value::Object(slot)), Value::Object(rules)) =
            (property(doc, schema, "env"), &env)
        {
            slot.extend(rules.clone());
        }
    }
    // One command's `env`: the same names (`agents::env::check_names`), values without NUL; its
    // count and lengths are bounded by exec's size limits (`413`), not by these.
    let command_env = json!({
        "propertyNames": {"pattern": crate::agents::env::NAME_PATTERN},
        "additionalProperties": {"type": "string", "pattern": "^[^\\u0000]*$"},
    });
    for schema in ["ExecBody", "StartProcess"] {
        if let (Some(Value::Object(slot)), Value::Object(rules)) =
            (property(doc, schema, "env"), &command_env)
        {
            slot.extend(rules.clone());
        }
    }
}

/// An agent's `secrets` as `agents::grants::check` reads them: each an env name (a schema of
/// its own, `SecretName`, so that generated clients do not name the item type after the list),
/// none twice.
pub(super) fn agent_secrets(doc: &mut Value) {
    if let Some(Value::Object(schemas)) = doc.pointer_mut("/components/schemas") {
        schemas.insert(
            "SecretName".to_string(),
            json!({
                "type": "string",
                "description": "A secret's name: the env variable granted agents see it as.",
                "pattern": crate::agents::env::NAME_PATTERN,
            }),
        );
    }
    for schema in ["CreateAgent", "UpdateAgent"] {
        if let Some(Value::Object(slot)) = property(doc, schema, "secrets") {
            slot.insert("uniqueItems".to_string(), json!(true));
            slot.insert(
                "items".to_string(),
                json!({"$ref": "#/components/schemas/SecretName"}),
            );
        }
    }
}

/// An agent's labels, as `agents::labels::check` takes them.
pub(super) fn agent_labels(doc: &mut Value) {
    use crate::agents::labels::{MAX_KEY, MAX_LABELS, MAX_VALUE};
    let labels = json!({
        "maxProperties": MAX_LABELS,
        "propertyNames": {"pattern": format!("^[a-z0-9._/-]{{1,{MAX_KEY}}}$")},
        "additionalProperties": {"type": "string", "maxLength": MAX_VALUE},
    });
    for schema in ["CreateAgent", "UpdateAgent"] {
        if let (Some(Value::Object(slot)), Value::Object(rules)) =
            (property(doc, schema, "labels"), &labels)
        {
            slot.extend(rules.clone());
        }
    }
}

/// A session's title and directory, as `sessions` checks them; and the configured harnesses
/// are the only names `harness` takes (with none configured, a create is `409`).
pub(super) fn sessions(doc: &mut Value, config: &Config) {
    let title = json!({
        "maxLength": crate::sessions::MAX_TITLE,
        "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*$",
    });
    for schema in ["CreateSession", "UpdateSession"] {
        if let (Some(Value::Object(slot)), Value::Object(rules)) =
            (property(doc, schema, "title"), &title)
        {
            slot.extend(rules.clone());
        }
    }
    // At most 1024 characters (the server's own limit is 4096 bytes); absolute; no `..`, no NUL.
    if let Some(Value::Object(slot)) = property(doc, "CreateSession", "cwd") {
        slot.insert("maxLength".into(), json!(1024));
        slot.insert(
            "pattern".into(),
            json!("^/(?!(?:.*/)?\\.\\.(?:/|$))[^\\u0000]*$"),
        );
    }
    if !config.harnesses.is_empty() {
        let names: Vec<Value> = config
            .harnesses
            .keys()
            .map(|n| json!(n))
            .chain([Value::Null])
            .collect();
        if let Some(slot) = property(doc, "CreateSession", "harness") {
            *slot = json!({"type": ["string", "null"], "enum": names});
        }
    }
}

/// The configured presets are the only names `preset` takes; with none, it is not accepted.
pub(super) fn preset_names(doc: &mut Value, config: &Config) {
    if config.presets.is_empty() {
        if let Some(Value::Object(props)) =
            doc.pointer_mut("/components/schemas/CreateAgent/properties")
        {
            props.remove("preset");
        }
        return;
    }
    let names: Vec<&str> = config.presets.keys().map(String::as_str).collect();
    if let Some(slot) = property(doc, "CreateAgent", "preset") {
        *slot = json!({"type": ["string", "null"], "enum": names.iter().map(|n| json!(n)).chain([Value::Null]).collect::<Vec<_>>()});
    }
}

/// A secret's fields as `crate::secrets::spec` checks them, and its name in the path.
pub(super) fn secrets(doc: &mut Value) {
    use super::patterns::{
        secret_format_pattern, secret_header_pattern, secret_host_pattern, secret_value_pattern,
    };
    let host = json!({"type": "string", "maxLength": 261, "pattern": secret_host_pattern()});
    set(property(doc, "PutSecret", "hosts"), "items", host.clone());
    set(property(doc, "Secret", "hosts"), "items", host);
    set(
        property(doc, "PutSecret", "value"),
        "pattern",
        json!(secret_value_pattern()),
    );
    set(
        property(doc, "PutSecret", "format"),
        "pattern",
        json!(secret_format_pattern()),
    );
    let header = secret_header_pattern(crate::secrets::spec::RESERVED_HEADERS);
    set(
        property(doc, "PutSecret", "header"),
        "pattern",
        json!(header),
    );
    for method in ["put", "delete"] {
        if let Some(Value::Array(params)) = doc.pointer_mut(&format!(
            "/paths/~1api~1v1~1secrets~1{{name}}/{method}/parameters"
        )) {
            for p in params.iter_mut().filter(|p| p["name"] == "name") {
                set(
                    p.get_mut("schema"),
                    "pattern",
                    json!(crate::agents::env::NAME_PATTERN),
                );
            }
        }
    }
}

/// `GET /api/v1/audit`'s filters as `crate::audit::query` reads them: an action of the fixed
/// list, a time or a duration ago, names of 1 to 200 characters.
pub(super) fn audit_filters(doc: &mut Value) {
    use crate::audit::query::{AGO_PATTERN, MAX_NAME};
    let Some(Value::Array(params)) = doc.pointer_mut("/paths/~1api~1v1~1audit/get/parameters")
    else {
        return;
    };
    for p in params.iter_mut() {
        let schema = match p["name"].as_str() {
            Some("action") => json!({"$ref": "#/components/schemas/AuditAction"}),
            Some("since" | "until") => json!({"oneOf": [
                {"type": "string", "format": "date-time"},
                {"type": "string", "pattern": AGO_PATTERN},
            ]}),
            Some("agent" | "user") => {
                json!({"type": "string", "minLength": 1, "maxLength": MAX_NAME})
            }
            _ => continue,
        };
        set(Some(p), "schema", schema);
    }
}

pub(super) fn egress_rules(doc: &mut Value) {
    let rule = json!({
        "type": "string",
        // `egress::rules::MAX_RULE_LEN`: a host name, `*.` and `:65535`.
        "maxLength": 261,
        "pattern": egress_rule_pattern(),
    });
    // The agent's rules, and a PATCH's change of them.
    for schema in ["EgressRules", "EgressChange"] {
        for list in ["allow", "deny"] {
            set(
                doc.pointer_mut(&format!("/components/schemas/{schema}/properties/{list}")),
                "items",
                rule.clone(),
            );
        }
    }
}
