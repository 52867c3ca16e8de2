//! An agent's `env`: variables (not secrets) every shell, exec, terminal and background process
//! of the agent starts with. Checked the same way in a config preset and in an API request; the
//! `env` of one exec or background process meets the same rule for its names ([`check_names`]).

use std::collections::BTreeMap;

/// Most variables an agent's `env` may name.
pub const MAX_VARS: usize = 128;
/// Longest value, in characters (as JSON Schema's `maxLength` counts).
pub const MAX_VALUE: usize = 4096;
/// What a name may be, as a regular expression (the OpenAPI document's): a shell identifier of
/// at most [`MAX_NAME`], not one of the reserved names.
pub const NAME_PATTERN: &str = "^(?!AGENTHOLD_)(?!(?:HTTPS?|NO|ALL)_PROXY$)(?!(?:https?|no|all)_proxy$)[A-Za-z_][A-Za-z0-9_]{0,255}$";
/// Longest name, in bytes.
pub const MAX_NAME: usize = 256;

/// Names the server sets itself: the egress proxy's (which every program must keep, or its
/// traffic would go nowhere) and everything of agenthold's own.
const RESERVED: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
];

/// Why one name or value is refused; the caller adds where it was found.
pub fn check(env: &BTreeMap<String, String>) -> Result<(), String> {
    if env.len() > MAX_VARS {
        return Err(format!(
            "names {} variables; at most {MAX_VARS} are allowed",
            env.len()
        ));
    }
    for (name, value) in env {
        check_name(name)?;
        let chars = value.chars().count();
        if chars > MAX_VALUE {
            return Err(format!(
                "{name} is {chars} characters long; a value may be at most {MAX_VALUE}"
            ));
        }
        if value.contains('\0') {
            return Err(format!("{name} holds a NUL byte"));
        }
    }
    Ok(())
}

/// The rule for the names (and the NUL rule for the values) of any `env` the API takes: an
/// agent's, and one exec's or background process's, whose count and lengths are bounded by exec's
/// size limits instead. The error reads as the caller shows it, prefixed with `env: `.
pub fn check_names(env: &BTreeMap<String, String>) -> Result<(), String> {
    for (name, value) in env {
        check_name(name)?;
        if value.contains('\0') {
            return Err(format!("{name} holds a NUL byte"));
        }
    }
    Ok(())
}

/// The message of a refused `env`, the same wherever it was sent.
pub fn message(why: &str) -> String {
    format!("env: {why}")
}

pub fn check_name(name: &str) -> Result<(), String> {
    let shown: String = name.chars().take(80).collect();
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    if !first_ok || !bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_') || name.len() > MAX_NAME
    {
        return Err(format!(
            "{shown:?} is not a variable name: letters, digits and '_', not starting with a \
             digit, at most {MAX_NAME}"
        ));
    }
    if name.starts_with("AGENTHOLD_") || RESERVED.contains(&name) {
        return Err(format!(
            "{name} is set by the server (the egress proxy's variables and AGENTHOLD_* are \
             reserved)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(k: &str, v: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(k.to_string(), v.to_string())])
    }

    #[test]
    fn names_are_shell_identifiers_and_not_reserved() {
        for ok in ["A", "_x", "NODE_ENV", "a1"] {
            assert!(check(&one(ok, "v")).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "1A",
            "A-B",
            "A=B",
            "Ä",
            "HTTP_PROXY",
            "no_proxy",
            "AGENTHOLD_X",
        ] {
            assert!(check(&one(bad, "v")).is_err(), "{bad}");
        }
    }

    #[test]
    fn values_and_counts_are_capped() {
        assert!(check(&one("A", &"x".repeat(MAX_VALUE))).is_ok());
        assert!(check(&one("A", &"x".repeat(MAX_VALUE + 1))).is_err());
        assert!(check(&one("A", "a\0b")).is_err());
        let many: BTreeMap<String, String> = (0..=MAX_VARS)
            .map(|i| (format!("V{i}"), String::new()))
            .collect();
        assert!(check(&many).is_err());
    }

    #[test]
    fn a_commands_env_meets_the_same_name_rule() {
        for bad in ["HTTP_PROXY", "all_proxy", "AGENTHOLD_TOKEN", "A=B", ""] {
            assert_eq!(check_names(&one(bad, "v")), check(&one(bad, "v")), "{bad}");
        }
        assert!(check_names(&one("A", "a\0b")).is_err());
        // No cap of its own on a value's length: exec's size limits bound it.
        assert!(check_names(&one("A", &"x".repeat(MAX_VALUE + 1))).is_ok());
    }
}
