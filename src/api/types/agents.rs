//! The bodies of the agent routes: create and update.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::egress::{change_object, rules_object, EgressChange, EgressRules};
use super::whole;
use crate::model::teams::AgentApprovals;

/// Declares [`CreateAgent`] and [`UpdateAgent`] from one list of the settings both take, so
/// that each setting's wire form and bounds (its `serde` and `schema` attributes, before the
/// `create`/`update` parts) are written once; each body keeps its own words about it (a create's
/// say what an absent one defaults to, an update's what a change does) and its own fields.
/// Every shared setting is optional in both, and left out of the JSON when absent.
macro_rules! agent_bodies {
    (@body $(#[doc = $doc:tt])* $name:ident { $($own:tt)* }
        $( [$($attr:tt)*] $field:ident [$($ty:tt)+] )*
    ) => {
        $(#[doc = $doc])*
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        pub struct $name {
            $($own)*
            $(
                $($attr)*
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $field: Option<$($ty)+>,
            )*
        }
    };
    (
        $(#[doc = $create_doc:tt])*
        pub struct CreateAgent { $($create_own:tt)* }
        $(#[doc = $update_doc:tt])*
        pub struct UpdateAgent { $($update_own:tt)* }
        shared {
            $(
                $(#[$($shared_attr:tt)*])*
                $field:ident: [$($ty:tt)+],
                create { $(#[$($create_attr:tt)*])* },
                update { $(#[$($update_attr:tt)*])* };
            )*
        }
    ) => {
        agent_bodies! { @body $(#[doc = $create_doc])* CreateAgent { $($create_own)* }
            $( [$(#[$($create_attr)*])* $(#[$($shared_attr)*])*] $field [$($ty)+] )* }
        agent_bodies! { @body $(#[doc = $update_doc])* UpdateAgent { $($update_own)* }
            $( [$(#[$($update_attr)*])* $(#[$($shared_attr)*])*] $field [$($ty)+] )* }
    };
}

agent_bodies! {
    /// `POST /api/v1/agents`; fields left out take the server's defaults.
    pub struct CreateAgent {
        /// Unique, DNS-safe: lowercase letters, digits and `-`, at most 63.
        #[schema(
            min_length = 1,
            max_length = 63,
            pattern = "^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$",
            example = "builder"
        )]
        pub name: String,
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
        /// The agent's lifetime in minutes, 1 to 525600 (a year): it is destroyed that long
        /// after its creation, whatever its state, unless a `PATCH` or a keep-alive moves the
        /// deadline (`expiresAt`). Absent: the preset's; null: none.
        #[serde(
            default,
            deserialize_with = "whole::nullable",
            skip_serializing_if = "Option::is_none"
        )]
        #[schema(value_type = Option<u32>, minimum = 1, maximum = 525600, example = 60)]
        pub ttl_minutes: Option<Option<u32>>,
        /// What the sandbox may reach through the egress proxy (`sandbox.egress.default` when
        /// absent).
        #[serde(
            default,
            deserialize_with = "rules_object",
            skip_serializing_if = "Option::is_none"
        )]
        pub egress: Option<EgressRules>,
    }

    /// `PATCH /api/v1/agents/{id}`; fields left out stay as they are.
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
        /// A new lifetime in minutes, counted from now (1 to 525600); 0 or null takes the
        /// lifetime away.
        #[serde(
            default,
            deserialize_with = "whole::nullable",
            skip_serializing_if = "Option::is_none"
        )]
        #[schema(value_type = Option<u32>, minimum = 0, maximum = 525600, example = 60)]
        pub ttl_minutes: Option<Option<u32>>,
        /// Changes the egress rules: each list named replaces the agent's, and one left out
        /// (or null) stays, so `{"allow": [..]}` keeps `deny`. New connections follow them at
        /// once, and open ones they no longer allow are closed. No restart or rebuild.
        #[serde(
            default,
            deserialize_with = "change_object",
            skip_serializing_if = "Option::is_none"
        )]
        pub egress: Option<EgressChange>,
    }

    shared {
        #[schema(
            min_length = 1,
            max_length = 255,
            pattern = "^[!-~]+$",
            example = "debian:bookworm-slim"
        )]
        image: [String],
        create {
            /// An image reference (`sandbox.default_image` when absent): printable ASCII without
            /// spaces, at most 255 characters.
        },
        update {};

        #[schema(exclusive_minimum = 0, example = 2)]
        cpus: [f64],
        create {
            /// CPUs, above 0 and at most `sandbox.max_cpus` (`sandbox.default_cpus` when absent).
        },
        update {
            /// Above 0 and at most `sandbox.max_cpus`.
        };

        #[serde(deserialize_with = "whole::option")]
        #[schema(minimum = 16, example = 4096)]
        memory_mb: [u64],
        create {
            /// Memory in MiB, 16 to `sandbox.max_memory_mb` (`sandbox.default_memory_mb` when absent).
        },
        update {
            /// 16 to `sandbox.max_memory_mb`.
        };

        #[serde(deserialize_with = "whole::option")]
        disk_mb: [u64],
        create {
            /// The home's size in MiB, 64 to `sandbox.max_disk_mb` (`sandbox.default_disk_mb` when
            /// absent). Not accepted by a server that cannot limit disks (`maxDiskMb` null in
            /// `/limits`).
            #[schema(minimum = 64, example = 10240)]
        },
        update {
            /// A larger home in MiB (it never shrinks), applied at the agent's next start; at most
            /// `sandbox.max_disk_mb`. A smaller value, or any for an agent whose home has no limit, is
            /// `400` with `"field": "diskMb"`.
            #[schema(minimum = 64, example = 20480)]
        };

        #[serde(deserialize_with = "whole::option")]
        #[schema(maximum = 10080, example = 15)]
        idle_minutes: [u32],
        create {
            /// Minutes without use before the agent sleeps, at most 10080 (a week); 0 = never.
        },
        update {
            /// At most 10080 (a week); 0 = never sleep.
        };

        #[serde(deserialize_with = "whole::option")]
        #[schema(maximum = 10080, example = 60)]
        deep_sleep_minutes: [u32],
        create {
            /// Minutes an idle agent stays paused (processes and memory kept, no CPU) before it is
            /// stopped, at most 10080 (a week); 0 = never paused: stopped straight away (the preset's,
            /// else `sandbox.default_deep_sleep_minutes`, when absent).
        },
        update {
            /// At most 10080 (a week); 0 = never pause; counted from the pause.
        };

        env: [BTreeMap<String, String>],
        create {
            /// Variables every process of the agent starts with, merged over the preset's (these win).
            /// Names `[A-Za-z_][A-Za-z0-9_]*`, at most 128; values at most 4096 characters, no NUL; the
            /// proxy variables and `AGENTHOLD_*` are reserved.
        },
        update {
            /// Replaces the whole `env`; processes started from now on get it (running ones keep
            /// theirs). Checked as on create.
        };

        #[schema(max_items = 64, example = json!(["ANTHROPIC_API_KEY"]))]
        secrets: [Vec<String>],
        create {
            /// Names of secrets (`GET /api/v1/secrets`) granted to the agent, at most 64, none
            /// twice; replaces the preset's list (`[]` for none). Each appears in the sandbox as a
            /// variable of that name holding a placeholder the egress proxy swaps for the value,
            /// only on the way to the secret's `hosts`; it wins over an `env` variable of the same
            /// name. A bad list is `400`, a name that is no secret `409`, both with
            /// `"field": "secrets"`.
        },
        update {
            /// Replaces the whole list, checked as on create; processes started from now on get
            /// the placeholders (running ones keep theirs), and the proxy swaps only the granted
            /// secrets from its next request on.
        };

        #[schema(min_length = 1, max_length = 64, example = "runsc")]
        runtime: [String],
        create {
            /// The container runtime (`sandbox.runtime`, or the engine's default, when absent):
            /// one of `runtimes` in `/limits`, such as `runc` (Docker's own) or `runsc` (gVisor, a
            /// kernel of its own in user space: stronger isolation, slower system calls). Another is
            /// `400` with `"field": "runtime"`.
        },
        update {
            /// Another container runtime, one of `runtimes` in `/limits`; sets `needsRebuild` (a
            /// rebuild applies it, keeping the home).
        };

        #[schema(example = json!({"team": "ml", "task": "t-42"}))]
        labels: [BTreeMap<String, String>],
        create {
            /// Labels, merged over the preset's (these win): keys of `[a-z0-9._/-]`, 1 to 63
            /// characters; values at most 256 characters; at most 64. Otherwise `400` with
            /// `"field": "labels"`.
        },
        update {
            /// Replaces the whole map of labels (`{}` removes them all); checked as on create.
        };

        #[schema(example = true)]
        allow_root: [bool],
        create {
            /// The agent may become root in its sandbox: `sudo` works (its container is made
            /// without `no-new-privileges`), and exec and processes accept `"user": "root"`.
            /// Root stays inside the container: no extra capabilities, the same network and egress
            /// rules. Absent: the preset's (`true` for the default config's `dev`), else `false`.
        },
        update {
            /// Allows or takes away root. `"user": "root"` on exec and processes follows at once;
            /// `sudo` follows at the next rebuild (the container's security options are fixed when
            /// it is made), so a change sets `needsRebuild`.
        };

        #[schema(example = json!({"commands": "dangerous"}))]
        approvals: [AgentApprovals],
        create {
            /// Which commands (exec, background processes, terminal opens) wait for a person's
            /// approval when anyone but the agent's owner and admins, or a supervised token,
            /// makes them: `never`, `dangerous` (those matching `approvals.dangerous_patterns`)
            /// or `always`. Absent: the preset's, else `{"commands": "never"}`.
        },
        update {
            /// New approval settings, in force for the next command.
        };

        access: [crate::model::teams::AgentAccess],
        create {
            /// Who besides the owner (the caller), admins and members may see and use it:
            /// `private` (absent: no one; everyone else gets `404`), `protected` (anyone who
            /// presents its access token joins as a `user` member) or `public` (anyone signed in
            /// may read and use it).
        },
        update {
            /// A new policy: the owner's and admins' to change (`403` for an operator). A change
            /// ends the agent's access token.
        };
    }
}

/// `POST /api/v1/agents/{id}/keep-alive`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeepAlive {
    /// The new lifetime in minutes from now, 1 to 525600; absent or null: the agent's own
    /// `ttlMinutes` again.
    #[serde(
        default,
        deserialize_with = "whole::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(minimum = 1, maximum = 525600, example = 30)]
    pub ttl_minutes: Option<u32>,
}

/// The `expiring` event on `/api/v1/events`: the agent will be destroyed at `expiresAt`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExpiringEvent {
    /// The agent's id.
    pub id: String,
    pub expires_at: chrono::DateTime<chrono::Utc>,
}
