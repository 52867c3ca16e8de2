//! The rules of an agent's `secrets`: the names of the secrets granted to it, each of which its
//! sandbox sees as a variable holding a placeholder (see [`crate::secrets`]). Whether each name
//! is a secret that exists is the store's to say, in the same step that keeps the list.

use std::collections::BTreeSet;

/// Most secrets one agent may be granted.
pub const MAX_GRANTS: usize = 64;

/// A list of names: each a secret's name (an env name, as [`crate::secrets::spec::check_name`]
/// says), none twice,
/// at most [`MAX_GRANTS`]. `Err` is the sentence for the person who asked.
pub fn check(names: &[String]) -> Result<(), String> {
    if names.len() > MAX_GRANTS {
        return Err(format!(
            "secrets names {} secrets; an agent may be granted at most {MAX_GRANTS}",
            names.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for name in names {
        // A secret's name is an env name (the variable it appears as): the same rule.
        super::env::check_name(name).map_err(|e| {
            let shown: String = name.chars().take(80).collect();
            format!("secrets: {shown:?}: the secret's name {e}")
        })?;
        if !seen.insert(name.as_str()) {
            return Err(format!("secrets names {name} twice"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn names_are_secret_names_once_each_and_few() {
        assert!(check(&names(&["GITHUB_TOKEN", "ANTHROPIC_API_KEY"])).is_ok());
        assert!(check(&[]).is_ok());
        let twice = check(&names(&["A", "A"])).unwrap_err();
        assert!(twice.contains("A twice"), "{twice}");
        let bad = check(&names(&["HTTP_PROXY"])).unwrap_err();
        assert!(bad.contains("HTTP_PROXY"), "{bad}");
        assert!(check(&names(&["1X"])).is_err());
        let many: Vec<String> = (0..=MAX_GRANTS).map(|i| format!("S{i}")).collect();
        assert!(check(&many).unwrap_err().contains("at most"));
    }
}
