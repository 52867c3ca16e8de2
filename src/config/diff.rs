//! Which settings differ between two configs, by their dotted keys as the file writes them
//! (`presets.dev.image`, `sandbox.egress.default.allow`), for a reload to say what it changed.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::Config;

/// The keys whose values differ, sorted: a preset added or removed is one key
/// (`presets.web`), a changed one each of its keys that changed. Lists compare whole.
pub fn changed_keys(a: &Config, b: &Config) -> Vec<String> {
    let mut out = Vec::new();
    compare("", Some(&as_value(a)), Some(&as_value(b)), &mut out);
    out
}

/// Every map in a config has string keys, so this cannot fail; were it to, both sides would
/// read as the same nothing and no key as changed.
fn as_value(config: &Config) -> Value {
    serde_json::to_value(config).unwrap_or(Value::Null)
}

fn compare(key: &str, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<String>) {
    match (a, b) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            for name in names(a, b) {
                let sub = if key.is_empty() {
                    name.to_string()
                } else {
                    format!("{key}.{name}")
                };
                compare(&sub, a.get(name), b.get(name), out);
            }
        }
        (a, b) if a != b => out.push(key.to_string()),
        _ => {}
    }
}

/// The names of both maps, sorted, each once.
fn names<'a>(a: &'a Map<String, Value>, b: &'a Map<String, Value>) -> BTreeSet<&'a str> {
    a.keys().chain(b.keys()).map(String::as_str).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn equal_configs_differ_nowhere() {
        let c = Config::without_file();
        assert!(changed_keys(&c, &c.clone()).is_empty());
    }

    #[test]
    fn keys_are_named_as_the_file_writes_them() {
        let a = Config::without_file();
        let mut b = a.clone();
        b.server.exec_default_timeout = Duration::from_secs(60);
        b.sandbox.egress.default.allow = vec!["pypi.org".parse().unwrap()];
        b.presets.get_mut("dev").unwrap().memory_mb = Some(2048);
        b.presets.remove("minimal");
        b.presets.insert("web".into(), Default::default());
        assert_eq!(
            changed_keys(&a, &b),
            [
                "presets.dev.memoryMb",
                "presets.minimal",
                "presets.web",
                "sandbox.egress.default.allow",
                "server.exec_default_timeout",
            ]
        );
    }
}
