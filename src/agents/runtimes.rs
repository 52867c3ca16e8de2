//! Which container runtimes agents may ask for, and the one they get when they ask for none.

/// gVisor's runtime, as `scripts/docker-setup.sh` registers it.
pub const GVISOR: &str = "runsc";
/// Docker's own runtime.
pub const RUNC: &str = "runc";

/// The runtimes the engine has, as it said when the driver connected (the driver
/// reports them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineRuntimes {
    /// Every runtime registered with the engine, sorted.
    pub names: Vec<String>,
    /// The one it uses when asked for none.
    pub default: String,
}

/// The runtimes of this server, settled at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runtimes {
    /// What `runtime` may be, the default first.
    pub allowed: Vec<String>,
    /// The runtime of an agent that asks for none.
    pub default: String,
}

impl Runtimes {
    /// From `sandbox.runtime` and `sandbox.allowed_runtimes` (validated at load) and what the
    /// driver's engine has. Without `allowed_runtimes`: runc, gVisor when the engine has it,
    /// and the default. The allowed list may name runtimes the engine lacks (it may gain them
    /// without a server restart): an agent on one fails to start, saying so.
    pub fn resolve(
        runtime: Option<&str>,
        allowed_runtimes: Option<&[String]>,
        engine: &EngineRuntimes,
    ) -> Result<Runtimes, String> {
        let default = runtime.unwrap_or(&engine.default).to_string();
        let listed = match allowed_runtimes {
            Some(list) => {
                if !list.contains(&default) {
                    return Err(format!(
                        "sandbox.allowed_runtimes ({}) does not hold {default}, the engine's \
                         default runtime and so that of an agent that asks for none: add it, \
                         or set sandbox.runtime to one of the list",
                        list.join(", ")
                    ));
                }
                list.to_vec()
            }
            None => {
                let mut list = vec![RUNC.to_string()];
                if engine.names.iter().any(|n| n == GVISOR) {
                    list.push(GVISOR.to_string());
                }
                list
            }
        };
        let mut allowed = vec![default.clone()];
        allowed.extend(listed.into_iter().filter(|r| *r != default));
        Ok(Runtimes { allowed, default })
    }

    pub fn allows(&self, runtime: &str) -> bool {
        self.allowed.iter().any(|r| r == runtime)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(names: &[&str]) -> EngineRuntimes {
        EngineRuntimes {
            names: names.iter().map(|n| n.to_string()).collect(),
            default: "runc".to_string(),
        }
    }

    /// As the config gives them: an empty `runtime` is none.
    fn resolve(
        runtime: &str,
        allowed: Option<&[&str]>,
        engine: &EngineRuntimes,
    ) -> Result<Runtimes, String> {
        let list: Option<Vec<String>> = allowed.map(|a| a.iter().map(|r| r.to_string()).collect());
        Runtimes::resolve(
            (!runtime.is_empty()).then_some(runtime),
            list.as_deref(),
            engine,
        )
    }

    fn allowed(r: &Runtimes) -> Vec<&str> {
        r.allowed.iter().map(String::as_str).collect()
    }

    #[test]
    fn by_default_runc_and_gvisor_when_the_engine_has_it() {
        let r = resolve("", None, &engine(&["runc"])).unwrap();
        assert_eq!((allowed(&r), r.default.as_str()), (vec!["runc"], "runc"));
        let r = resolve(
            "",
            None,
            &engine(&["io.containerd.runc.v2", "runc", "runsc"]),
        )
        .unwrap();
        assert_eq!(allowed(&r), ["runc", "runsc"]);
        assert!(r.allows("runsc") && !r.allows("io.containerd.runc.v2"));
    }

    #[test]
    fn the_configured_default_comes_first_and_is_allowed() {
        let r = resolve("runsc", None, &engine(&["runc", "runsc"])).unwrap();
        assert_eq!(
            (allowed(&r), r.default.as_str()),
            (vec!["runsc", "runc"], "runsc")
        );
        // A default the engine lacks stays the default: its agents fail to start, saying so.
        let r = resolve("kata", None, &engine(&["runc"])).unwrap();
        assert_eq!(allowed(&r), ["kata", "runc"]);
    }

    #[test]
    fn an_explicit_list_is_taken_as_it_is() {
        let r = resolve("", Some(&["runsc", "runc", "kata"]), &engine(&["runc"])).unwrap();
        assert_eq!(
            (allowed(&r), r.default.as_str()),
            (vec!["runc", "runsc", "kata"], "runc")
        );
    }

    #[test]
    fn an_explicit_list_without_the_engines_default_is_refused() {
        let e = resolve("", Some(&["runsc"]), &engine(&["runc", "runsc"])).unwrap_err();
        assert!(
            e.starts_with("sandbox.allowed_runtimes (runsc) does not hold runc"),
            "{e}"
        );
    }
}
