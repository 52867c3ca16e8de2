//! What an entry's detail says for each action, kept short: the command line, the path, the
//! prompt's start. Never a token, password, env value or file contents.

use crate::model::teams::ApiToken;

/// The longest detail kept (a command line may be a megabyte).
pub const MAX_CHARS: usize = 2000;
/// How much of a prompt is kept.
pub const PROMPT_CHARS: usize = 200;
/// How much of a tried sign-in name is kept (a real one has at most 63).
pub const NAME_CHARS: usize = 100;

/// `s` cut to `max` characters, with `…` marking the cut.
pub fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

/// A command line as a shell would read it (`sh -c 'echo hi'`).
pub fn command_line(argv: &[String]) -> String {
    let words = argv.iter().map(String::as_str);
    // A NUL cannot be quoted; such a command is refused anyway, so show it plainly.
    shlex::try_join(words.clone()).unwrap_or_else(|_| argv.join(" "))
}

/// The start of a prompt.
pub fn prompt(text: &str) -> String {
    clip(text, PROMPT_CHARS)
}

/// The start of a prompt given as ACP content blocks: their text, one block a line (other
/// blocks, an image or a resource, by their type).
pub fn prompt_blocks(blocks: &[serde_json::Value]) -> String {
    let parts: Vec<&str> = blocks
        .iter()
        .map(|b| {
            b.get("text")
                .and_then(|t| t.as_str())
                .or_else(|| b.get("type").and_then(|t| t.as_str()))
                .unwrap_or("?")
        })
        .collect();
    prompt(&parts.join("\n"))
}

/// A new token: its name, scopes and agents (never its value).
pub fn token(t: &ApiToken) -> String {
    let scopes: Vec<&str> = t.scopes.iter().map(|s| s.as_str()).collect();
    let mut d = format!("{} [{}]", t.name, scopes.join(" "));
    if let Some(agents) = &t.agents {
        let agents: Vec<&str> = agents.iter().map(String::as_str).collect();
        d.push_str(&format!(" agents {}", agents.join(" ")));
    }
    d
}

/// A change of an agent's settings: the fields it sets (`sets env, labels`).
pub fn agent_update(patch: &crate::model::AgentPatch) -> String {
    format!("sets {}", patch.fields().join(", "))
}

/// A change of user `id`: what it sets, a password only as having changed.
pub fn user_update(id: &str, name: Option<&str>, role: Option<&str>, password: bool) -> String {
    let mut d = format!("user {id}");
    if let Some(n) = name {
        d.push_str(&format!(" name={n}"));
    }
    if let Some(r) = role {
        d.push_str(&format!(" role={r}"));
    }
    if password {
        d.push_str(" password changed");
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_are_quoted_and_prompts_clipped() {
        let argv = ["sh", "-c", "echo hi"].map(String::from);
        assert_eq!(command_line(&argv), "sh -c 'echo hi'");
        assert_eq!(prompt(&"é".repeat(300)).chars().count(), PROMPT_CHARS + 1);
        assert_eq!(clip("short", 10), "short");
    }
}
