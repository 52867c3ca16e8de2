// A session's transcript (the events of `GET …/sessions/{sid}/events`) folded into what the Chat
// tab shows: a list of items in transcript order, which only ever grows at its end, and whose
// items change in place (a message gains chunks, a tool call its updates, a permission its
// answer; each change bumps the item's `rev`). No DOM: unit-tested in node.
import type { Approval, PermissionResolved, TranscriptEvent } from './api';

interface Base {
  /** Stable for the item's life, unique in the model. */
  key: string;
  /** The sequence number of the event that made it. */
  seq: number;
  /** Bumped on every change. */
  rev: number;
  /** The turn it belongs to (null before the first one, or when the transcript does not say). */
  turn: number | null;
}

/** The user's prompt (`prompt` event), or the user's turn replayed by the harness (`user_message_chunk`). */
export interface PromptItem extends Base {
  kind: 'prompt';
  text: string;
  /** Non-text content, as one line each. */
  attachments: string[];
  replayed: boolean;
}
/** Consecutive `agent_message_chunk`s, joined. */
export interface MessageItem extends Base {
  kind: 'message';
  text: string;
  attachments: string[];
}
/** Consecutive `agent_thought_chunk`s, joined. */
export interface ThoughtItem extends Base {
  kind: 'thought';
  text: string;
}
export type ToolContent =
  | { type: 'text'; text: string }
  | { type: 'diff'; path: string; oldText: string | null; newText: string }
  | { type: 'other'; label: string };
/** A `tool_call` and the `tool_call_update`s of its `toolCallId`, merged. */
export interface ToolItem extends Base {
  kind: 'tool';
  toolCallId: string;
  title: string;
  /** ACP's tool kind: read, edit, execute, … */
  toolKind: string | null;
  /** pending, in_progress, completed, failed. */
  status: string;
  content: ToolContent[];
  /** `path` or `path:line`. */
  locations: string[];
  rawInput: unknown;
  rawOutput: unknown;
}
export interface PlanEntry {
  content: string;
  /** pending, in_progress, completed. */
  status: string;
  priority: string | null;
}
/** The turn's plan: each `plan` update replaces the entries. */
export interface PlanItem extends Base {
  kind: 'plan';
  entries: PlanEntry[];
}
/** A `notice`: waking, context_reset, harness_exited, gap, error (or a kind newer than this UI). */
export interface NoticeItem extends Base {
  kind: 'notice';
  noticeKind: string;
  text: string;
}
/** A turn that ended other than `end_turn`. */
export interface StopItem extends Base {
  kind: 'stop';
  stopReason: string;
}
/** A permission the harness asked for, and once answered how. */
export interface PermissionItem extends Base {
  kind: 'permission';
  approval: Approval;
  resolved: PermissionResolved | null;
}
/** Anything this UI does not know (an update kind, an event name, a malformed event), shown as JSON. */
export interface RawItem extends Base {
  kind: 'raw';
  label: string;
  json: string;
}

export type ChatItem = PromptItem | MessageItem | ThoughtItem | ToolItem | PlanItem | NoticeItem | StopItem | PermissionItem | RawItem;

export interface ChatModel {
  /** The sequence number of the last event applied (the SSE resume point). */
  lastSeq: number;
  items: ChatItem[];
  /** A turn has started and not ended. */
  running: boolean;
  /** The last turn the transcript named. */
  turn: number | null;
  /** How the last turn ended (null while one runs, or before any). */
  lastStop: string | null;
  /** The number of the last turn that ended. */
  endedTurn: number | null;
  tools: Map<string, ToolItem>;
  permissions: Map<string, PermissionItem>;
  nextKey: number;
}

export function newChat(): ChatModel {
  return { lastSeq: 0, items: [], running: false, turn: null, lastStop: null, endedTurn: null, tools: new Map(), permissions: new Map(), nextKey: 1 };
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const str = (v: unknown): string | null => (typeof v === 'string' ? v : null);
const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);

/** JSON for a person: indented, and never a throw (cycles cannot come from JSON, but be safe). */
export function pretty(v: unknown): string {
  try {
    return JSON.stringify(v, null, 2) ?? String(v);
  } catch {
    return String(v);
  }
}

/** One line that stands for a content block that is not text. */
export function blockLabel(b: unknown): string {
  if (!isObj(b)) return pretty(b);
  const type = str(b.type) ?? 'content';
  switch (type) {
    case 'image':
    case 'audio':
      return `[${type}${str(b.mimeType) ? ` ${b.mimeType}` : ''}${str(b.uri) ? ` ${b.uri}` : ''}]`;
    case 'resource_link':
      return `[link ${str(b.title) ?? str(b.name) ?? ''}${str(b.uri) ? ` ${b.uri}` : ''}]`.replace(/ +\]/, ']');
    case 'resource': {
      const r = isObj(b.resource) ? b.resource : {};
      return `[resource${str(r.uri) ? ` ${r.uri}` : ''}]`;
    }
    default:
      return `[${type}]`;
  }
}

/** The text of content blocks, and labels for the rest. An embedded text resource counts as text. */
function splitBlocks(blocks: unknown[]): { text: string; attachments: string[] } {
  let text = '';
  const attachments: string[] = [];
  for (const b of blocks) {
    if (isObj(b) && b.type === 'text' && typeof b.text === 'string') text += b.text;
    else attachments.push(blockLabel(b));
  }
  return { text, attachments };
}

function makeItem<T extends ChatItem>(m: ChatModel, seq: number, fields: Omit<T, 'key' | 'seq' | 'rev' | 'turn'> & { turn?: number | null }): T {
  const item = { turn: m.turn, ...fields, key: `i${m.nextKey++}`, seq, rev: 0 } as T;
  m.items.push(item);
  return item;
}

const last = (m: ChatModel): ChatItem | undefined => m.items[m.items.length - 1];

function raw(m: ChatModel, seq: number, label: string, data: unknown): void {
  makeItem<RawItem>(m, seq, { kind: 'raw', label, json: pretty(data) });
}

function toolContent(list: unknown): ToolContent[] {
  if (!Array.isArray(list)) return [];
  const out: ToolContent[] = [];
  for (const c of list) {
    if (!isObj(c)) continue;
    if (c.type === 'content') {
      const b = c.content;
      if (isObj(b) && b.type === 'text' && typeof b.text === 'string') out.push({ type: 'text', text: b.text });
      else out.push({ type: 'other', label: blockLabel(b) });
    } else if (c.type === 'diff') {
      out.push({ type: 'diff', path: str(c.path) ?? '', oldText: str(c.oldText), newText: str(c.newText) ?? '' });
    } else if (c.type === 'terminal') {
      out.push({ type: 'other', label: `[terminal ${str(c.terminalId) ?? ''}]` });
    } else {
      out.push({ type: 'other', label: `[${str(c.type) ?? 'content'}]` });
    }
  }
  return out;
}

function locations(list: unknown): string[] {
  if (!Array.isArray(list)) return [];
  return list.filter(isObj).map((l) => `${str(l.path) ?? ''}${num(l.line) !== null ? `:${l.line}` : ''}`);
}

/** Merge a `tool_call` or `tool_call_update`'s fields into the item: the fields present win. */
function mergeTool(t: ToolItem, u: Obj): void {
  if (str(u.title) !== null) t.title = u.title as string;
  if ('kind' in u) t.toolKind = str(u.kind);
  if (str(u.status) !== null) t.status = u.status as string;
  if ('content' in u && u.content != null) t.content = toolContent(u.content);
  if ('locations' in u && u.locations != null) t.locations = locations(u.locations);
  if ('rawInput' in u) t.rawInput = u.rawInput;
  if ('rawOutput' in u) t.rawOutput = u.rawOutput;
}

function planEntries(list: unknown): PlanEntry[] {
  if (!Array.isArray(list)) return [];
  return list.filter(isObj).map((e) => ({
    content: str(e.content) ?? pretty(e.content),
    status: str(e.status) ?? 'pending',
    priority: str(e.priority),
  }));
}

/** A text chunk joins the item before it when that is of the same kind and turn; else a new item. */
function chunk(m: ChatModel, seq: number, kind: 'message' | 'thought' | 'user', content: unknown): void {
  const blocks = Array.isArray(content) ? content : [content];
  const { text, attachments } = splitBlocks(blocks);
  const prev = last(m);
  if (kind === 'user') {
    if (prev?.kind === 'prompt' && prev.replayed && prev.turn === m.turn) {
      prev.text += text;
      prev.attachments.push(...attachments);
      prev.rev++;
    } else makeItem<PromptItem>(m, seq, { kind: 'prompt', text, attachments, replayed: true });
  } else if (kind === 'message') {
    if (prev?.kind === 'message' && prev.turn === m.turn) {
      prev.text += text;
      prev.attachments.push(...attachments);
      prev.rev++;
    } else makeItem<MessageItem>(m, seq, { kind: 'message', text, attachments });
  } else {
    const all = text + attachments.join('\n');
    if (prev?.kind === 'thought' && prev.turn === m.turn) {
      prev.text += all;
      prev.rev++;
    } else makeItem<ThoughtItem>(m, seq, { kind: 'thought', text: all });
  }
}

function update(m: ChatModel, seq: number, u: unknown): void {
  const kind = isObj(u) ? str(u.sessionUpdate) : null;
  if (!isObj(u) || kind === null) return raw(m, seq, 'update', u);
  switch (kind) {
    case 'agent_message_chunk':
      return chunk(m, seq, 'message', u.content);
    case 'agent_thought_chunk':
      return chunk(m, seq, 'thought', u.content);
    case 'user_message_chunk':
      return chunk(m, seq, 'user', u.content);
    case 'tool_call':
    case 'tool_call_update': {
      const id = str(u.toolCallId);
      if (id === null) return raw(m, seq, kind, u);
      let t = m.tools.get(id);
      if (t) {
        mergeTool(t, u);
        t.rev++;
      } else {
        t = makeItem<ToolItem>(m, seq, {
          kind: 'tool',
          toolCallId: id,
          title: id,
          toolKind: null,
          status: 'pending',
          content: [],
          locations: [],
          rawInput: undefined,
          rawOutput: undefined,
        });
        mergeTool(t, u);
        m.tools.set(id, t);
      }
      return;
    }
    case 'plan': {
      const entries = planEntries(u.entries);
      // One plan per turn, changed in place; a later turn's plan is a new item.
      const p = [...m.items].reverse().find((i): i is PlanItem => i.kind === 'plan');
      if (p && p.turn === m.turn) {
        p.entries = entries;
        p.rev++;
      } else makeItem<PlanItem>(m, seq, { kind: 'plan', entries });
      return;
    }
    default:
      return raw(m, seq, kind, u);
  }
}

/**
 * Apply one transcript event. Events at or before `lastSeq` were applied already (a stream
 * that came back may repeat them) and are ignored. Answers whether anything changed.
 */
export function applyEvent(m: ChatModel, ev: TranscriptEvent): boolean {
  if (ev.seq <= m.lastSeq) return false;
  m.lastSeq = ev.seq;
  const d = ev.data;
  switch (ev.event) {
    case 'prompt': {
      if (!isObj(d)) {
        raw(m, ev.seq, 'prompt', d);
        return true;
      }
      const turn = num(d.turn);
      if (turn !== null) m.turn = turn;
      const { text, attachments } = splitBlocks(Array.isArray(d.prompt) ? d.prompt : []);
      makeItem<PromptItem>(m, ev.seq, { kind: 'prompt', text, attachments, replayed: false });
      return true;
    }
    case 'update':
      update(m, ev.seq, d);
      return true;
    case 'turn': {
      if (!isObj(d)) {
        raw(m, ev.seq, 'turn', d);
        return true;
      }
      const turn = num(d.turn);
      if (turn !== null) m.turn = turn;
      if (d.state === 'started') {
        m.running = true;
        m.lastStop = null;
      } else if (d.state === 'ended') {
        m.running = false;
        m.endedTurn = turn ?? m.turn;
        const reason = str(d.stopReason) ?? 'unknown';
        m.lastStop = reason;
        if (reason !== 'end_turn') makeItem<StopItem>(m, ev.seq, { kind: 'stop', stopReason: reason });
      } else raw(m, ev.seq, 'turn', d);
      return true;
    }
    case 'notice':
      if (!isObj(d)) raw(m, ev.seq, 'notice', d);
      else makeItem<NoticeItem>(m, ev.seq, { kind: 'notice', noticeKind: str(d.kind) ?? 'notice', text: str(d.text) ?? '' });
      return true;
    case 'permission': {
      if (!isObj(d) || typeof d.id !== 'string' || !Array.isArray(d.options)) {
        raw(m, ev.seq, 'permission', d);
        return true;
      }
      const approval = d as unknown as Approval;
      const resolved: PermissionResolved | null =
        approval.state === 'resolved' && approval.outcome
          ? { id: approval.id, outcome: approval.outcome, optionId: approval.optionId ?? null, by: approval.decidedBy ?? '' }
          : null;
      const p = makeItem<PermissionItem>(m, ev.seq, { kind: 'permission', approval, resolved });
      m.permissions.set(approval.id, p);
      return true;
    }
    case 'permission_resolved': {
      const p = isObj(d) && typeof d.id === 'string' ? m.permissions.get(d.id) : undefined;
      // One whose question was dropped (a gap) has nothing to show it on.
      if (!p) return false;
      p.resolved = d as unknown as PermissionResolved;
      p.rev++;
      return true;
    }
    default:
      raw(m, ev.seq, `event: ${ev.event}`, d);
      return true;
  }
}

/** Permissions of the transcript that wait for an answer. */
export function pendingPermissions(m: ChatModel): PermissionItem[] {
  return [...m.permissions.values()].filter((p) => !p.resolved);
}

/** What a stop reason means, for a person. */
export function stopText(reason: string): string {
  switch (reason) {
    case 'end_turn':
      return 'The turn ended.';
    case 'cancelled':
      return 'The turn was cancelled.';
    case 'max_tokens':
      return 'The turn stopped: the model reached its token limit.';
    case 'max_turn_requests':
      return 'The turn stopped: it reached the most requests a turn may make.';
    case 'refusal':
      return 'The agent refused to go on.';
    case 'error':
      return 'The turn ended with an error.';
    default:
      return `The turn ended: ${reason}.`;
  }
}

/** The option's name with what it was, for a resolved permission. */
export function resolutionText(p: PermissionItem): string {
  const r = p.resolved;
  if (!r) return '';
  const option = p.approval.options.find((o) => o.optionId === r.optionId);
  const name = option ? `“${option.name}”` : r.optionId ? `“${r.optionId}”` : '';
  switch (r.outcome) {
    case 'selected':
      return `Answered ${name}${r.by ? ` (by ${r.by})` : ''}.`;
    case 'expired':
      return `Nobody answered in time${name ? `: ${name} was chosen` : ': refused'}.`;
    case 'cancelled':
      return 'Cancelled with the turn.';
    default:
      return `Resolved: ${String(r.outcome)}.`;
  }
}
