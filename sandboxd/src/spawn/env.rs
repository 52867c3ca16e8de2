//! The environment shells and commands start with: nothing inherited from sandboxd but what the
//! image itself sets for its programs (see [`IMAGE_ENV_KEPT`]).

use agenthold_proto::RunAs;

use crate::sandbox::Sandbox;

pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The image's variables every program keeps: its `PATH` (a virtual environment or a tool's
/// bin first, as `ENV PATH=…` puts it) and the `VIRTUAL_ENV` that goes with it. Docker hands
/// the image's `ENV` to sandboxd, the container's first process; the rest of it is sandboxd's
/// own business.
pub const IMAGE_ENV_KEPT: [&str; 2] = ["PATH", "VIRTUAL_ENV"];

/// The image's variables of [`IMAGE_ENV_KEPT`], read from our own environment (in a container,
/// the image's `ENV`); `PATH` falls back to [`PATH`].
pub fn image_env() -> Vec<(String, String)> {
    let mut env = vec![("PATH".to_string(), PATH.to_string())];
    for key in IMAGE_ENV_KEPT {
        if let Some(v) = std::env::var(key).ok().filter(|v| !v.is_empty()) {
            env.retain(|(k, _)| k != key);
            env.push((key.to_string(), v));
        }
    }
    env
}

/// The account's own variables (or root's, for a command run as root), the image's
/// ([`image_env`], as the options carry them), then the ones the server hands every program
/// (boot.json's `env`: the egress proxy's).
pub fn base(sb: &Sandbox, user: RunAs) -> Vec<(String, String)> {
    let account = sb.account();
    let (name, home) = match user {
        RunAs::Agent => (
            account.name.clone(),
            sb.options().home.to_string_lossy().into_owned(),
        ),
        // Root's own home, so what root writes there (caches, dotfiles) stays out of the
        // account's.
        RunAs::Root => ("root".to_string(), "/root".to_string()),
    };
    let mut env = vec![
        ("HOME".into(), home),
        ("USER".into(), name.clone()),
        ("LOGNAME".into(), name),
        ("SHELL".into(), account.shell.to_string_lossy().into_owned()),
        ("LANG".into(), "C.UTF-8".into()),
    ];
    env.extend(sb.options().image_env.iter().cloned());
    env.extend(sb.options().env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}
