//! `agenthold login`: keeps an API token for a server in the user's config directory (mode
//! 0600), which later commands use when neither `--token` nor `AGENTHOLD_TOKEN` gives one.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::Context;
use reqwest::header::{COOKIE, ORIGIN, SET_COOKIE};
use reqwest::Method;

use super::client::ApiClient;
use crate::api::types::{CreateToken, CreatedToken, Me};
use crate::credentials::SESSION_COOKIE;

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct LoginArgs {
    /// Sign in as this user, with the password on the first line of stdin; a token with the
    /// user's scopes is made and kept. Without it, the token on stdin (or --token) is kept.
    pub name: Option<String>,
}

/// Where the tokens are kept: `{"servers": {URL: token}}`.
fn store_path() -> anyhow::Result<PathBuf> {
    let dir = dirs::config_dir().context("this system has no config directory for the user")?;
    Ok(dir.join("agenthold").join("tokens.json"))
}

#[derive(serde::Serialize, serde::Deserialize, Default)]
struct Stored {
    servers: BTreeMap<String, String>,
}

fn read_stored() -> Option<Stored> {
    let text = std::fs::read_to_string(store_path().ok()?).ok()?;
    serde_json::from_str(&text).ok()
}

/// The token kept for `server` by `agenthold login`, if any.
pub fn stored_token(server: &str) -> Option<String> {
    read_stored()?.servers.remove(server.trim_end_matches('/'))
}

fn keep(server: &str, token: &str) -> anyhow::Result<PathBuf> {
    let path = store_path()?;
    let mut stored = read_stored().unwrap_or_default();
    stored
        .servers
        .insert(server.trim_end_matches('/').to_string(), token.to_string());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("making {}", dir.display()))?;
    }
    let mut open = std::fs::OpenOptions::new();
    open.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        open.mode(0o600);
    }
    let mut file = open
        .open(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    // A file made before with wider permissions is narrowed too.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    file.write_all(serde_json::to_string_pretty(&stored)?.as_bytes())?;
    Ok(path)
}

fn first_line_of_stdin() -> anyhow::Result<String> {
    let mut text = String::new();
    std::io::stdin().take(4096).read_to_string(&mut text)?;
    Ok(text
        .lines()
        .next()
        .unwrap_or_default()
        .trim_end()
        .to_string())
}

/// Signs in with a name and password and makes a token with the user's scopes.
async fn token_for(client: &ApiClient, name: &str, password: String) -> anyhow::Result<String> {
    let body = serde_json::json!({ "name": name, "password": password });
    let signed_in = client
        .send(client.request(Method::POST, &["session"]).json(&body))
        .await?;
    let cookie = signed_in
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| {
            v.split(';')
                .next()
                .filter(|kv| kv.starts_with(&format!("{SESSION_COOKIE}=")))
        })
        .context("the server signed in without a session cookie")?
        .to_string();
    // A cookie request that changes something must name the server's own origin.
    let origin = client.server().origin().ascii_serialization();
    let me: Me = client
        .json(client.request(Method::GET, &["me"]).header(COOKIE, &cookie))
        .await?;
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "cli".into());
    let made: CreatedToken = client
        .json(
            client
                .request(Method::POST, &["tokens"])
                .header(COOKIE, &cookie)
                .header(ORIGIN, &origin)
                .json(&CreateToken {
                    name: format!(
                        "agenthold login ({})",
                        host.chars().take(40).collect::<String>()
                    ),
                    scopes: me.scopes,
                    agents: None,
                    expires_in_days: None,
                    supervised: false,
                    approvals: None,
                }),
        )
        .await?;
    // The session is not needed any more.
    let _ = client
        .send(
            client
                .request(Method::DELETE, &["session"])
                .header(COOKIE, &cookie)
                .header(ORIGIN, &origin),
        )
        .await;
    Ok(made.token)
}

pub(super) async fn run(server: &str, token: Option<&str>, args: LoginArgs) -> anyhow::Result<i32> {
    let token = match (&args.name, token) {
        (Some(name), _) => {
            let password = first_line_of_stdin()?;
            token_for(&ApiClient::new(server, None)?, name, password).await?
        }
        (None, Some(t)) => t.to_string(),
        (None, None) => first_line_of_stdin()?,
    };
    // Kept only once the server has taken it.
    let me: Me = {
        let client = ApiClient::new(server, Some(&token))?;
        client.json(client.request(Method::GET, &["me"])).await?
    };
    let path = keep(server, &token)?;
    eprintln!(
        "agenthold: signed in to {server} as {} ({}); the token is kept in {}",
        me.user.name,
        me.user.role.as_str(),
        path.display()
    );
    Ok(0)
}
