//! `agenthold secrets …`: the server's secrets (admins). A value is read from stdin, never from
//! the command line, where `ps` and shell history would show it.

use std::io::Read;

use super::client::ApiClient;
use super::output::{json, plain_table, render};
use crate::api::types::{PutSecret, Secret};
use crate::egress::Rule;

#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum SecretsCommand {
    /// Set a secret, its value from stdin: echo -n "$KEY" | agenthold secrets set NAME --host H
    Set {
        /// Also the env variable granted agents see (holding a placeholder)
        name: String,
        /// A destination the value may be sent to (repeat): api.example.com, *.example.com:443
        #[arg(long = "host", required = true)]
        hosts: Vec<Rule>,
        /// The request header it goes in (default Authorization)
        #[arg(long)]
        header: Option<String>,
        /// The header's value, {value} standing for the secret (default "Bearer {value}")
        #[arg(long)]
        format: Option<String>,
        /// Replace a placeholder in form and JSON request bodies too
        #[arg(long)]
        in_body: bool,
    },
    /// List the secrets (names, hosts, header; never values)
    List,
    /// Delete a secret
    Rm { name: String },
}

/// The value on stdin: everything up to its end, without one trailing line break (as `echo`
/// and here-strings add).
fn read_value() -> anyhow::Result<String> {
    let mut text = String::new();
    std::io::stdin().take(64 * 1024).read_to_string(&mut text)?;
    let value = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text);
    if value.is_empty() {
        anyhow::bail!("no value on stdin: pipe the secret in, e.g. `printf %s \"$KEY\" | agenthold secrets set NAME --host HOST`");
    }
    Ok(value.to_string())
}

pub(super) async fn run(
    client: &ApiClient,
    json_out: bool,
    cmd: SecretsCommand,
) -> anyhow::Result<i32> {
    match cmd {
        SecretsCommand::Set {
            name,
            hosts,
            header,
            format,
            in_body,
        } => {
            let body = PutSecret {
                value: read_value()?,
                hosts,
                header,
                format,
                in_body,
            };
            let secret = client.put_secret(&name, &body).await?;
            if json_out {
                println!("{}", json(&secret)?);
            } else {
                eprintln!("agenthold: secret {} set", secret.name);
            }
        }
        SecretsCommand::List => {
            let secrets = client.list_secrets().await?;
            if json_out {
                println!("{}", json(&secrets)?);
            } else {
                print!("{}", secrets_table(&secrets));
            }
        }
        SecretsCommand::Rm { name } => client.delete_secret(&name).await?,
    }
    Ok(0)
}

pub fn secrets_table(secrets: &[Secret]) -> String {
    let mut table = plain_table();
    table.set_header(vec!["NAME", "HOSTS", "HEADER", "FORMAT", "UPDATED"]);
    for s in secrets {
        let hosts: Vec<String> = s.hosts.iter().map(ToString::to_string).collect();
        table.add_row(vec![
            s.name.clone(),
            hosts.join(","),
            s.header.clone(),
            s.format.clone(),
            s.updated_at.to_rfc3339(),
        ]);
    }
    render(&table)
}
