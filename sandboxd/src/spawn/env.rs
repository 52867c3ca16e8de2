//! The environment shells and commands start with: nothing inherited from sandboxd.

use crate::sandbox::Sandbox;

pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The account's own variables, then the ones the server hands every program (boot.json's
/// `env`: the egress proxy's).
pub fn base(sb: &Sandbox) -> Vec<(String, String)> {
    let (account, home) = (sb.account(), &sb.options().home);
    let mut env = vec![
        ("HOME".into(), home.to_string_lossy().into_owned()),
        ("USER".into(), account.name.clone()),
        ("LOGNAME".into(), account.name.clone()),
        ("SHELL".into(), account.shell.to_string_lossy().into_owned()),
        ("PATH".into(), PATH.into()),
        ("LANG".into(), "C.UTF-8".into()),
    ];
    env.extend(sb.options().env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}
