//! `agenthold ports AGENT`, `agenthold preview AGENT PORT` and `agenthold previews AGENT`: what
//! listens in a sandbox, and the URLs that open it from a browser (docs/api.md, "Ports and
//! previews").
//!
//! `preview` is meant to be run again and again (`$(agenthold preview builder 5173)` in a
//! script): a port that has a preview already gets that one's URL, as long as it is the access
//! asked for. A `token` preview is the exception: its token is in the answer to its creation
//! only, so its URL cannot be printed twice.

use std::fmt;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use serde_json::Value;

use super::client::ApiClient;
use super::error::ClientError;
use super::output::{json, plain_table, render};
use crate::api::types::{AgentState, CreatePreview, ListeningPort, Preview, PreviewAccess};

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct PortsArgs {
    /// Agent id or name
    pub agent: String,
}

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct PreviewArgs {
    /// Agent id or name
    pub agent: String,
    /// The port in the sandbox (something listening on 127.0.0.1, ::1, 0.0.0.0 or ::)
    #[arg(value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    /// Who may open it: private (people signed in to the web UI, and the admin token), token
    /// (whoever has the preview's own token, printed once), public (anyone who reaches the
    /// preview listener) [default: private]
    #[arg(long, value_name = "ACCESS", value_parser = access_parser(), conflicts_with = "public")]
    pub access: Option<PreviewAccess>,
    /// Anyone who reaches the preview listener may open it (--access public)
    #[arg(long)]
    pub public: bool,
    /// The URL stops working this many minutes from now (1 to 525600; default: until the
    /// preview is deleted or the agent destroyed)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=525_600))]
    pub expires_in_minutes: Option<u32>,
    /// Open it in the browser too (a private one through the web UI's sign-in)
    #[arg(long)]
    pub open: bool,
}

impl PreviewArgs {
    fn access(&self) -> PreviewAccess {
        if self.public {
            PreviewAccess::Public
        } else {
            self.access.unwrap_or_default()
        }
    }
}

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct PreviewsArgs {
    /// Agent id or name
    pub agent: String,
    /// Delete a preview, by its id or its port: its URL answers 410 from now on, and the
    /// connections open through it are cut
    #[arg(long, value_name = "ID|PORT")]
    pub delete: Option<String>,
}

/// `--access`: the API's own words, read by the API's own type (so the CLI cannot drift from
/// it), with the words listed in `--help` and in the error for any other.
fn access_parser() -> impl TypedValueParser<Value = PreviewAccess> {
    PossibleValuesParser::new(["private", "token", "public"])
        .try_map(|word| serde_json::from_value::<PreviewAccess>(Value::String(word)))
}

fn access_word(access: PreviewAccess) -> &'static str {
    match access {
        PreviewAccess::Private => "private",
        PreviewAccess::Token => "token",
        PreviewAccess::Public => "public",
    }
}

/// Why `preview` did not print a URL although the port has a preview.
#[derive(Debug, thiserror::Error)]
pub enum PreviewRefused {
    /// The port's preview has another access than the one asked for: changing who may open a
    /// URL is not something to do as a side effect.
    AccessDiffers {
        agent: String,
        port: u16,
        id: String,
        has: PreviewAccess,
        asked: PreviewAccess,
    },
    /// The port has a `token` preview, whose token the server no longer has.
    TokenShownOnce {
        agent: String,
        port: u16,
        id: String,
    },
    /// `--delete PORT` of a port without a preview.
    NoneOnPort { agent: String, port: u16 },
}

impl fmt::Display for PreviewRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PreviewRefused::AccessDiffers {
                agent,
                port,
                id,
                has,
                asked,
            } => write!(
                f,
                "port {port} of {agent} already has a {} preview ({id}), not a {} one; to \
                 replace it, delete it first: agenthold previews {agent} --delete {id}",
                access_word(*has),
                access_word(*asked),
            ),
            PreviewRefused::TokenShownOnce { agent, port, id } => write!(
                f,
                "port {port} of {agent} already has a token preview ({id}), whose token was \
                 shown only when it was made; for a new token, delete it first: agenthold \
                 previews {agent} --delete {id}"
            ),
            PreviewRefused::NoneOnPort { agent, port } => {
                write!(f, "port {port} of {agent} has no preview")
            }
        }
    }
}

pub(super) async fn ports(
    client: &ApiClient,
    json_out: bool,
    args: PortsArgs,
) -> anyhow::Result<i32> {
    let agent = client.find_agent(&args.agent).await?;
    let ports = client.list_ports(&agent.id).await?;
    if json_out {
        println!("{}", json(&ports)?);
        return Ok(0);
    }
    print!("{}", ports_table(&ports));
    if ports.is_empty() && agent.state != AgentState::Running {
        // An empty list of a sleeping agent says nothing about its apps: say why it is empty.
        eprintln!(
            "{} is {}: nothing listens until it runs (listing does not wake it)",
            agent.name, agent.state
        );
    }
    Ok(0)
}

pub(super) async fn preview(
    client: &ApiClient,
    json_out: bool,
    args: PreviewArgs,
) -> anyhow::Result<i32> {
    let agent = client.find_agent(&args.agent).await?;
    let access = args.access();
    let req = CreatePreview {
        port: args.port,
        access,
        expires_in_minutes: args.expires_in_minutes,
    };
    let preview = match client.create_preview(&agent.id, &req).await {
        Ok(made) => made,
        Err(e) if e.status() == Some(409) => {
            // 409 is also the agent's limit, or an agent being destroyed: only a preview
            // listed on this port means the port is taken.
            let listed = client.list_previews(&agent.id).await?;
            let Some(found) = listed.into_iter().find(|p| p.port == args.port) else {
                return Err(e.into());
            };
            let refused = |p: &Preview| {
                if p.access != access {
                    Some(PreviewRefused::AccessDiffers {
                        agent: agent.name.clone(),
                        port: p.port,
                        id: p.id.clone(),
                        has: p.access,
                        asked: access,
                    })
                } else if p.access == PreviewAccess::Token {
                    Some(PreviewRefused::TokenShownOnce {
                        agent: agent.name.clone(),
                        port: p.port,
                        id: p.id.clone(),
                    })
                } else {
                    None
                }
            };
            if let Some(why) = refused(&found) {
                return Err(why.into());
            }
            eprintln!(
                "port {} already had a preview ({}); it is still open",
                found.port, found.id
            );
            if args.expires_in_minutes.is_some() {
                eprintln!(
                    "it keeps its own expiry: {}",
                    found.expires_at.as_deref().unwrap_or("none")
                );
            }
            found
        }
        Err(e) => return Err(e.into()),
    };
    let url = shown_url(&preview)?;
    if json_out {
        println!("{}", json(&preview)?);
    } else {
        println!("{url}");
    }
    if preview.token.is_some() {
        eprintln!(
            "the token is shown only now: keep this URL (programs may send Authorization: \
             Bearer TOKEN instead of ?token=)"
        );
    }
    if args.open {
        // A browser has none of our credentials: a private preview starts at the API's
        // hand-off, where the web UI's sign-in lets it in; the others open as they are.
        let target = match preview.access {
            PreviewAccess::Private => client.preview_open_url(&preview.id).to_string(),
            PreviewAccess::Token | PreviewAccess::Public => url.clone(),
        };
        match open_in_browser(target).await {
            Ok(()) => eprintln!("opened in the browser"),
            Err(e) => eprintln!("could not open a browser ({e}): open {url} in one yourself"),
        }
    }
    Ok(0)
}

pub(super) async fn previews(
    client: &ApiClient,
    json_out: bool,
    args: PreviewsArgs,
) -> anyhow::Result<i32> {
    let agent = client.find_agent(&args.agent).await?;
    if let Some(which) = &args.delete {
        // Preview ids start with a letter, so digits alone are a port.
        let id = match which.parse::<u16>() {
            Ok(port) => client
                .list_previews(&agent.id)
                .await?
                .into_iter()
                .find(|p| p.port == port)
                .map(|p| p.id)
                .ok_or_else(|| PreviewRefused::NoneOnPort {
                    agent: agent.name.clone(),
                    port,
                })?,
            Err(_) => which.clone(),
        };
        client.delete_preview(&agent.id, &id).await?;
        return Ok(0);
    }
    let previews = client.list_previews(&agent.id).await?;
    if json_out {
        println!("{}", json(&previews)?);
    } else {
        print!("{}", previews_table(&previews));
    }
    Ok(0)
}

/// The URL to give a person: a token preview's carries its token, which the preview's host
/// turns into a cookie for itself alone on the first visit.
fn shown_url(p: &Preview) -> Result<String, ClientError> {
    let Some(token) = &p.token else {
        return Ok(p.url.clone());
    };
    let mut url = reqwest::Url::parse(&p.url)
        .map_err(|e| ClientError::Protocol(format!("the preview URL {:?}: {e}", p.url)))?;
    url.query_pairs_mut().append_pair("token", token);
    Ok(url.to_string())
}

/// Opens `url` in the platform's browser (`$BROWSER`, else xdg-open and the desktop's own
/// openers on Linux). It may wait for a text browser to end, hence its own thread.
async fn open_in_browser(url: String) -> std::io::Result<()> {
    tokio::task::spawn_blocking(move || webbrowser::open(&url))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
}

pub fn ports_table(ports: &[ListeningPort]) -> String {
    let mut table = plain_table();
    table.set_header(["PORT", "ADDRESS", "PROCESS"]);
    for p in ports {
        table.add_row([
            p.port.to_string(),
            p.address.clone(),
            p.process.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    render(&table)
}

pub fn previews_table(previews: &[Preview]) -> String {
    let mut table = plain_table();
    table.set_header(["ID", "PORT", "ACCESS", "URL", "EXPIRES"]);
    for p in previews {
        table.add_row([
            p.id.clone(),
            p.port.to_string(),
            access_word(p.access).to_string(),
            p.url.clone(),
            p.expires_at.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    render(&table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preview(access: PreviewAccess, token: Option<&str>) -> Preview {
        Preview {
            id: "pk3m9x0b2c4d".into(),
            port: 5173,
            access,
            url: "http://5173-builder.localhost:8081/".into(),
            token: token.map(str::to_string),
            created_at: "2026-01-01T00:00:00Z".into(),
            expires_at: None,
        }
    }

    #[test]
    fn a_token_preview_is_shown_with_its_token_in_the_query() {
        let p = preview(PreviewAccess::Token, Some("t0k+/="));
        assert_eq!(
            shown_url(&p).ok().as_deref(),
            Some("http://5173-builder.localhost:8081/?token=t0k%2B%2F%3D")
        );
        let p = preview(PreviewAccess::Public, None);
        assert_eq!(
            shown_url(&p).ok().as_deref(),
            Some("http://5173-builder.localhost:8081/")
        );
    }

    #[test]
    fn the_tables_have_a_line_each() {
        let ports = [
            ListeningPort {
                port: 22,
                address: "0.0.0.0".into(),
                process: None,
            },
            ListeningPort {
                port: 5173,
                address: "127.0.0.1".into(),
                process: Some("node".into()),
            },
        ];
        assert_eq!(
            ports_table(&ports),
            "PORT  ADDRESS    PROCESS\n\
             22    0.0.0.0    -\n\
             5173  127.0.0.1  node\n"
        );
        assert_eq!(
            previews_table(&[preview(PreviewAccess::Private, None)]),
            "ID            PORT  ACCESS   URL                                  EXPIRES\n\
             pk3m9x0b2c4d  5173  private  http://5173-builder.localhost:8081/  -\n"
        );
    }

    #[test]
    fn refusals_say_how_to_delete_the_preview_in_the_way() {
        let e = PreviewRefused::AccessDiffers {
            agent: "builder".into(),
            port: 5173,
            id: "pk1".into(),
            has: PreviewAccess::Private,
            asked: PreviewAccess::Public,
        };
        let text = e.to_string();
        assert!(
            text.contains("already has a private preview (pk1), not a public one"),
            "{text}"
        );
        assert!(
            text.ends_with("agenthold previews builder --delete pk1"),
            "{text}"
        );
    }
}
