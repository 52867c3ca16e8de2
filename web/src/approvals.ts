// The approval queue: the pending approvals (one list fetch, then `approval` events of the
// stream `GET /api/v1/events`, loaded again whenever that stream comes back), the header's badge
// with their count, which opens a list of them across agents, and the option buttons that answer
// one (also used by the Chat tab's permission cards).
import { api, ApiError, errorMessage, type Approval, type ApprovalOption } from './api';
import { formatFuture, h, replace, setText, toast } from './dom';
import { linkHandler } from './nav';
import { store } from './store';

type Listener = () => void;

class ApprovalQueue {
  /** Pending approvals by id, in the order they were asked. */
  readonly pending = new Map<string, Approval>();
  loaded = false;
  private listeners = new Set<Listener>();
  private unsubs: Array<() => void> = [];
  /** Events that came while the list was loading, applied on top of it. */
  private buffered: Approval[] | null = null;
  private gen = 0;

  subscribe(fn: Listener): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  private emit(): void {
    for (const fn of [...this.listeners]) fn();
  }

  /** Apply an Approval from an event or an answer: a resolved one leaves the queue. */
  put(a: Approval): void {
    this.buffered?.push(a);
    if (a.state === 'pending') this.pending.set(a.id, a);
    else this.pending.delete(a.id);
    this.emit();
  }

  private load(): void {
    const gen = ++this.gen;
    const buffered: Approval[] = [];
    this.buffered = buffered;
    api
      .approvals('pending')
      .then((list) => {
        if (gen !== this.gen) return;
        this.buffered = null;
        this.pending.clear();
        for (const a of list) this.pending.set(a.id, a);
        for (const a of buffered) {
          if (a.state === 'pending') this.pending.set(a.id, a);
          else this.pending.delete(a.id);
        }
        this.loaded = true;
        this.emit();
      })
      .catch(() => {
        // A server without the queue, or a drop: the next reconnect loads it again.
        if (gen === this.gen) this.buffered = null;
      });
  }

  /** Follow the queue while signed in (the store's stream must run). */
  start(): void {
    if (this.unsubs.length) return;
    this.unsubs.push(
      store.on('approval', (data) => {
        const a = data as Approval;
        if (a && typeof a.id === 'string' && typeof a.state === 'string') this.put(a);
      }),
    );
    let status = store.status;
    this.unsubs.push(
      store.subscribe(() => {
        const was = status;
        status = store.status;
        if (status === 'live' && was !== 'live') this.load();
      }),
    );
    this.load();
  }

  stop(): void {
    for (const u of this.unsubs) u();
    this.unsubs = [];
    this.gen++;
    this.pending.clear();
    this.loaded = false;
    this.emit();
  }
}

export const approvals = new ApprovalQueue();

/** Does choosing this option let the tool run? (ACP's allow_once, allow_always.) */
export const allows = (o: ApprovalOption) => o.kind.startsWith('allow');

/**
 * One button per offered option, labelled with its name; a click sends that option by its id.
 * `onAnswered` gets the resolved Approval; on a 409 (someone answered first, or it expired) a
 * toast says so and the queue is loaded again by the event that resolved it.
 */
export function optionButtons(a: Approval, onAnswered?: (a: Approval) => void): HTMLElement {
  const wrap = h('div', { class: 'approval-options', role: 'group', 'aria-label': 'Answer' });
  const buttons = a.options.map((o) => {
    const b = h(
      'button',
      {
        type: 'button',
        class: `btn btn-small ${allows(o) ? 'btn-allow' : 'btn-danger-ghost'}`,
        title: o.kind.replace(/_/g, ' '),
        'data-option-id': o.optionId,
        'data-option-kind': o.kind,
      },
      o.name,
    );
    b.addEventListener('click', async () => {
      for (const x of buttons) x.disabled = true;
      try {
        const answered = await api.answerApproval(a.id, o.optionId);
        if (answered && typeof answered === 'object' && 'id' in answered) {
          approvals.put(answered);
          onAnswered?.(answered);
        }
      } catch (e) {
        toast(e instanceof ApiError && e.status === 409 ? `This question was already answered, or it expired: ${e.message}` : `Answer: ${errorMessage(e)}`);
        for (const x of buttons) x.disabled = false;
      }
    });
    return b;
  });
  wrap.append(...buttons);
  return wrap;
}

/** The tool call's title, as the harness gave it. */
export const approvalTitle = (a: Approval): string =>
  (a.command != null && `${a.requester ?? 'Someone'} runs: ${a.command}`) ||
  (typeof a.toolCall?.title === 'string' && a.toolCall.title) || (typeof a.toolCall?.toolCallId === 'string' ? a.toolCall.toolCallId : 'A tool call');

/** The link to the Chat tab of the approval's session. */
export const sessionPath = (agentId: string, sessionId: string) =>
  `/agents/${encodeURIComponent(agentId)}#chat/${encodeURIComponent(sessionId)}`;

let badgeInstance: { el: HTMLElement } | null = null;

/** The header's pending-approvals badge (one for the page, moved into each new header). */
export function approvalsBadge(): { el: HTMLElement } {
  if (badgeInstance) return badgeInstance;
  const count = h('span', { class: 'approvals-count', 'data-testid': 'approvals-count' });
  const button = h(
    'button',
    { type: 'button', class: 'btn btn-small approvals-badge', 'aria-expanded': 'false', 'aria-haspopup': 'dialog', 'data-testid': 'approvals-badge' },
    'Approvals ',
    count,
  );
  const list = h('ul', { class: 'approvals-list' });
  const empty = h('p', { class: 'muted' }, 'Nothing waits for an answer.');
  const panel = h(
    'div',
    { class: 'approvals-panel card', role: 'dialog', 'aria-label': 'Pending approvals', hidden: true, 'data-testid': 'approvals-panel' },
    h('h2', null, 'Pending approvals'),
    empty,
    list,
  );
  const el = h('div', { class: 'approvals', hidden: true }, button, panel);

  const close = () => {
    panel.hidden = true;
    button.setAttribute('aria-expanded', 'false');
  };
  const fill = () => {
    const items = [...approvals.pending.values()];
    empty.hidden = items.length > 0;
    replace(
      list,
      items.map((a) => {
        const agent = store.agents.get(a.agentId);
        // A command's approval has no session: its link is the agent's page.
        const path = a.sessionId != null ? sessionPath(a.agentId, a.sessionId) : `/agents/${encodeURIComponent(a.agentId)}`;
        const open = h('a', { href: path, class: 'approval-link' }, a.sessionId != null ? 'Open the session' : 'Open the agent');
        open.addEventListener('click', (e) => {
          close();
          linkHandler(path)(e);
        });
        return h(
          'li',
          { class: 'approval-item', 'data-approval-id': a.id },
          h('div', { class: 'approval-head' }, h('strong', null, agent?.name ?? a.agentId), h('span', { class: 'muted' }, ` · expires ${formatFuture(a.expiresAt)}`)),
          h('div', { class: 'approval-title' }, approvalTitle(a)),
          optionButtons(a),
          open,
        );
      }),
    );
  };
  const update = () => {
    const n = approvals.pending.size;
    setText(count, String(n));
    button.title = `${n} question${n === 1 ? '' : 's'} from agents wait${n === 1 ? 's' : ''} for an answer`;
    el.hidden = n === 0;
    if (n === 0) close();
    if (!panel.hidden) fill();
  };
  button.addEventListener('click', () => {
    const opening = panel.hidden;
    panel.hidden = !opening;
    button.setAttribute('aria-expanded', String(opening));
    if (opening) fill();
  });
  el.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && !panel.hidden) {
      close();
      button.focus();
    }
  });
  document.addEventListener('click', (e) => {
    if (!panel.hidden && !el.contains(e.target as Node)) close();
  });
  approvals.subscribe(update);
  update();
  badgeInstance = { el };
  return badgeInstance;
}
