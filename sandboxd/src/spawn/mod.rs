//! Starting programs as the sandbox's account, whichever way they start: an `exec`, a terminal's
//! shell, a background process and its shim. The channels use what is here; nothing here uses a
//! channel.

pub(crate) mod env;
pub(crate) mod pre_exec;
mod prepare;

pub(crate) use prepare::prepare;
pub use prepare::Prepared;
