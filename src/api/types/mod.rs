//! The request and answer bodies of the HTTP API, declared once: the server reads and writes
//! them, the CLI and `agenthold bench` write and read them the other way, and the OpenAPI
//! document is generated from them. The agent itself is [`crate::model::Agent`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::egress::{EgressRules, Rule, MAX_RULES};

pub mod process;

/// `POST /api/v1/agents`; fields left out take the server's defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateAgent {
    /// Unique, DNS-safe: lowercase letters, digits and `-`, at most 63.
    #[schema(
        min_length = 1,
        max_length = 63,
        pattern = "^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$",
        example = "builder"
    )]
    pub name: String,
    /// An image reference (`sandbox.default_image` when absent): printable ASCII without
    /// spaces, at most 255 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        min_length = 1,
        max_length = 255,
        pattern = "^[!-~]+$",
        example = "debian:bookworm-slim"
    )]
    pub image: Option<String>,
    /// CPUs, above 0 and at most `sandbox.max_cpus` (`sandbox.default_cpus` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(exclusive_minimum = 0, example = 2)]
    pub cpus: Option<f64>,
    /// Memory in MiB, 16 to `sandbox.max_memory_mb` (`sandbox.default_memory_mb` when absent).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole::option"
    )]
    #[schema(minimum = 16, example = 4096)]
    pub memory_mb: Option<u64>,
    /// The home's size in MiB, 64 to `sandbox.max_disk_mb` (`sandbox.default_disk_mb` when
    /// absent). Not accepted by a server that cannot limit disks (`maxDiskMb` null in
    /// `/limits`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole::option"
    )]
    #[schema(minimum = 64, example = 10240)]
    pub disk_mb: Option<u64>,
    /// Minutes without use before the agent sleeps, at most 10080 (a week); 0 = never.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole::option"
    )]
    #[schema(maximum = 10080, example = 15)]
    pub idle_minutes: Option<u32>,
    /// What the sandbox may reach through the egress proxy (`sandbox.egress.default` when
    /// absent).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "rules_object"
    )]
    pub egress: Option<EgressRules>,
    /// A preset from `GET /api/v1/presets` (`sandbox.default_preset` when absent): the fields
    /// it sets apply unless this request gives them too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        min_length = 1,
        max_length = 63,
        pattern = "^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$",
        example = "dev"
    )]
    pub preset: Option<String>,
    /// Variables every process of the agent starts with, merged over the preset's (these win).
    /// Names `[A-Za-z_][A-Za-z0-9_]*`, at most 128; values at most 4096 characters, no NUL; the
    /// proxy variables and `AGENTHOLD_*` are reserved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// The container runtime (`sandbox.docker.runtime`, or the engine's default, when absent):
    /// one of `runtimes` in `/limits`, such as `runc` (Docker's own) or `runsc` (gVisor, a
    /// kernel of its own in user space: stronger isolation, slower system calls). Another is
    /// `400` with `"field": "runtime"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 64, example = "runsc")]
    pub runtime: Option<String>,
}

/// `PATCH /api/v1/agents/{id}`; fields left out stay as they are.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateAgent {
    /// A new name: unique, DNS-safe, as at create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        min_length = 1,
        max_length = 63,
        pattern = "^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$",
        example = "builder"
    )]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        min_length = 1,
        max_length = 255,
        pattern = "^[!-~]+$",
        example = "debian:bookworm-slim"
    )]
    pub image: Option<String>,
    /// Above 0 and at most `sandbox.max_cpus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(exclusive_minimum = 0, example = 2)]
    pub cpus: Option<f64>,
    /// 16 to `sandbox.max_memory_mb`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole::option"
    )]
    #[schema(minimum = 16, example = 4096)]
    pub memory_mb: Option<u64>,
    /// A larger home in MiB (it never shrinks), applied at the agent's next start; at most
    /// `sandbox.max_disk_mb`. A smaller value, or any for an agent whose home has no limit, is
    /// `400` with `"field": "diskMb"`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole::option"
    )]
    #[schema(minimum = 64, example = 20480)]
    pub disk_mb: Option<u64>,
    /// At most 10080 (a week); 0 = never sleep.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole::option"
    )]
    #[schema(maximum = 10080, example = 15)]
    pub idle_minutes: Option<u32>,
    /// Replaces the egress rules: new connections follow them at once, and open ones they no
    /// longer allow are closed. No restart or rebuild.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "rules_object"
    )]
    pub egress: Option<EgressRules>,
    /// Replaces the whole `env`; processes started from now on get it (running ones keep
    /// theirs). Checked as on create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// Another container runtime, one of `runtimes` in `/limits`; sets `needsRebuild` (a
    /// rebuild applies it, keeping the home).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 64, example = "runsc")]
    pub runtime: Option<String>,
}

/// A whole number that may be written with a fraction of zero (`16.0`): JSON Schema's `integer`
/// is a number's value, not how it is written, so the API takes what its schema allows.
pub(crate) mod whole {
    use serde::de::{Deserializer, Error, Visitor};
    use std::fmt;
    use std::marker::PhantomData;

    pub fn option<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
    where
        D: Deserializer<'de>,
        T: TryFrom<u64>,
    {
        struct Whole<T>(PhantomData<T>);
        impl<'de, T: TryFrom<u64>> Visitor<'de> for Whole<T> {
            type Value = Option<T>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a whole number (0 or more) or null")
            }

            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(None)
            }

            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(None)
            }

            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_any(self)
            }

            fn visit_u64<E: Error>(self, n: u64) -> Result<Self::Value, E> {
                T::try_from(n)
                    .map(Some)
                    .map_err(|_| E::custom(format!("{n} is too large")))
            }

            fn visit_i64<E: Error>(self, n: i64) -> Result<Self::Value, E> {
                match u64::try_from(n) {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(E::custom(format!("{n} is below 0"))),
                }
            }

            fn visit_f64<E: Error>(self, n: f64) -> Result<Self::Value, E> {
                // Below 2^64, where every whole f64 is a u64.
                if n.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&n) {
                    self.visit_u64(n as u64)
                } else {
                    Err(E::custom(format!("{n} is not a whole number of 0 or more")))
                }
            }
        }
        d.deserialize_option(Whole(PhantomData))
    }
}

/// `egress` as a JSON object or null (serde would read the rules from an array too, which the
/// schema does not allow), with rules of ASCII only: `Rule` would take one padded with Unicode
/// white space, whose bytes its length limit counts, so no schema could state it.
fn rules_object<'de, D>(d: D) -> Result<Option<EgressRules>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RulesText {
        #[serde(default)]
        allow: Vec<String>,
        #[serde(default)]
        deny: Vec<String>,
    }

    fn parse(list: &str, rules: Vec<String>) -> Result<Vec<Rule>, String> {
        if rules.len() > MAX_RULES {
            return Err(format!(
                "egress.{list} holds {} rules; at most {MAX_RULES} are allowed (a wildcard or a \
                 CIDR covers many)",
                rules.len()
            ));
        }
        let parse_one = |(i, rule): (usize, String)| {
            if !rule.is_ascii() {
                let shown: String = rule.chars().take(80).collect();
                return Err(format!(
                    "{list}[{i}]: {shown:?} is not an egress rule: it holds characters other than \
                     ASCII"
                ));
            }
            rule.parse::<Rule>()
                .map_err(|e| format!("{list}[{i}]: {e}"))
        };
        rules.into_iter().enumerate().map(parse_one).collect()
    }

    struct RulesObject;
    impl<'de> serde::de::Visitor<'de> for RulesObject {
        type Value = Option<EgressRules>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(r#"an object {"allow": [..], "deny": [..]} or null"#)
        }

        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(RulesObject)
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            use serde::de::Error;
            let text = RulesText::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
            Ok(Some(EgressRules {
                allow: parse("allow", text.allow).map_err(A::Error::custom)?,
                deny: parse("deny", text.deny).map_err(A::Error::custom)?,
            }))
        }
    }
    d.deserialize_option(RulesObject)
}

/// `GET /api/v1/health`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
// A client reads what is there: a field a newer or older server lacks is empty.
#[serde(default)]
pub struct Health {
    pub status: String,
    pub version: String,
    pub driver: String,
}

/// `GET /api/v1/limits`: what the server allows and assumes, so a client can check input
/// before sending it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    pub default_image: String,
    pub default_cpus: f64,
    pub default_memory_mb: u64,
    pub default_idle_minutes: u32,
    pub max_cpus: f64,
    pub max_memory_mb: u64,
    /// The home size of an agent that asks for none; null when such agents get no limit.
    pub default_disk_mb: Option<u64>,
    /// The largest home one may ask for; null when this server cannot limit homes.
    pub max_disk_mb: Option<u64>,
    /// The size of each sandbox's in-memory `/tmp` and `/var/tmp`; null when they are on the
    /// container's own layer.
    pub tmp_mb: Option<u64>,
    /// What each sandbox may write outside its home and `/tmp` (its container's writable
    /// layer); null when nothing limits it on this server.
    pub rootfs_mb: Option<u64>,
    pub max_idle_minutes: u32,
    /// The largest file `fs/write` accepts.
    pub max_file_mb: u64,
    pub exec_output_cap_kb: u64,
    pub exec_default_timeout_ms: u64,
    pub exec_max_timeout_ms: u64,
    /// The container runtimes an agent may ask for (`runtime`), the default first.
    #[schema(example = json!(["runc", "runsc"]))]
    pub runtimes: Vec<String>,
}

/// `POST /api/v1/agents/{id}/exec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecBody {
    /// The program and its arguments; no shell unless you name one. With `env`, at most 1 MiB
    /// (each argument and each `KEY=VALUE` counted with a NUL), each argument at most 131071
    /// bytes (Linux's limit): send a longer script as `stdin` (`["sh"]`). Beyond: `413`.
    #[schema(min_items = 1, example = json!(["sh", "-c", "make test"]))]
    pub command: Vec<String>,
    /// Working directory; /home/agent by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Counted with `command` towards its 1 MiB; each `KEY=VALUE` at most 131071 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// Kills the whole process group after this long (1 to `server.exec_max_timeout`); the
    /// server's default applies when absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole::option"
    )]
    #[schema(minimum = 1, example = 300000)]
    pub timeout_ms: Option<u64>,
}

/// The answer to an exec, once the command has ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecResult {
    /// The command's exit status; 128 + N when signal N ended it (a timeout kills with SIGKILL).
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    pub duration_ms: u64,
    /// Output beyond the server's cap (server.exec_output_cap_kb) was cut.
    pub truncated: bool,
}

/// Which of the command's outputs a streamed chunk comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// One line of a streamed exec (`Accept: application/x-ndjson`): output as it comes, then the
/// exit. A stream that fails after it began ends with an error line instead (an
/// [`ErrorBody`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ExecLine {
    Output { stream: OutputStream, data: String },
    Exit(ExecExit),
}

/// The last line of a streamed exec. A client takes the line by its `exitCode`; the other fields
/// default when missing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecExit {
    pub exit_code: i32,
    #[serde(default)]
    pub timed_out: bool,
    #[serde(default)]
    pub duration_ms: u64,
    #[serde(default)]
    pub truncated: bool,
}

/// A text message of the terminal WebSocket (binary messages are terminal bytes). The server
/// sends all of them; a client sends only `Resize`. See the terminal route's description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum TerminalMessage {
    /// First from the server: the session, and the absolute offset of the next output byte.
    Session {
        id: String,
        offset: u64,
        #[serde(default)]
        cols: u16,
        #[serde(default)]
        rows: u16,
    },
    /// The next binary message (`bytes` long) redraws the whole screen as it was at `offset`.
    Redraw { offset: u64, bytes: u64 },
    /// From the server: the session's size changed. From a client: change it.
    Resize { cols: u16, rows: u16 },
    /// The shell exited with `code`; a close with [`close::NORMAL`] follows.
    Exit { code: i32 },
}

/// The close codes of the terminal WebSocket.
pub mod close {
    /// The shell exited.
    pub const NORMAL: u16 = 1000;
    /// A failure on the server's side (the sandbox went away, waking failed); a client that has
    /// a session id may reattach.
    pub const ERROR: u16 = 1011;
    /// An attach that cannot succeed, mirroring HTTP 400, 404 and 409.
    pub const BAD_REQUEST: u16 = 4400;
    pub const SESSION_GONE: u16 = 4404;
    pub const BUSY: u16 = 4409;
    /// The agent has `sandbox.max_streams_per_agent` channels open (mirroring HTTP 429):
    /// nothing is wrong with the session; a later attach will do.
    pub const TOO_MANY_STREAMS: u16 = 4429;
}

/// An error answer: `{"error": {"code", "message", "field"?}}` with the status of its code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// A machine word: invalid, unauthorized, forbidden, not_found, conflict, too_large,
    /// too_many_requests, no_space, unavailable, internal.
    #[schema(example = "not_found")]
    pub code: String,
    /// A sentence for a person.
    pub message: String,
    /// The camelCase request field the error is about, so a form can show it there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// The error codes, each with the one HTTP status it is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    Invalid,
    Unauthorized,
    Forbidden,
    NotFound,
    Conflict,
    TooLarge,
    TooManyRequests,
    NoSpace,
    Unavailable,
    Internal,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 10] = [
        ErrorCode::Invalid,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
        ErrorCode::Conflict,
        ErrorCode::TooLarge,
        ErrorCode::TooManyRequests,
        ErrorCode::NoSpace,
        ErrorCode::Unavailable,
        ErrorCode::Internal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Invalid => "invalid",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::TooManyRequests => "too_many_requests",
            ErrorCode::NoSpace => "no_space",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
        }
    }

    pub fn status(self) -> u16 {
        match self {
            ErrorCode::Invalid => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::Conflict => 409,
            ErrorCode::TooLarge => 413,
            ErrorCode::TooManyRequests => 429,
            ErrorCode::NoSpace => 507,
            ErrorCode::Unavailable => 503,
            ErrorCode::Internal => 500,
        }
    }

    pub fn parse(code: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == code)
    }

    /// The code answered with `status`, if the API uses that status.
    pub fn for_status(status: u16) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.status() == status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_messages_have_the_documented_json_form() {
        let cases = [
            (
                TerminalMessage::Session {
                    id: "s".into(),
                    offset: 7,
                    cols: 80,
                    rows: 24,
                },
                r#"{"type":"session","id":"s","offset":7,"cols":80,"rows":24}"#,
            ),
            (
                TerminalMessage::Redraw {
                    offset: 4000,
                    bytes: 900,
                },
                r#"{"type":"redraw","offset":4000,"bytes":900}"#,
            ),
            (
                TerminalMessage::Resize {
                    cols: 100,
                    rows: 30,
                },
                r#"{"type":"resize","cols":100,"rows":30}"#,
            ),
            (
                TerminalMessage::Exit { code: 3 },
                r#"{"type":"exit","code":3}"#,
            ),
        ];
        for (msg, json) in cases {
            assert_eq!(serde_json::to_string(&msg).ok().as_deref(), Some(json));
            assert_eq!(
                serde_json::from_str::<TerminalMessage>(json).ok(),
                Some(msg)
            );
        }
    }

    #[test]
    fn each_error_code_has_one_status_and_back() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
            assert_eq!(ErrorCode::for_status(code.status()), Some(code));
        }
        assert_eq!(ErrorCode::parse("teapot"), None);
        assert_eq!(ErrorCode::for_status(418), None);
    }

    #[test]
    fn exec_lines_have_the_documented_json_form() {
        let out = ExecLine::Output {
            stream: OutputStream::Stderr,
            data: "x".into(),
        };
        assert_eq!(
            serde_json::to_string(&out).ok().as_deref(),
            Some(r#"{"stream":"stderr","data":"x"}"#)
        );
        let exit = ExecLine::Exit(ExecExit {
            exit_code: 137,
            timed_out: true,
            duration_ms: 5,
            truncated: false,
        });
        assert_eq!(
            serde_json::to_string(&exit).ok().as_deref(),
            Some(r#"{"exitCode":137,"timedOut":true,"durationMs":5,"truncated":false}"#)
        );
    }
}
