//! `approvals`: which commands count as dangerous for agents whose `approvals.commands` is
//! `dangerous` (the rule is [`crate::teams::command_rules`]'s).

use serde::{Deserialize, Serialize};

use crate::teams::command_rules::DangerousPatterns;

/// `approvals`: what holds commands for a person's answer.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalsConfig {
    /// Regular expressions (Rust `regex` syntax, matched case-insensitively anywhere in the
    /// command line with its whitespace made single spaces); one that does not compile fails
    /// the config. The default list holds recursive deletes of `/` or home, `mkfs`, `dd` onto
    /// devices, downloads piped into a shell, `git push --force`, `chmod -R 777 /`,
    /// shutdown/reboot and fork bombs.
    pub dangerous_patterns: DangerousPatterns,
}
