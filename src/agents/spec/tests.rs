use std::collections::BTreeMap;

use super::*;
use crate::config::SandboxConfig;
use crate::egress::Rule;

fn rules(allow: &[&str]) -> EgressRules {
    EgressRules {
        allow: allow.iter().map(|r| r.parse::<Rule>().unwrap()).collect(),
        deny: Vec::new(),
    }
}

fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A server with the default sandbox settings, both runtimes, disk limits, and the presets given.
struct Server {
    sandbox: SandboxConfig,
    presets: BTreeMap<String, Preset>,
    runtimes: Runtimes,
    no_disk_limits: Option<String>,
}

impl Server {
    fn new(presets: &[(&str, Preset)]) -> Server {
        Server {
            sandbox: SandboxConfig::default(),
            presets: presets
                .iter()
                .map(|(name, p)| (name.to_string(), p.clone()))
                .collect(),
            runtimes: Runtimes {
                allowed: vec!["runc".to_string(), "runsc".to_string()],
                default: "runc".to_string(),
            },
            no_disk_limits: None,
        }
    }

    fn allowed(&self) -> Allowed<'_> {
        Allowed {
            defaults: self.sandbox.agent_defaults(),
            presets: &self.presets,
            runtimes: &self.runtimes,
            no_disk_limits: self.no_disk_limits.clone(),
        }
    }

    fn resolve(&self, request: AgentRequest) -> Result<NewAgent, SpecError> {
        resolve(request, &self.allowed())
    }

    fn check_patch(&self, patch: &AgentPatch) -> Result<(), SpecError> {
        check_patch(patch, &self.allowed())
    }
}

fn named(name: &str) -> AgentRequest {
    AgentRequest {
        name: name.to_string(),
        ..AgentRequest::default()
    }
}

fn dev() -> Preset {
    Preset {
        image: Some("example/dev:1".to_string()),
        cpus: Some(1.5),
        memory_mb: Some(2048),
        disk_mb: Some(4096),
        idle_minutes: Some(30),
        env: vars(&[("FROM_PRESET", "p"), ("SHARED", "preset")]),
        egress: Some(rules(&["pypi.org"])),
        runtime: Some("runsc".to_string()),
        ..Preset::default()
    }
}

fn refusal(result: Result<impl std::fmt::Debug, SpecError>) -> (&'static str, String) {
    let e = result.unwrap_err();
    (e.field, e.why)
}

#[test]
fn names_must_be_dns_labels() {
    for ok in ["a", "builder", "agent-7", &"x".repeat(63)] {
        assert!(check_name(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        "Builder",
        "-a",
        "a-",
        "a_b",
        "a.b",
        "ä",
        "a b",
        &"x".repeat(64),
    ] {
        assert_eq!(check_name(bad).unwrap_err().field, "name", "{bad}");
    }
    assert_eq!(
        check_name("A").unwrap_err().why,
        "name may only hold lowercase letters, digits and '-'"
    );
}

#[test]
fn without_a_preset_an_agent_gets_the_servers_defaults() {
    let server = Server::new(&[]);
    let sb = &server.sandbox;
    let new = server.resolve(named("plain")).unwrap();
    assert_eq!(
        new,
        NewAgent {
            id: new.id.clone(),
            name: "plain".to_string(),
            image: sb.default_image.clone(),
            cpus: sb.default_cpus,
            memory_mb: sb.default_memory_mb,
            disk_mb: Some(sb.default_disk_mb),
            egress: sb.egress.default.clone(),
            idle_minutes: sb.default_idle_minutes,
            deep_sleep_minutes: sb.default_deep_sleep_minutes,
            preset: None,
            env: BTreeMap::new(),
            secrets: Vec::new(),
            runtime: "runc".to_string(),
            ttl_minutes: None,
            expires_at: None,
            labels: BTreeMap::new(),
            allow_root: false,
            approvals: Default::default(),
            owner_id: String::new(),
            access: Default::default(),
        }
    );
    assert_eq!(new.id.len(), 12);
}

#[test]
fn a_preset_fills_the_blanks_and_the_requests_own_settings_win() {
    let mut server = Server::new(&[("dev", dev())]);
    server.sandbox.default_preset = Some("dev".to_string());
    let from_preset = server.resolve(named("a")).unwrap();
    assert_eq!(from_preset.preset.as_deref(), Some("dev"));
    assert_eq!(
        (
            from_preset.image.as_str(),
            from_preset.cpus,
            from_preset.memory_mb,
            from_preset.disk_mb,
            from_preset.idle_minutes,
            from_preset.runtime.as_str()
        ),
        ("example/dev:1", 1.5, 2048, Some(4096), 30, "runsc")
    );
    assert_eq!(from_preset.egress, rules(&["pypi.org"]));
    assert_eq!(from_preset.env, dev().env);

    let own = server
        .resolve(AgentRequest {
            image: Some("example/own:2".to_string()),
            cpus: Some(3.0),
            memory_mb: Some(512),
            disk_mb: Some(8192),
            idle_minutes: Some(0),
            egress: Some(rules(&["github.com"])),
            env: Some(vars(&[("SHARED", "mine"), ("OWN", "1")])),
            runtime: Some("runc".to_string()),
            ..named("b")
        })
        .unwrap();
    assert_eq!(
        (
            own.image.as_str(),
            own.cpus,
            own.memory_mb,
            own.disk_mb,
            own.idle_minutes,
            own.runtime.as_str()
        ),
        ("example/own:2", 3.0, 512, Some(8192), 0, "runc")
    );
    assert_eq!(own.egress, rules(&["github.com"]));
    assert_eq!(
        own.env,
        vars(&[("FROM_PRESET", "p"), ("OWN", "1"), ("SHARED", "mine")])
    );
}

#[test]
fn a_named_preset_wins_over_the_default_one() {
    let minimal = Preset {
        image: Some("example/minimal".to_string()),
        ..Preset::default()
    };
    let mut server = Server::new(&[("dev", dev()), ("minimal", minimal)]);
    server.sandbox.default_preset = Some("dev".to_string());
    let new = server
        .resolve(AgentRequest {
            preset: Some("minimal".to_string()),
            ..named("a")
        })
        .unwrap();
    assert_eq!(new.preset.as_deref(), Some("minimal"));
    assert_eq!(new.image, "example/minimal");
    assert_eq!(new.cpus, server.sandbox.default_cpus);
    assert_eq!(new.runtime, "runc");
}

#[test]
fn a_disk_of_zero_in_the_preset_or_the_defaults_is_a_home_without_a_limit() {
    let unlimited = Preset {
        disk_mb: Some(0),
        ..Preset::default()
    };
    let mut server = Server::new(&[("unlimited", unlimited)]);
    let request = AgentRequest {
        preset: Some("unlimited".to_string()),
        ..named("a")
    };
    assert_eq!(server.resolve(request).unwrap().disk_mb, None);
    server.sandbox.default_disk_mb = 0;
    assert_eq!(server.resolve(named("b")).unwrap().disk_mb, None);
}

#[test]
fn an_unknown_preset_is_refused_naming_the_known_ones() {
    let request = || AgentRequest {
        preset: Some("nope".to_string()),
        ..named("a")
    };
    assert_eq!(
        refusal(Server::new(&[("dev", dev()), ("ml", dev())]).resolve(request())),
        (
            "preset",
            "no preset \"nope\"; the presets are: dev, ml".to_string()
        )
    );
    assert_eq!(
        refusal(Server::new(&[]).resolve(request())),
        (
            "preset",
            "no preset \"nope\"; this server has none".to_string()
        )
    );
}

/// Each setting out of its bounds, its field and message: a create and an update refuse it
/// alike.
fn out_of_bounds() -> Vec<(AgentPatch, &'static str, &'static str)> {
    let patch = AgentPatch::default;
    vec![
        (
            AgentPatch {
                image: Some(String::new()),
                ..patch()
            },
            "image",
            "image must be 1 to 255 characters",
        ),
        (
            AgentPatch {
                image: Some("a b".to_string()),
                ..patch()
            },
            "image",
            "image may hold only printable ASCII characters, without spaces",
        ),
        (
            AgentPatch {
                cpus: Some(0.0),
                ..patch()
            },
            "cpus",
            "cpus must be above 0 and at most 8",
        ),
        (
            AgentPatch {
                cpus: Some(f64::NAN),
                ..patch()
            },
            "cpus",
            "cpus must be above 0 and at most 8",
        ),
        (
            AgentPatch {
                memory_mb: Some(15),
                ..patch()
            },
            "memoryMb",
            "memoryMb must be between 16 and 16384",
        ),
        (
            AgentPatch {
                disk_mb: Some(63),
                ..patch()
            },
            "diskMb",
            "diskMb must be between 64 and 102400",
        ),
        (
            AgentPatch {
                idle_minutes: Some(MAX_IDLE_MINUTES + 1),
                ..patch()
            },
            "idleMinutes",
            "idleMinutes must be at most 10080 (0 = never sleep)",
        ),
        (
            AgentPatch {
                deep_sleep_minutes: Some(MAX_IDLE_MINUTES + 1),
                ..patch()
            },
            "deepSleepMinutes",
            "deepSleepMinutes must be at most 10080 (0 = never pause)",
        ),
        (
            AgentPatch {
                env: Some(vars(&[("HTTP_PROXY", "x")])),
                ..patch()
            },
            "env",
            "env: HTTP_PROXY is set by the server (the egress proxy's variables and AGENTHOLD_* \
             are reserved)",
        ),
        (
            AgentPatch {
                runtime: Some("kata".to_string()),
                ..patch()
            },
            "runtime",
            "runtime \"kata\" is not allowed on this server; allowed: runc, runsc",
        ),
        (
            AgentPatch {
                labels: Some(vars(&[("Team", "x")])),
                ..patch()
            },
            "labels",
            "labels: label key \"Team\" may only hold lowercase letters, digits and . _ / -",
        ),
        (
            AgentPatch {
                ttl_minutes: Some(Some(MAX_TTL_MINUTES + 1)),
                ..patch()
            },
            "ttlMinutes",
            "ttlMinutes must be between 1 and 525600 (a year)",
        ),
    ]
}

#[test]
fn each_setting_out_of_bounds_is_refused_in_its_field() {
    let server = Server::new(&[]);
    for (patch, field, why) in out_of_bounds() {
        let request = AgentRequest {
            name: "a".to_string(),
            preset: None,
            image: patch.image.clone(),
            cpus: patch.cpus,
            memory_mb: patch.memory_mb,
            disk_mb: patch.disk_mb,
            idle_minutes: patch.idle_minutes,
            deep_sleep_minutes: patch.deep_sleep_minutes,
            egress: patch.egress.clone().map(|c| c.apply(Default::default())),
            env: patch.env.clone(),
            secrets: None,
            runtime: patch.runtime.clone(),
            ttl_minutes: patch.ttl_minutes,
            labels: patch.labels.clone(),
            allow_root: patch.allow_root,
            approvals: Default::default(),
            access: None,
        };
        let expected = (field, why.to_string());
        assert_eq!(refusal(server.resolve(request)), expected, "create");
        assert_eq!(refusal(server.check_patch(&patch)), expected, "update");
    }
    let rename = AgentPatch {
        name: Some("-a".to_string()),
        ..AgentPatch::default()
    };
    assert_eq!(refusal(server.check_patch(&rename)).0, "name");
    assert!(server.check_patch(&AgentPatch::default()).is_ok());
}

#[test]
fn the_first_setting_that_breaks_its_rule_is_the_one_named() {
    let server = Server::new(&[]);
    let request = AgentRequest {
        cpus: Some(99.0),
        memory_mb: Some(1),
        preset: Some("nope".to_string()),
        ..named("Bad")
    };
    assert_eq!(refusal(server.resolve(request.clone())).0, "name");
    let request = AgentRequest {
        name: "good".to_string(),
        ..request
    };
    assert_eq!(refusal(server.resolve(request)).0, "cpus");
}

#[test]
fn a_disk_is_refused_by_a_server_that_cannot_limit_one() {
    let mut server = Server::new(&[]);
    server.no_disk_limits = Some("no loop devices".to_string());
    let expected = (
        "diskMb",
        "this server cannot limit an agent's disk: no loop devices".to_string(),
    );
    let request = AgentRequest {
        disk_mb: Some(1024),
        ..named("a")
    };
    assert_eq!(refusal(server.resolve(request)), expected);
    let patch = AgentPatch {
        disk_mb: Some(1024),
        ..AgentPatch::default()
    };
    assert_eq!(refusal(server.check_patch(&patch)), expected);
}

#[test]
fn env_is_checked_on_its_own_and_merged_with_the_presets() {
    let many = |prefix: &str, n: usize| -> BTreeMap<String, String> {
        (0..n)
            .map(|i| (format!("{prefix}{i}"), String::new()))
            .collect()
    };
    let crowded = Preset {
        env: many("P", env::MAX_VARS),
        ..Preset::default()
    };
    let server = Server::new(&[("crowded", crowded)]);
    // The request's own variables alone are counted first.
    let request = AgentRequest {
        env: Some(many("R", env::MAX_VARS + 1)),
        ..named("a")
    };
    assert_eq!(
        refusal(server.resolve(request)),
        (
            "env",
            "env: names 129 variables; at most 128 are allowed".to_string()
        )
    );
    // Each fits; together they do not.
    let request = AgentRequest {
        preset: Some("crowded".to_string()),
        env: Some(many("R", 1)),
        ..named("a")
    };
    assert_eq!(
        refusal(server.resolve(request)),
        (
            "env",
            "env: names 129 variables; at most 128 are allowed".to_string()
        )
    );
    // A request's variable replaces the preset's of the same name rather than adding one.
    let request = AgentRequest {
        preset: Some("crowded".to_string()),
        env: Some(vars(&[("P0", "mine")])),
        ..named("a")
    };
    let new = server.resolve(request).unwrap();
    assert_eq!(new.env.len(), env::MAX_VARS);
    assert_eq!(new.env["P0"], "mine");
}

#[test]
fn a_presets_runtime_is_checked_against_this_servers() {
    let kata = Preset {
        runtime: Some("kata".to_string()),
        ..Preset::default()
    };
    let server = Server::new(&[("kata", kata)]);
    let request = AgentRequest {
        preset: Some("kata".to_string()),
        ..named("a")
    };
    assert_eq!(
        refusal(server.resolve(request.clone())),
        (
            "runtime",
            "runtime \"kata\" is not allowed on this server; allowed: runc, runsc".to_string()
        )
    );
    // The request's own runtime takes the preset's place.
    let request = AgentRequest {
        runtime: Some("runsc".to_string()),
        ..request
    };
    assert_eq!(server.resolve(request).unwrap().runtime, "runsc");
}

#[test]
fn a_home_only_grows() {
    assert!(check_disk_change(Some(1024), None).is_ok());
    assert!(check_disk_change(None, None).is_ok());
    assert!(check_disk_change(Some(1024), Some(1024)).is_ok());
    assert!(check_disk_change(Some(1024), Some(2048)).is_ok());
    assert_eq!(
        refusal(check_disk_change(Some(2048), Some(1024))),
        (
            "diskMb",
            "diskMb can only grow: the home holds 2048 MiB, not less (1024 asked)".to_string()
        )
    );
    let (field, why) = refusal(check_disk_change(None, Some(1024)));
    assert_eq!(field, "diskMb");
    assert!(
        why.starts_with("this agent's home has no disk limit"),
        "{why}"
    );
}

#[test]
fn a_preset_gives_its_access_and_the_requests_own_wins() {
    use crate::model::teams::AgentAccess;
    let shared = Preset {
        access: Some(AgentAccess::Public),
        ..Preset::default()
    };
    let server = Server::new(&[("shared", shared)]);
    let mut request = named("a");
    request.preset = Some("shared".to_string());
    assert_eq!(
        server.resolve(request.clone()).unwrap().access,
        AgentAccess::Public
    );
    request.access = Some(AgentAccess::Protected);
    assert_eq!(
        server.resolve(request).unwrap().access,
        AgentAccess::Protected
    );
    assert_eq!(
        Server::new(&[]).resolve(named("b")).unwrap().access,
        AgentAccess::Private
    );
}
