//! Command-line parsing, checked through a wrapper shaped like main.rs's.

use clap::Parser;

use super::*;

#[derive(Parser, Debug)]
#[command(name = "agenthold")]
struct Cli {
    #[command(flatten)]
    opts: ClientOpts,
    #[command(subcommand)]
    cmd: ClientCommand,
}

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("agenthold").chain(args.iter().copied()))
}

fn ok(args: &[&str]) -> Cli {
    match parse(args) {
        Ok(cli) => cli,
        Err(e) => panic!("{args:?}: {e}"),
    }
}

#[test]
fn the_wrapper_is_a_valid_clap_command() {
    use clap::CommandFactory;
    Cli::command().debug_assert();
}

#[test]
fn agents_subcommands() {
    assert!(matches!(
        ok(&["agents", "list"]).cmd,
        ClientCommand::Agents(AgentsCommand::List)
    ));
    assert!(matches!(
        ok(&["agents", "ls"]).cmd,
        ClientCommand::Agents(AgentsCommand::List)
    ));
    match ok(&[
        "agents",
        "create",
        "builder",
        "--image",
        "busybox",
        "--cpus",
        "0.5",
        "--memory-mb",
        "512",
        "--disk-mb",
        "2048",
        "--idle-minutes",
        "5",
        "--runtime",
        "runsc",
        "--allow",
        "pypi.org",
        "--allow",
        "*.pythonhosted.org:443",
        "--deny",
        "203.0.113.0/24",
        "--preset",
        "dev",
        "--env",
        "A=b=c",
        "--env",
        "EMPTY=",
        "--ttl-minutes",
        "30",
        "--label",
        "team=ml",
        "--allow-root",
        "--wait",
    ])
    .cmd
    {
        ClientCommand::Agents(AgentsCommand::Create(c)) => assert_eq!(
            *c,
            CreateArgs {
                name: "builder".into(),
                preset: Some("dev".into()),
                env: vec![("A".into(), "b=c".into()), ("EMPTY".into(), String::new())],
                secrets: Vec::new(),
                image: Some("busybox".into()),
                cpus: Some(0.5),
                memory_mb: Some(512),
                disk_mb: Some(2048),
                idle_minutes: Some(5),
                deep_sleep_minutes: None,
                runtime: Some("runsc".into()),
                allow: vec![
                    "pypi.org".parse().unwrap(),
                    "*.pythonhosted.org:443".parse().unwrap()
                ],
                deny: vec!["203.0.113.0/24".parse().unwrap()],
                ttl_minutes: Some(30),
                labels: vec![("team".into(), "ml".into())],
                allow_root: Some(true),
                approvals: Default::default(),
                wait: true,
            }
        ),
        other => panic!("{other:?}"),
    }
    for (verb, wait) in [
        ("start", true),
        ("stop", false),
        ("rebuild", true),
        ("rm", true),
        ("destroy", true),
        ("delete", false),
    ] {
        let mut args = vec!["agents", verb, "builder"];
        if wait {
            args.push("--wait");
        }
        let expected = ActionArgs {
            agent: "builder".into(),
            wait,
        };
        match ok(&args).cmd {
            ClientCommand::Agents(
                AgentsCommand::Start(a)
                | AgentsCommand::Stop(a)
                | AgentsCommand::Rebuild(a)
                | AgentsCommand::Rm(a),
            ) => assert_eq!(a, expected, "{verb}"),
            other => panic!("{verb}: {other:?}"),
        }
    }
    assert!(parse(&["agents", "create"]).is_err());
    assert!(parse(&["agents", "create", "x", "--memory-mb", "lots"]).is_err());
}

#[test]
fn global_options_go_anywhere() {
    let cli = ok(&[
        "agents",
        "list",
        "--json",
        "--server",
        "http://h:1",
        "--token",
        "t",
    ]);
    assert!(cli.opts.json);
    assert_eq!(cli.opts.server, "http://h:1");
    assert_eq!(cli.opts.token.as_deref(), Some("t"));
    let cli = ok(&["--json", "agents", "show", "b"]);
    assert!(cli.opts.json);
}

#[test]
fn exec_takes_options_then_the_command_after_dashes() {
    let cli = ok(&[
        "exec",
        "builder",
        "--cwd",
        "src",
        "--env",
        "A=1",
        "-e",
        "B=x=y",
        "--timeout",
        "30",
        "--",
        "sh",
        "-c",
        "make --jobs 4",
    ]);
    match cli.cmd {
        ClientCommand::Exec(e) => {
            assert_eq!(e.agent, "builder");
            assert_eq!(e.cwd.as_deref(), Some("src"));
            assert_eq!(
                e.env,
                [("A".into(), "1".into()), ("B".into(), "x=y".into())]
            );
            assert_eq!(e.timeout, Some(30));
            assert!(!e.no_stdin);
            assert_eq!(e.command, ["sh", "-c", "make --jobs 4"]);
        }
        other => panic!("{other:?}"),
    }
    // Options meant for the command are never taken as ours.
    match ok(&["exec", "b", "--", "ls", "--json", "--timeout", "1"]).cmd {
        ClientCommand::Exec(e) => {
            assert_eq!(e.command, ["ls", "--json", "--timeout", "1"]);
            assert_eq!(e.timeout, None);
        }
        other => panic!("{other:?}"),
    }
    assert!(parse(&["exec", "b"]).is_err(), "a command is required");
    assert!(
        parse(&["exec", "b", "--"]).is_err(),
        "a command is required"
    );
    assert!(parse(&["exec", "b", "--env", "novalue", "--", "ls"]).is_err());
    assert!(parse(&["exec", "b", "--timeout", "0", "--", "ls"]).is_err());
    match ok(&["exec", "--user", "root", "b", "--", "id"]).cmd {
        ClientCommand::Exec(e) => assert_eq!(e.user, Some(crate::api::types::RunUser::Root)),
        other => panic!("{other:?}"),
    }
    match ok(&["exec", "b", "--", "id"]).cmd {
        ClientCommand::Exec(e) => assert_eq!(e.user, None),
        other => panic!("{other:?}"),
    }
    assert!(parse(&["exec", "--user", "admin", "b", "--", "id"]).is_err());
}

#[test]
fn shell_and_cp() {
    match ok(&["shell", "builder"]).cmd {
        ClientCommand::Shell(s) => assert_eq!(s.agent, "builder"),
        other => panic!("{other:?}"),
    }
    match ok(&["cp", "./a b.txt", "builder:dir/"]).cmd {
        ClientCommand::Cp(c) => {
            assert_eq!(c.src, "./a b.txt");
            assert_eq!(c.dst, "builder:dir/");
        }
        other => panic!("{other:?}"),
    }
    assert!(parse(&["cp", "only-one"]).is_err());
}

#[test]
fn sessions_list_new_and_delete() {
    match ok(&["sessions", "builder"]).cmd {
        ClientCommand::Sessions(s) => assert_eq!(
            s,
            SessionsArgs {
                agent: "builder".into(),
                new: false,
                harness: None,
                cwd: None,
                title: None,
                delete: None,
            }
        ),
        other => panic!("{other:?}"),
    }
    match ok(&[
        "sessions",
        "builder",
        "--new",
        "--harness",
        "claude",
        "--cwd",
        "/home/agent/src",
        "--title",
        "a title",
    ])
    .cmd
    {
        ClientCommand::Sessions(s) => {
            assert!(s.new);
            assert_eq!(s.harness.as_deref(), Some("claude"));
            assert_eq!(s.cwd.as_deref(), Some("/home/agent/src"));
            assert_eq!(s.title.as_deref(), Some("a title"));
        }
        other => panic!("{other:?}"),
    }
    match ok(&["sessions", "builder", "--delete", "s1"]).cmd {
        ClientCommand::Sessions(s) => assert_eq!(s.delete.as_deref(), Some("s1")),
        other => panic!("{other:?}"),
    }
    assert!(parse(&["sessions"]).is_err());
    assert!(
        parse(&["sessions", "b", "--harness", "x"]).is_err(),
        "--harness goes with --new"
    );
    assert!(parse(&["sessions", "b", "--new", "--delete", "s1"]).is_err());
}

#[test]
fn chat_takes_an_optional_prompt_of_words() {
    match ok(&["chat", "builder"]).cmd {
        ClientCommand::Chat(c) => {
            assert_eq!(c.agent, "builder");
            assert!(c.prompt.is_empty() && c.session.is_none() && !c.no_approve);
        }
        other => panic!("{other:?}"),
    }
    match ok(&[
        "chat",
        "--no-approve",
        "builder",
        "--session",
        "s1",
        "stream",
        "3",
    ])
    .cmd
    {
        ClientCommand::Chat(c) => {
            assert_eq!(c.prompt, ["stream", "3"]);
            assert_eq!(c.session.as_deref(), Some("s1"));
            assert!(c.no_approve);
        }
        other => panic!("{other:?}"),
    }
    match ok(&["chat", "b", "Add a README, please"]).cmd {
        ClientCommand::Chat(c) => assert_eq!(c.prompt, ["Add a README, please"]),
        other => panic!("{other:?}"),
    }
    assert!(parse(&["chat"]).is_err());
}

#[test]
fn approvals_and_approve() {
    match ok(&["approvals"]).cmd {
        ClientCommand::Approvals(a) => assert_eq!(
            a,
            ApprovalsArgs {
                all: false,
                agent: None
            }
        ),
        other => panic!("{other:?}"),
    }
    match ok(&["approvals", "--all", "--agent", "builder"]).cmd {
        ClientCommand::Approvals(a) => {
            assert!(a.all);
            assert_eq!(a.agent.as_deref(), Some("builder"));
        }
        other => panic!("{other:?}"),
    }
    match ok(&["approve", "ap1", "Allow once"]).cmd {
        ClientCommand::Approve(a) => assert_eq!(
            a,
            ApproveArgs {
                id: "ap1".into(),
                option: "Allow once".into()
            }
        ),
        other => panic!("{other:?}"),
    }
    assert!(parse(&["approve", "ap1"]).is_err(), "an option is required");
}

#[test]
fn ports_preview_and_previews() {
    use crate::api::types::PreviewAccess;
    match ok(&["ports", "builder"]).cmd {
        ClientCommand::Ports(p) => assert_eq!(p.agent, "builder"),
        other => panic!("{other:?}"),
    }
    match ok(&["preview", "builder", "5173"]).cmd {
        ClientCommand::Preview(p) => assert_eq!(
            p,
            PreviewArgs {
                agent: "builder".into(),
                port: 5173,
                access: None,
                public: false,
                expires_in_minutes: None,
                open: false,
            }
        ),
        other => panic!("{other:?}"),
    }
    match ok(&[
        "preview",
        "b",
        "8000",
        "--access",
        "token",
        "--expires-in-minutes",
        "60",
        "--open",
    ])
    .cmd
    {
        ClientCommand::Preview(p) => {
            assert_eq!(p.access, Some(PreviewAccess::Token));
            assert_eq!((p.expires_in_minutes, p.open), (Some(60), true));
        }
        other => panic!("{other:?}"),
    }
    match ok(&["preview", "b", "8000", "--public"]).cmd {
        ClientCommand::Preview(p) => assert!(p.public && p.access.is_none()),
        other => panic!("{other:?}"),
    }
    // The global --token (the API token) still works after the subcommand.
    let cli = ok(&["preview", "b", "8000", "--token", "t0k"]);
    assert_eq!(cli.opts.token.as_deref(), Some("t0k"));

    for bad in [
        &["preview", "b", "0"][..],
        &["preview", "b", "70000"],
        &["preview", "b", "http"],
        &["preview", "b"],
        &["preview", "b", "80", "--access", "secret"],
        &["preview", "b", "80", "--access", "public", "--public"],
        &["preview", "b", "80", "--expires-in-minutes", "0"],
        &["preview", "b", "80", "--expires-in-minutes", "525601"],
    ] {
        assert!(parse(bad).is_err(), "{bad:?}");
    }
    let e = match parse(&["preview", "b", "0"]) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("port 0 parsed"),
    };
    assert!(e.contains("1..=65535"), "{e}");

    match ok(&["previews", "b", "--delete", "5173"]).cmd {
        ClientCommand::Previews(p) => assert_eq!(
            p,
            PreviewsArgs {
                agent: "b".into(),
                delete: Some("5173".into())
            }
        ),
        other => panic!("{other:?}"),
    }
}
