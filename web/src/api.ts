// The HTTP client for /api/v1 (see docs/api.md). Same origin, authenticated by the session cookie.

import type { components } from './api.gen';

// The API's bodies are the generated types of the OpenAPI document (api.gen.ts, issue #15); the
// names below are aliases so the rest of the UI keeps its vocabulary. Hand-written types are
// only what the document cannot describe (the NDJSON lines of a process's output).
type Schemas = components['schemas'];

export type AgentState = Schemas['AgentState'];
export type PullProgress = Schemas['PullProgress'];
/** An agent's `egress`: RULEs are host names, `*.` wildcards, IPs or CIDRs, or `*`, each optionally `:PORT`. */
export type EgressRules = Schemas['EgressRules'];
/** The `egress` SSE event: one per decision of the proxy, and one when an allowed connection closes. */
export type EgressEvent = Schemas['EgressEvent'];
export type EgressLogEntry = Schemas['EgressLogEntry'];
export type FsEntry = Schemas['DirEntry'];
/** A terminal session living in the sandbox (`GET /api/v1/agents/{id}/terminals`). */
export type TerminalSession = Schemas['TerminalSession'];
export type ProcessState = Schemas['ProcessState'];
/** A background process (`/api/v1/agents/{id}/processes…`). */
export type Process = Schemas['Process'];
/** `POST /api/v1/agents/{id}/processes`. */
export type StartProcess = Schemas['StartProcess'];
/** The `process` SSE event: agent `id`'s process started or ended. */
export type ProcessEvent = Schemas['ProcessEvent'];
export type Health = Schemas['Health'];
/** A TCP port something listens on in the sandbox (`GET /api/v1/agents/{id}/ports`). */
export type ListeningPort = Schemas['ListeningPort'];
export type PreviewAccess = Schemas['PreviewAccess'];
/** A URL on an origin of its own that opens one port of the sandbox (`…/previews`). */
export type Preview = Schemas['Preview'];
/** `POST /api/v1/agents/{id}/previews`. */
export type NewPreview = Schemas['CreatePreview'];

/** The agent's setup script (presets): how its last run went. */
export type SetupStatus = Schemas['SetupStatus'];
export type Agent = Schemas['Agent'];
/** `GET /api/v1/presets`: a preset with the server's defaults filled in. */
export type Preset = Schemas['PresetInfo'];
export type NewAgent = Schemas['CreateAgent'];
export type AgentUpdate = Schemas['UpdateAgent'];

// Teams (docs/api.md, "Teams and access"): who is signed in, users, API tokens.
export type Role = Schemas['Role'];
export type Scope = Schemas['Scope'];
export type User = Schemas['User'];
export type NewUser = Schemas['CreateUser'];
export type UserUpdate = Schemas['UpdateUser'];
export type Token = Schemas['Token'];
export type NewToken = Schemas['CreateToken'];
/** `POST /api/v1/tokens`'s answer: the token itself is in it this once. */
export type CreatedToken = Schemas['CreatedToken'];
/** `GET /api/v1/me`: the user, the token when one was used, and the scopes in effect. */
export type Me = Schemas['Me'];
export type AgentAccess = Schemas['AgentAccess'];
export type MemberRole = Schemas['MemberRole'];
export type AgentMember = Schemas['AgentMember'];
export type CommandApprovals = Schemas['CommandApprovals'];
export type AuditEntry = Schemas['AuditEntry'];
/** `GET /api/v1/pool`: one preset's warm pool (sandboxes started ahead of need). */
export type PoolInfo = Schemas['PoolInfo'];
/** A secret as the API shows it: never its value (`GET /api/v1/secrets`). */
export type Secret = Schemas['Secret'];
/** `PUT /api/v1/secrets/{name}`: the value goes in, and never comes back out. */
export type PutSecret = Schemas['PutSecret'];
export type AuditAction = Schemas['AuditAction'];

/** `GET /api/v1/limits`: defaults and maxima, so forms can say them up front. */
export type Limits = Schemas['Limits'];

// Agent sessions (conversations with a harness over ACP) and the approval queue (docs/api.md,
// "Agent sessions" and "Approvals").
export type SessionState = Schemas['SessionState'];
/** A conversation with a harness running in the agent's sandbox. */
export type ChatSession = Schemas['Session'];
export type NewChatSession = Schemas['CreateSession'];
/** An ACP content block (text, image, resource_link, …), as the harness or the user sent it. */
export type ContentBlock = { type: string; text?: string; [key: string]: unknown };
export type ApprovalOutcome = Schemas['ApprovalOutcome'];
export type ApprovalOption = Schemas['ApprovalOption'];
/**
 * A question waiting for a person (or answered): today a harness's permission request. The
 * document types `toolCall` as any object (the ACP tool call, verbatim); these are the fields
 * the UI reads.
 */
export type Approval = Omit<Schemas['Approval'], 'toolCall'> & {
  toolCall: { toolCallId?: unknown; title?: unknown; [key: string]: unknown } | null;
};
/** A `permission_resolved` event. */
export type PermissionResolved = Schemas['PermissionResolved'];
/**
 * One event of a session's transcript as the UI reads it: the SSE `id:`, `event:` and `data:`
 * (`Schemas['TranscriptEvent']` with any event name, so that one newer than this UI is shown raw).
 */
export interface TranscriptEvent {
  seq: number;
  event: string;
  data: unknown;
}
/**
 * A configured harness, as far as the server tells: the contract names no route that lists them,
 * so `/limits` may carry `harnesses` (names, or objects with a name) and `defaultHarness`.
 */
export interface Harness {
  name: string;
  description?: string;
}

/** Not in the document: the NDJSON lines are described in prose there. */
export type OutputStream = 'stdout' | 'stderr';

/** One line of `GET …/processes/{pid}/output` (NDJSON; the document types it as text). */
export type ProcessOutputLine =
  | { offset: number; stream: OutputStream; data: string }
  | { offset: number; stream: OutputStream; data64: string }
  /** `from..to` has left the buffer; what follows starts at `to`. */
  | { gap: Schemas['Gap'] }
  /** The last line: the process has ended and all its output was sent. */
  | { exit: Process }
  /** The stream was cut short: read again from the last offset. */
  | { error: { code: string; message: string } };

export const BASE = '/api/v1';

/** An error answer from the server, or a failure to reach it. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly field?: string,
  ) {
    super(message);
  }
}

/** What to tell a person about a failure: the server's words for an API error, else the error as text. */
export const errorMessage = (e: unknown): string => (e instanceof ApiError ? e.message : String(e));

type UnauthorizedHandler = () => void;
let onUnauthorized: UnauthorizedHandler = () => {};
export function setUnauthorizedHandler(fn: UnauthorizedHandler): void {
  onUnauthorized = fn;
}

/** Build the error for a non-2xx answer from its body text. */
export function errorFrom(status: number, bodyText: string, statusText = ''): ApiError {
  try {
    const body = JSON.parse(bodyText) as { error?: { code?: string; message?: string; field?: string } };
    if (body && body.error && typeof body.error.message === 'string') {
      return new ApiError(status, body.error.code ?? 'error', body.error.message, body.error.field ?? undefined);
    }
  } catch {
    /* not JSON */
  }
  const text = bodyText.trim();
  const fallback =
    status === 413
      ? 'The file is larger than the server accepts.'
      : text && text.length < 300 && !text.startsWith('<')
        ? text
        : `The server answered ${status}${statusText ? ` ${statusText}` : ''}.`;
  return new ApiError(status, 'http_' + status, fallback);
}

async function request(method: string, path: string, body?: BodyInit | null, json = false, signal?: AbortSignal): Promise<Response> {
  const headers: Record<string, string> = { Accept: 'application/json' };
  if (json) headers['Content-Type'] = 'application/json';
  let res: Response;
  try {
    res = await fetch(BASE + path, { method, body, headers, credentials: 'same-origin', signal });
  } catch {
    throw new ApiError(0, 'network', 'Cannot reach the agenthold server. Check that it is running.');
  }
  if (!res.ok) {
    const err = errorFrom(res.status, await res.text().catch(() => ''), res.statusText);
    if (res.status === 401 && path !== '/session') onUnauthorized();
    throw err;
  }
  return res;
}

async function getJson<T>(path: string): Promise<T> {
  return (await request('GET', path)).json() as Promise<T>;
}

async function sendJson<T>(method: string, path: string, body?: unknown): Promise<T> {
  const res = await request(method, path, body === undefined ? null : JSON.stringify(body), body !== undefined);
  const text = await res.text();
  return (text ? JSON.parse(text) : undefined) as T;
}

/**
 * The lines of an NDJSON answer as they arrive. A last line cut off mid-way is dropped (the
 * stream was cut); a cut connection throws.
 */
async function* ndjson<T>(res: Response): AsyncGenerator<T> {
  if (!res.body) return;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let finished = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        finished = true;
        break;
      }
      buf += value;
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (line) yield JSON.parse(line) as T;
      }
    }
  } finally {
    // The reader stopped early: close the connection.
    if (!finished) void reader.cancel().catch(() => {});
  }
}

const q = (path: string) => encodeURIComponent(path);
const a = (id: string) => `/agents/${encodeURIComponent(id)}`;

export const api = {
  async session(): Promise<boolean> {
    try {
      await request('GET', '/session');
      return true;
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) return false;
      throw e;
    }
  },
  /** Signs in with the admin token. */
  signIn: (token: string) => sendJson<void>('POST', '/session', { token }),
  /** Signs in as a user with a password. */
  signInWithPassword: (name: string, password: string) => sendJson<void>('POST', '/session', { name, password }),
  signOut: () => sendJson<void>('DELETE', '/session'),
  limits: (() => {
    let cached: Promise<Limits | null> | null = null;
    return (): Promise<Limits | null> => {
      cached ??= getJson<Limits>('/limits').catch(() => {
        cached = null;
        return null;
      });
      return cached;
    };
  })(),
  health: () => getJson<Health>('/health'),
  /** The server's presets (fetched once; a failed request is asked again next time). */
  presets: (() => {
    let cached: Promise<Preset[]> | null = null;
    return (): Promise<Preset[]> => {
      cached ??= getJson<Preset[]>('/presets').catch((e: unknown) => {
        cached = null;
        throw e;
      });
      return cached;
    };
  })(),

  me: () => getJson<Me>('/me'),
  users: () => getJson<User[]>('/users'),
  createUser: (body: NewUser) => sendJson<User>('POST', '/users', body),
  updateUser: (id: string, body: UserUpdate) => sendJson<User>('PATCH', `/users/${q(id)}`, body),
  deleteUser: (id: string) => sendJson<void>('DELETE', `/users/${q(id)}`),
  pool: () => getJson<PoolInfo[]>('/pool'),
  secrets: () => getJson<Secret[]>('/secrets'),
  putSecret: (name: string, body: PutSecret) => sendJson<Secret>('PUT', `/secrets/${q(name)}`, body),
  deleteSecret: (name: string) => sendJson<void>('DELETE', `/secrets/${q(name)}`),
  /** One's own tokens; an admin's list has everyone's. */
  tokens: () => getJson<Token[]>('/tokens'),
  createToken: (body: NewToken) => sendJson<CreatedToken>('POST', '/tokens', body),
  revokeToken: (id: string) => sendJson<void>('DELETE', `/tokens/${q(id)}`),

  members: (id: string) => getJson<AgentMember[]>(`${a(id)}/members`),
  addMember: (id: string, user: string, role: MemberRole) => sendJson<AgentMember>('POST', `${a(id)}/members`, { user, role }),
  removeMember: (id: string, user: string) => sendJson<void>('DELETE', `${a(id)}/members/${q(user)}`),
  /** A protected agent's new access token, shown this once (the old one stops working). */
  newAccessToken: (id: string) => sendJson<{ accessToken: string }>('POST', `${a(id)}/access-token`),
  /** The audit log, newest first, with `params` as filters (`agent`, `user`, `action`, `since`, `before`, `limit`). */
  audit: (params: Record<string, string>) => getJson<AuditEntry[]>(`/audit?${new URLSearchParams(params).toString()}`),

  agents: () => getJson<Agent[]>('/agents'),
  agent: (id: string) => getJson<Agent>(a(id)),
  create: (body: NewAgent) => sendJson<Agent>('POST', '/agents', body),
  update: (id: string, body: AgentUpdate) => sendJson<Agent>('PATCH', a(id), body),
  destroy: (id: string) => sendJson<Agent>('DELETE', a(id)),
  start: (id: string) => sendJson<Agent>('POST', `${a(id)}/start`),
  stop: (id: string) => sendJson<Agent>('POST', `${a(id)}/stop`),
  rebuild: (id: string) => sendJson<Agent>('POST', `${a(id)}/rebuild`),
  /** Restarts the agent's lifetime from now (its own `ttlMinutes`). */
  keepAlive: (id: string) => sendJson<Agent>('POST', `${a(id)}/keep-alive`, {}),
  /** Runs the preset's setup script again (409 when the agent has none). */
  runSetup: (id: string) => sendJson<unknown>('POST', `${a(id)}/setup`),

  list: (id: string, path: string) => getJson<FsEntry[]>(`${a(id)}/fs/list?path=${q(path)}`),
  readText: async (id: string, path: string) => (await request('GET', `${a(id)}/fs/read?path=${q(path)}&inline=true`)).arrayBuffer(),
  writeText: (id: string, path: string, text: string) =>
    request('PUT', `${a(id)}/fs/write?path=${q(path)}`, new Blob([text], { type: 'application/octet-stream' })),
  mkdir: (id: string, path: string) => request('POST', `${a(id)}/fs/mkdir?path=${q(path)}`),
  remove: (id: string, path: string) => request('DELETE', `${a(id)}/fs/remove?path=${q(path)}&recursive=true`),

  readUrl: (id: string, path: string) => `${BASE}${a(id)}/fs/read?path=${q(path)}`,
  writeUrl: (id: string, path: string) => `${BASE}${a(id)}/fs/write?path=${q(path)}`,
  /** The terminal WebSocket: a new session, or (with `session`) an attach from `offset`. */
  terminalUrl: (id: string, cols: number, rows: number, session?: string | null, offset?: number | null) => {
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    let url = `${proto}//${location.host}${BASE}${a(id)}/terminal?cols=${cols}&rows=${rows}`;
    if (session) url += `&session=${q(session)}`;
    if (session && offset != null) url += `&offset=${offset}`;
    return url;
  },
  /** The agent's terminal sessions (does not wake a sleeping agent: it simply has none). */
  terminals: (id: string) => getJson<TerminalSession[]>(`${a(id)}/terminals`),
  killTerminal: (id: string, sid: string) => sendJson<void>('DELETE', `${a(id)}/terminals/${q(sid)}`),

  /** The agent's background processes, oldest first (wakes a sleeping agent). */
  processes: (id: string) => getJson<Process[]>(`${a(id)}/processes`),
  /** One process by its id or tag. */
  process: (id: string, pid: string) => getJson<Process>(`${a(id)}/processes/${q(pid)}`),
  startProcess: (id: string, body: StartProcess) => sendJson<Process>('POST', `${a(id)}/processes`, body),
  signalProcess: (id: string, pid: string, signal: string) => sendJson<void>('POST', `${a(id)}/processes/${q(pid)}/signal`, { signal }),
  /** Kills the process if it runs, and forgets it and its output. */
  removeProcess: (id: string, pid: string) => sendJson<void>('DELETE', `${a(id)}/processes/${q(pid)}`),
  /** The process's output from `offset`, following it until it ends; `signal` stops reading. */
  async *processOutput(id: string, pid: string, offset: number, signal: AbortSignal): AsyncGenerator<ProcessOutputLine> {
    const res = await request('GET', `${a(id)}/processes/${q(pid)}/output?offset=${offset}&follow=true`, null, false, signal);
    yield* ndjson<ProcessOutputLine>(res);
  },

  /** What listens in the sandbox, by port; empty while the agent sleeps (never wakes it). */
  ports: (id: string) => getJson<ListeningPort[]>(`${a(id)}/ports`),
  /** The agent's recent egress decisions, oldest first (kept in the server's memory). */
  egressLog: (id: string) => getJson<EgressLogEntry[]>(`${a(id)}/egress/log`),
  /** The agent's live previews, by port. */
  previews: (id: string) => getJson<Preview[]>(`${a(id)}/previews`),
  /** `201`; 409 when the port has one already (the message names it) or the agent has too many. */
  createPreview: (id: string, body: NewPreview) => sendJson<Preview>('POST', `${a(id)}/previews`, body),
  /** The URL answers 410 at once. */
  deletePreview: (id: string, pid: string) => sendJson<void>('DELETE', `${a(id)}/previews/${q(pid)}`),
  /**
   * Where a browser opens a preview: on this (the API's) origin, which signs it in to the
   * preview's host with a one-time code (see docs/api.md, "Ports and previews").
   */
  previewOpenUrl: (pid: string) => `${BASE}/previews/${q(pid)}/open`,

  /** The agent's agent sessions (conversations with a harness), oldest first. */
  sessions: (id: string) => getJson<ChatSession[]>(`${a(id)}/sessions`),
  /** Creating a session does not wake the agent: the harness starts with the first prompt. */
  createSession: (id: string, body: NewChatSession) => sendJson<ChatSession>('POST', `${a(id)}/sessions`, body),
  renameSession: (id: string, sid: string, title: string) => sendJson<ChatSession>('PATCH', `${a(id)}/sessions/${q(sid)}`, { title }),
  deleteSession: (id: string, sid: string) => sendJson<void>('DELETE', `${a(id)}/sessions/${q(sid)}`),
  chatSession: (id: string, sid: string) => getJson<ChatSession>(`${a(id)}/sessions/${q(sid)}`),
  /** `202 {turn}`; 409 while a turn runs. Wakes a sleeping agent. */
  prompt: (id: string, sid: string, text: string) => sendJson<{ turn: number }>('POST', `${a(id)}/sessions/${q(sid)}/prompt`, { text }),
  cancelTurn: (id: string, sid: string) => sendJson<void>('POST', `${a(id)}/sessions/${q(sid)}/cancel`),
  /** The session's transcript as Server-Sent Events, from after `after` and then live. */
  sessionEventsUrl: (id: string, sid: string, after: number) => `${BASE}${a(id)}/sessions/${q(sid)}/events?after=${after}`,

  approvals: (state: 'pending' | 'resolved' = 'pending') => getJson<Approval[]>(`/approvals?state=${state}`),
  /** Answer with one of the offered options, by its id; 409 when already decided or expired. */
  answerApproval: (approvalId: string, optionId: string) => sendJson<Approval>('POST', `/approvals/${q(approvalId)}`, { optionId }),
  /** The configured harnesses, when the server tells them (see `Harness`). */
  async harnesses(): Promise<{ harnesses: Harness[]; defaultHarness: string | null }> {
    const l = (await api.limits()) as (Limits & { harnesses?: unknown; defaultHarness?: unknown }) | null;
    const list = Array.isArray(l?.harnesses) ? l.harnesses : [];
    const harnesses: Harness[] = [];
    for (const x of list) {
      if (typeof x === 'string') harnesses.push({ name: x });
      else if (x && typeof x === 'object' && typeof (x as Harness).name === 'string') {
        const d = (x as Harness).description;
        harnesses.push({ name: (x as Harness).name, description: typeof d === 'string' ? d : undefined });
      }
    }
    return { harnesses, defaultHarness: typeof l?.defaultHarness === 'string' ? l.defaultHarness : null };
  },
};

/** Upload one file with progress; the File object is the body, so the browser streams it. */
export function upload(
  id: string,
  path: string,
  file: File,
  onProgress: (loaded: number, total: number) => void,
): { promise: Promise<void>; abort: () => void } {
  const xhr = new XMLHttpRequest();
  const promise = new Promise<void>((resolve, reject) => {
    xhr.open('PUT', api.writeUrl(id, path));
    xhr.setRequestHeader('Content-Type', 'application/octet-stream');
    xhr.upload.onprogress = (e) => onProgress(e.loaded, e.lengthComputable ? e.total : file.size);
    xhr.onload = () => {
      if (xhr.status >= 200 && xhr.status < 300) {
        onProgress(file.size, file.size);
        resolve();
      } else {
        if (xhr.status === 401) onUnauthorized();
        reject(errorFrom(xhr.status, xhr.responseText, xhr.statusText));
      }
    };
    xhr.onerror = () =>
      reject(
        new ApiError(
          0,
          'network',
          'The upload was cut off before the server answered (the connection closed). The file may be over the server’s size limit, or the server stopped.',
        ),
      );
    xhr.onabort = () => reject(new ApiError(0, 'aborted', 'Upload cancelled.'));
    xhr.send(file);
  });
  return { promise, abort: () => xhr.abort() };
}
