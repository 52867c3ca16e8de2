//! The schema, as an ordered list of steps. A database records how many it has applied in
//! `PRAGMA user_version`; opening applies the rest, each in its own transaction, so a crash
//! mid-upgrade leaves the database at the last complete step. Never edit a released step:
//! append a new one.

use rusqlite::{Connection, TransactionBehavior};

use super::StoreError;

pub(super) const MIGRATIONS: &[&str] = &[
    // 1: agents and settings.
    r#"
    CREATE TABLE agents (
        id              TEXT PRIMARY KEY,
        name            TEXT NOT NULL,
        image           TEXT NOT NULL,
        cpus            REAL NOT NULL,
        memory_mb       INTEGER NOT NULL,
        idle_minutes    INTEGER NOT NULL,
        state           TEXT NOT NULL,
        error           TEXT,
        needs_rebuild   INTEGER NOT NULL DEFAULT 0,
        created_at      TEXT NOT NULL,
        updated_at      TEXT NOT NULL,
        boot_token_hash TEXT,
        subnet          TEXT UNIQUE
    );
    -- A name is free again as soon as its agent starts being destroyed.
    CREATE UNIQUE INDEX agents_live_name ON agents (name) WHERE state != 'destroying';
    CREATE TABLE settings (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    "#,
    // 2: web UI sign-ins, so a restart does not sign everyone out. `admin_hash` is the admin
    // token the session was opened with: a new admin token ends every older session.
    r#"
    CREATE TABLE web_sessions (
        token_hash TEXT PRIMARY KEY,
        admin_hash TEXT NOT NULL,
        expires_at INTEGER NOT NULL
    );
    "#,
    // 3: the home's size limit in MiB; NULL for a home without one (every agent made before).
    r#"
    ALTER TABLE agents ADD COLUMN disk_mb INTEGER;
    "#,
    // 4: what the sandbox may reach through the egress proxy, as JSON; NULL for agents made
    // before, which follow `sandbox.egress.default`.
    r#"
    ALTER TABLE agents ADD COLUMN egress TEXT;
    "#,
    // 5: the preset an agent was made from, its env (a JSON object; NULL for none) and its
    // setup script's last run (JSON; NULL until it first runs).
    r#"
    ALTER TABLE agents ADD COLUMN preset TEXT;
    ALTER TABLE agents ADD COLUMN env TEXT;
    ALTER TABLE agents ADD COLUMN setup TEXT;
    "#,
    // 6: the container runtime the agent asked for (`runc`, `runsc`); NULL for agents made
    // before, which run on the server's default (`sandbox.runtime`).
    r#"
    ALTER TABLE agents ADD COLUMN runtime TEXT;
    "#,
    // 7: agent sessions (conversations with a harness), their transcripts, and approvals;
    // each goes with its agent. `output_offset` is how far the harness's output was read,
    // committed with the events it gave, so a restarted server reads on from there.
    r#"
    CREATE TABLE sessions (
        id             TEXT PRIMARY KEY,
        agent_id       TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
        harness        TEXT NOT NULL,
        title          TEXT NOT NULL,
        cwd            TEXT NOT NULL,
        running        INTEGER NOT NULL DEFAULT 0,
        acp_session_id TEXT,
        restore        TEXT,
        process_id     TEXT,
        created_at     TEXT NOT NULL,
        updated_at     TEXT NOT NULL,
        turns          INTEGER NOT NULL DEFAULT 0,
        output_offset  INTEGER NOT NULL DEFAULT 0,
        prompt_rpc     INTEGER,
        next_rpc       INTEGER NOT NULL DEFAULT 1,
        last_seq       INTEGER NOT NULL DEFAULT 0,
        transcript_bytes INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX sessions_by_agent ON sessions (agent_id, created_at);
    CREATE TABLE session_events (
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        seq        INTEGER NOT NULL,
        kind       TEXT NOT NULL,
        data       TEXT NOT NULL,
        at         TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE approvals (
        id         TEXT PRIMARY KEY,
        agent_id   TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        tool_call  TEXT NOT NULL,
        options    TEXT NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        outcome    TEXT,
        option_id  TEXT,
        decided_by TEXT,
        rpc_id     TEXT NOT NULL
    );
    CREATE INDEX approvals_pending ON approvals (outcome, created_at);
    CREATE INDEX approvals_by_session ON approvals (session_id);
    "#,
    // 8: an agent's lifetime (`ttl_minutes`, NULL for none) and the deadline it gives
    // (`expires_at`, RFC 3339), and its labels (a JSON object; NULL for none).
    r#"
    ALTER TABLE agents ADD COLUMN ttl_minutes INTEGER;
    ALTER TABLE agents ADD COLUMN expires_at TEXT;
    ALTER TABLE agents ADD COLUMN labels TEXT;
    "#,
    // 9: previews, one row per agent and port; a deleted or expired one stays (as a tombstone
    // answering 410) until a new preview takes its port.
    r#"
    CREATE TABLE previews (
        id         TEXT PRIMARY KEY,
        agent_id   TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
        port       INTEGER NOT NULL,
        access     TEXT NOT NULL,
        token_hash TEXT,
        created_at TEXT NOT NULL,
        expires_at TEXT,
        deleted_at TEXT
    );
    CREATE UNIQUE INDEX previews_by_port ON previews (agent_id, port);
    "#,
    // 10: whether the agent may become root in its sandbox (sudo, `"user": "root"` on exec and
    // processes); agents made before are not.
    r#"
    ALTER TABLE agents ADD COLUMN allow_root INTEGER NOT NULL DEFAULT 0;
    "#,
    // 11: users (the built-in `admin` is who `server.admin_token` acts as), their API tokens
    // (only a hash kept; `scopes` a JSON array, `agents` a JSON array of agent ids or NULL for
    // every agent) and which user a web session belongs to (NULL: opened with the admin token).
    r#"
    CREATE TABLE users (
        id            TEXT PRIMARY KEY,
        name          TEXT NOT NULL UNIQUE,
        role          TEXT NOT NULL,
        password_hash TEXT,
        created_at    TEXT NOT NULL,
        updated_at    TEXT NOT NULL
    );
    INSERT INTO users (id, name, role, created_at, updated_at)
        VALUES ('admin', 'admin', 'admin', strftime('%Y-%m-%dT%H:%M:%SZ', 'now'),
                strftime('%Y-%m-%dT%H:%M:%SZ', 'now'));
    CREATE TABLE api_tokens (
        id         TEXT PRIMARY KEY,
        user_id    TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
        name       TEXT NOT NULL,
        token_hash TEXT NOT NULL UNIQUE,
        scopes     TEXT NOT NULL,
        agents     TEXT,
        created_at TEXT NOT NULL,
        expires_at TEXT
    );
    CREATE INDEX api_tokens_by_user ON api_tokens (user_id);
    ALTER TABLE web_sessions ADD COLUMN user_id TEXT REFERENCES users (id) ON DELETE CASCADE;
    "#,
    // 12: secrets: values sealed with the key of server.secrets_key_file (never in clear here).
    r#"
    CREATE TABLE secrets (
        name       TEXT PRIMARY KEY,
        nonce      BLOB NOT NULL,
        sealed     BLOB NOT NULL,
        hosts      TEXT NOT NULL,
        header     TEXT NOT NULL,
        format     TEXT NOT NULL,
        in_body    INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    "#,
    // 13: the audit log (see src/audit). AUTOINCREMENT: an id is never reused after pruning,
    // so a reader's `before` cursor stays good. Each filter has an index ending in the id, the
    // order entries are read in; `at` alone serves `since`/`until` and pruning.
    r#"
    CREATE TABLE audit (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        at         TEXT NOT NULL,
        user_id    TEXT,
        user_name  TEXT NOT NULL,
        token_name TEXT,
        action     TEXT NOT NULL,
        agent_id   TEXT,
        agent_name TEXT,
        detail     TEXT,
        address    TEXT NOT NULL,
        status     INTEGER NOT NULL
    );
    CREATE INDEX audit_by_at ON audit (at);
    CREATE INDEX audit_by_agent ON audit (agent_id, id);
    CREATE INDEX audit_by_agent_name ON audit (agent_name, id);
    CREATE INDEX audit_by_user ON audit (user_id, id);
    CREATE INDEX audit_by_user_name ON audit (user_name, id);
    CREATE INDEX audit_by_action ON audit (action, id);
    "#,
    // 14: approvals for commands. Agents get which commands wait
    // for a person (`never` for those made before); tokens whether they are supervised and what
    // their held commands get (`ask` for those made before). An approval now has a `kind`:
    // `permission` (a session's harness asks; `session_id` and `rpc_id` set) or `command` (an
    // exec, process or terminal waits; no session, the `command` line and its `requester`).
    // SQLite cannot drop a NOT NULL, so the table is made anew.
    r#"
    ALTER TABLE agents ADD COLUMN command_approvals TEXT NOT NULL DEFAULT 'never';
    ALTER TABLE api_tokens ADD COLUMN supervised INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE api_tokens ADD COLUMN approvals TEXT NOT NULL DEFAULT 'ask';
    CREATE TABLE approvals_new (
        id         TEXT PRIMARY KEY,
        agent_id   TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
        session_id TEXT REFERENCES sessions (id) ON DELETE CASCADE,
        kind       TEXT NOT NULL DEFAULT 'permission',
        tool_call  TEXT NOT NULL,
        options    TEXT NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        outcome    TEXT,
        option_id  TEXT,
        decided_by TEXT,
        rpc_id     TEXT NOT NULL,
        command    TEXT,
        requester  TEXT,
        CHECK ((kind = 'permission') = (session_id IS NOT NULL))
    );
    INSERT INTO approvals_new (id, agent_id, session_id, kind, tool_call, options, created_at,
                               expires_at, outcome, option_id, decided_by, rpc_id)
        SELECT id, agent_id, session_id, 'permission', tool_call, options, created_at,
               expires_at, outcome, option_id, decided_by, rpc_id FROM approvals;
    DROP TABLE approvals;
    ALTER TABLE approvals_new RENAME TO approvals;
    CREATE INDEX approvals_pending ON approvals (outcome, created_at);
    CREATE INDEX approvals_by_session ON approvals (session_id);
    "#,
    // 15: per-agent access. Every agent has an owner (agents made before belong to the built-in
    // `admin`) and an access policy (`private` for those made before); a `protected` one may
    // have an access token (only its hash kept); members are users with a role on an agent.
    // `owner_id` has no REFERENCES (SQLite adds no such column with a default): deleting a user
    // hands their agents to `admin` in the same transaction.
    r#"
    ALTER TABLE agents ADD COLUMN owner_id TEXT NOT NULL DEFAULT 'admin';
    ALTER TABLE agents ADD COLUMN access TEXT NOT NULL DEFAULT 'private';
    ALTER TABLE agents ADD COLUMN access_token_hash TEXT;
    CREATE TABLE agent_members (
        agent_id   TEXT NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
        user_id    TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
        role       TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (agent_id, user_id)
    );
    CREATE INDEX agent_members_by_user ON agent_members (user_id);
    "#,
    // 16: the secrets granted to each agent, a JSON list of names (NULL for none). Deleting a
    // secret takes its name off every agent in the same transaction (see store::secrets).
    r#"
    ALTER TABLE agents ADD COLUMN secrets TEXT;
    "#,
    // 17: light sleep. How long an agent stays paused before it is stopped; NULL (agents made
    // before) follows `sandbox.default_deep_sleep_minutes`.
    r#"
    ALTER TABLE agents ADD COLUMN deep_sleep_minutes INTEGER;
    "#,
    // 18: warm pools. An entry is a sandbox made ahead of need for an agent id chosen ahead,
    // with no agent row until a create claims it (one transaction deletes the entry and
    // inserts the agent with its id); `digest` says what it was made from, so a changed preset
    // makes it stale. `warm` records that an agent came from the pool.
    r#"
    CREATE TABLE pool_entries (
        id TEXT PRIMARY KEY,
        preset TEXT NOT NULL,
        digest TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('starting', 'ready')),
        boot_token_hash TEXT,
        created_at TEXT NOT NULL
    );
    ALTER TABLE agents ADD COLUMN warm INTEGER NOT NULL DEFAULT 0;
    "#,
    // 19: each sandbox network's subnet in a table of its own, keyed by the agent id the
    // sandbox was made for, so that a warm pool entry (no agent row yet) holds one too and a
    // claim (same id) keeps it; unique across agents and entries alike. `agents.subnet` is
    // left empty from here on (SQLite cannot drop a UNIQUE column).
    r#"
    CREATE TABLE subnets (
        id     TEXT PRIMARY KEY,
        subnet TEXT NOT NULL UNIQUE
    );
    INSERT INTO subnets (id, subnet) SELECT id, subnet FROM agents WHERE subnet IS NOT NULL;
    UPDATE agents SET subnet = NULL;
    "#,
    // 20: a warm pool entry's CPU and memory limits, which its claim changes to the agent's
    // (the digest no longer holds them); NULL for entries made before, which are stale.
    r#"
    ALTER TABLE pool_entries ADD COLUMN cpus REAL;
    ALTER TABLE pool_entries ADD COLUMN memory_mb INTEGER;
    "#,
];

/// The schema version this binary writes.
pub(super) fn latest() -> i64 {
    MIGRATIONS.len() as i64
}

pub(super) fn migrate(conn: &mut Connection, path: &str) -> Result<(), StoreError> {
    let supported = latest();
    loop {
        // IMMEDIATE takes the write lock before reading the version, so two processes opening
        // the same new file cannot both apply a step.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let found: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if found > supported {
            return Err(StoreError::Newer {
                path: path.to_string(),
                found,
                supported,
            });
        }
        if found < 0 {
            return Err(StoreError::Corrupt(format!(
                "{path} has schema version {found}, which no agenthold writes"
            )));
        }
        let Some(step) = MIGRATIONS.get(found as usize) else {
            return Ok(());
        };
        tx.execute_batch(step)?;
        tx.pragma_update(None, "user_version", found + 1)?;
        tx.commit()?;
        tracing::info!(path, version = found + 1, "database schema upgraded");
    }
}
