//! `agenthold agents …`: the agent lifecycle.

use std::io::Write;

use super::client::ApiClient;
use super::output;
use super::types::AgentAction;
use super::wait::{Goal, Watch};
use crate::api::types::{Agent, CreateAgent, EgressRules};
use crate::egress::Rule;
use crate::model::teams::{AgentApprovals, CommandApprovals};

#[derive(clap::Subcommand, Debug)]
pub enum AgentsCommand {
    /// List agents
    #[command(visible_alias = "ls")]
    List,
    /// Create an agent; it goes on to start in the background
    Create(Box<CreateArgs>),
    /// Show one agent
    Show {
        /// Agent id or name
        agent: String,
    },
    /// Start a sleeping or failed agent
    Start(ActionArgs),
    /// Stop an agent; its home directory is kept
    Stop(ActionArgs),
    /// Pause a running agent now: its processes and memory are kept, it uses no CPU, and any
    /// use wakes it at once
    Pause(ActionArgs),
    /// Recreate an agent's container with its current settings; the home directory is kept
    Rebuild(ActionArgs),
    /// Remove an agent with its container and home directory (asks no question); `destroy` is
    /// the same, the word the API and the events use
    #[command(visible_aliases = ["destroy", "delete"])]
    Rm(ActionArgs),
}

#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct CreateArgs {
    /// Unique name for the agent
    pub name: String,
    /// A preset (`agenthold presets` lists them; default: the server's); options given here
    /// override its values
    #[arg(long)]
    pub preset: Option<String>,
    /// A variable every process of the agent starts with, as NAME=VALUE; repeat for more
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env_pair)]
    pub env: Vec<(String, String)>,
    /// A secret (`agenthold secrets list`) to grant the agent: its sandbox sees the variable
    /// NAME holding a placeholder the egress proxy swaps for the value on the way to the
    /// secret's hosts; repeat for more (replaces the preset's)
    #[arg(long = "secret", value_name = "NAME")]
    pub secrets: Vec<String>,
    /// Container image (default: the preset's, else the server's)
    #[arg(long)]
    pub image: Option<String>,
    /// CPU limit, in cores (default: the server's)
    #[arg(long)]
    pub cpus: Option<f64>,
    /// Memory limit in MiB (default: the server's)
    #[arg(long, value_name = "MB")]
    pub memory_mb: Option<u64>,
    /// Size of the agent's home in MiB (default: the server's)
    #[arg(long, value_name = "MB")]
    pub disk_mb: Option<u64>,
    /// Minutes without use before the agent sleeps
    #[arg(long, value_name = "MINUTES")]
    pub idle_minutes: Option<u32>,
    /// Minutes an idle agent stays paused (processes kept) before it is stopped; 0 = never
    /// pause (default: the preset's, else the server's)
    #[arg(long, value_name = "MINUTES")]
    pub deep_sleep_minutes: Option<u32>,
    /// Container runtime: runc, or runsc for gVisor's stronger isolation (default: the
    /// server's; `runtimes` in /api/v1/limits lists those allowed)
    #[arg(long)]
    pub runtime: Option<String>,
    /// A destination the sandbox may reach (pypi.org, *.pythonhosted.org, 203.0.113.0/24, *;
    /// optionally :PORT); repeat for more. With neither --allow nor --deny, the server's default
    #[arg(long, value_name = "RULE")]
    pub allow: Vec<Rule>,
    /// A destination the sandbox may not reach, even when allowed; repeat for more
    #[arg(long, value_name = "RULE")]
    pub deny: Vec<Rule>,
    /// Destroy the agent this many minutes after its creation (1-525600; default: the
    /// preset's, else never)
    #[arg(long, value_name = "MINUTES")]
    pub ttl_minutes: Option<u32>,
    /// A label, as KEY=VALUE; repeat for more (`GET /api/v1/agents?label=KEY=VALUE` selects
    /// agents by them)
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_env_pair)]
    pub labels: Vec<(String, String)>,
    /// Let the agent become root in its sandbox (sudo; `exec --user root`); `--allow-root=false`
    /// refuses it even where the preset allows it (default: the preset's; `dev` allows it)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub allow_root: Option<bool>,
    /// Which commands of others than the agent's owner and admins (or of supervised tokens)
    /// wait for approval: never, dangerous (matching `approvals.dangerous_patterns`) or always
    /// (default: the preset's, else never)
    #[arg(long, value_name = "WHICH", value_parser = parse_command_approvals)]
    pub approvals: Option<CommandApprovals>,
    /// Wait until the agent is running (non-zero exit if it fails)
    #[arg(long)]
    pub wait: bool,
}

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct ActionArgs {
    /// Agent id or name
    pub agent: String,
    /// Wait until the operation has finished (non-zero exit if it fails)
    #[arg(long)]
    pub wait: bool,
}

fn parse_env_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not NAME=VALUE")),
    }
}

pub(super) async fn run(client: &ApiClient, json: bool, cmd: AgentsCommand) -> anyhow::Result<i32> {
    let now = chrono::Utc::now;
    match cmd {
        AgentsCommand::List => {
            let agents = client.list_agents().await?;
            if json {
                print(&output::json(&agents)?)?;
            } else {
                print(&output::agents_table(&agents, now()))?;
            }
        }
        AgentsCommand::Show { agent } => {
            let agent = client.find_agent(&agent).await?;
            if json {
                print(&output::json(&agent)?)?;
            } else {
                print(&output::agent_details(&agent, now()))?;
            }
        }
        AgentsCommand::Create(args) => {
            let args = *args;
            let req = CreateAgent {
                name: args.name,
                preset: args.preset,
                env: (!args.env.is_empty()).then(|| args.env.into_iter().collect()),
                secrets: (!args.secrets.is_empty()).then_some(args.secrets),
                image: args.image,
                cpus: args.cpus,
                memory_mb: args.memory_mb,
                disk_mb: args.disk_mb,
                idle_minutes: args.idle_minutes,
                deep_sleep_minutes: args.deep_sleep_minutes,
                egress: (!args.allow.is_empty() || !args.deny.is_empty()).then_some(EgressRules {
                    allow: args.allow,
                    deny: args.deny,
                }),
                runtime: args.runtime,
                ttl_minutes: args.ttl_minutes.map(Some),
                labels: (!args.labels.is_empty()).then(|| args.labels.into_iter().collect()),
                allow_root: args.allow_root,
                approvals: args.approvals.map(|commands| AgentApprovals { commands }),
                access: None,
            };
            let watch = watch_if(client, args.wait).await;
            let agent = client.create_agent(&req).await?;
            let agent = settle(client, watch, agent, Goal::Running).await?;
            show_one(json, &agent)?;
        }
        AgentsCommand::Start(args) => act(client, json, args, AgentAction::Start).await?,
        AgentsCommand::Stop(args) => act(client, json, args, AgentAction::Stop).await?,
        AgentsCommand::Pause(args) => act(client, json, args, AgentAction::Pause).await?,
        AgentsCommand::Rebuild(args) => act(client, json, args, AgentAction::Rebuild).await?,
        AgentsCommand::Rm(args) => {
            let target = client.find_agent(&args.agent).await?;
            let watch = watch_if(client, args.wait).await;
            let agent = client.delete_agent(&target.id).await?;
            settle(client, watch, agent.clone(), Goal::Gone).await?;
            if json {
                print(&output::json(&agent)?)?;
            } else {
                let verb = if args.wait { "removed" } else { "removing" };
                print(&format!("{verb} {} ({})\n", agent.name, agent.id))?;
            }
        }
    }
    Ok(0)
}

async fn act(
    client: &ApiClient,
    json: bool,
    args: ActionArgs,
    action: AgentAction,
) -> anyhow::Result<()> {
    let target = client.find_agent(&args.agent).await?;
    let watch = watch_if(client, args.wait).await;
    let agent = client.action(&target.id, action).await?;
    let goal = match action {
        AgentAction::Start | AgentAction::Rebuild => Goal::Running,
        AgentAction::Stop => Goal::Sleeping,
        AgentAction::Pause => Goal::Paused,
    };
    let agent = settle(client, watch, agent, goal).await?;
    show_one(json, &agent)
}

/// Starts watching before the operation is asked for, so none of its transitions is missed.
async fn watch_if(client: &ApiClient, wait: bool) -> Option<Watch> {
    if wait {
        Some(Watch::start(client).await)
    } else {
        None
    }
}

async fn settle(
    client: &ApiClient,
    watch: Option<Watch>,
    agent: Agent,
    goal: Goal,
) -> anyhow::Result<Agent> {
    match watch {
        Some(w) => w.until(client, agent, goal).await,
        None => Ok(agent),
    }
}

fn show_one(json: bool, agent: &Agent) -> anyhow::Result<()> {
    if json {
        print(&output::json(agent)?)
    } else {
        print(&output::agents_table(
            std::slice::from_ref(agent),
            chrono::Utc::now(),
        ))
    }
}

fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

fn parse_command_approvals(s: &str) -> Result<CommandApprovals, String> {
    CommandApprovals::parse(s)
        .ok_or_else(|| format!("{s:?} is not one of never, dangerous, always"))
}
