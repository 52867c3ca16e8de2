//! API paths to real paths: checks for hostile input, then the logical-to-physical home mapping.

use std::path::{Component, Path, PathBuf};

use agenthold_proto::{ChannelError, ErrorCode, LOGICAL_HOME, MAX_PATH_LEN};

/// Longest path component accepted, in bytes (Linux's `NAME_MAX`).
pub const MAX_NAME_LEN: usize = 255;

/// Where the logical home lives on this machine and whether paths outside it are served.
#[derive(Debug, Clone)]
pub struct PathMap {
    pub home: PathBuf,
    pub confine_to_home: bool,
}

/// A checked API path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The path as the client names it (absolute, under `/home/agent` for relative input).
    pub logical: PathBuf,
    /// Where it is on this machine.
    pub physical: PathBuf,
}

impl Resolved {
    pub fn is_home(&self) -> bool {
        self.logical == Path::new(LOGICAL_HOME)
    }
}

impl PathMap {
    pub fn resolve(&self, api_path: &str) -> Result<Resolved, ChannelError> {
        let logical = check(api_path)?;
        self.served(logical.clone()).ok_or_else(|| {
            ChannelError::new(
                ErrorCode::Invalid,
                format!(
                    "{}: outside the agent's home (the fake driver only serves {LOGICAL_HOME})",
                    logical.display()
                ),
            )
        })
    }

    /// Like [`PathMap::resolve`], but a well-formed path this sandbox does not serve (outside
    /// the home, where the home is all that is served) is `None` rather than an error.
    pub fn resolve_served(&self, api_path: &str) -> Result<Option<Resolved>, ChannelError> {
        Ok(self.served(check(api_path)?))
    }

    fn served(&self, logical: PathBuf) -> Option<Resolved> {
        let physical = match logical.strip_prefix(LOGICAL_HOME) {
            Ok(rest) if rest.as_os_str().is_empty() => self.home.clone(),
            Ok(rest) => self.home.join(rest),
            Err(_) if self.confine_to_home => return None,
            Err(_) => logical.clone(),
        };
        Some(Resolved { logical, physical })
    }
}

/// Refuses what could escape or overflow, and makes the path absolute.
fn check(api_path: &str) -> Result<PathBuf, ChannelError> {
    let invalid = |why: String| ChannelError::new(ErrorCode::Invalid, why);
    let shown = || api_path.chars().take(80).collect::<String>();
    if api_path.contains('\0') {
        return Err(invalid(format!("{:?}: paths cannot contain NUL", shown())));
    }
    if api_path.len() > MAX_PATH_LEN {
        return Err(invalid(format!(
            "path of {} bytes is longer than {MAX_PATH_LEN} bytes",
            api_path.len()
        )));
    }
    let raw = Path::new(api_path);
    for c in raw.components() {
        match c {
            Component::ParentDir => {
                return Err(invalid(format!("{}: \"..\" is not allowed", shown())));
            }
            Component::Normal(name) if name.len() > MAX_NAME_LEN => {
                return Err(invalid(format!(
                    "a path component of {} bytes is longer than {MAX_NAME_LEN} bytes",
                    name.len()
                )));
            }
            _ => {}
        }
    }
    let logical = if raw.is_absolute() {
        raw.components().collect::<PathBuf>()
    } else {
        Path::new(LOGICAL_HOME).join(raw.components().collect::<PathBuf>())
    };
    if logical.as_os_str().len() > MAX_PATH_LEN {
        return Err(invalid(format!(
            "path of {} bytes is longer than {MAX_PATH_LEN} bytes",
            logical.as_os_str().len()
        )));
    }
    Ok(logical)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(confine: bool) -> PathMap {
        PathMap {
            home: PathBuf::from("/srv/h"),
            confine_to_home: confine,
        }
    }

    #[test]
    fn maps_relative_and_absolute_paths() {
        let m = map(true);
        assert_eq!(m.resolve("a/b").unwrap().physical, Path::new("/srv/h/a/b"));
        assert_eq!(m.resolve("").unwrap().physical, Path::new("/srv/h"));
        assert_eq!(m.resolve(".").unwrap().physical, Path::new("/srv/h"));
        assert!(m.resolve("/home/agent/").unwrap().is_home());
        assert_eq!(
            m.resolve("/home/agent/./x//y").unwrap().physical,
            Path::new("/srv/h/x/y")
        );
        assert_eq!(
            map(false).resolve("/etc/hosts").unwrap().physical,
            Path::new("/etc/hosts")
        );
    }

    #[test]
    fn refuses_hostile_paths() {
        let m = map(true);
        for p in [
            "../x".to_string(),
            "a/../../b".into(),
            "/home/agent/..".into(),
            "a\0b".into(),
            "x".repeat(256),
            "a/".repeat(2100),
            "/etc/passwd".into(),
            "/home/agentx/y".into(),
        ] {
            let e = m.resolve(&p).unwrap_err();
            assert_eq!(e.code, ErrorCode::Invalid, "{p:?}");
        }
        assert!(m
            .resolve("/etc")
            .unwrap_err()
            .message
            .contains("outside the agent's home"));
    }
}
