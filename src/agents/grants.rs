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

/// A grant only an admin may make: the secrets are the admins' (only they set them), and a
/// grant hands a secret's use to whatever runs in the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "only admins grant secrets: {0} is not granted here already (by the preset, or to the agent)"
)]
pub struct OnlyAdminsGrant(pub String);

/// Whether a caller may ask for `requested` where `held` are granted already (the preset's on a
/// create, the agent's on a change): anyone who may change the agent keeps or drops names; only
/// an admin (`admin`) adds one.
pub fn may_grant(
    admin: bool,
    requested: &[String],
    held: &[String],
) -> Result<(), OnlyAdminsGrant> {
    match requested.iter().find(|n| !held.contains(n)) {
        Some(added) if !admin => Err(OnlyAdminsGrant(added.clone())),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_admins_add_a_grant_and_anyone_keeps_or_drops_one() {
        let held = names(&["A", "B"]);
        assert_eq!(may_grant(false, &names(&["B"]), &held), Ok(()));
        assert_eq!(may_grant(false, &names(&["A", "B"]), &held), Ok(()));
        assert_eq!(
            may_grant(false, &names(&["A", "C"]), &held),
            Err(OnlyAdminsGrant("C".into()))
        );
        assert_eq!(may_grant(true, &names(&["A", "C"]), &held), Ok(()));
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
