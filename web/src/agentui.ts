// Pieces shared by the agents list and the agent page: state badge, status line, actions.
import { api, errorMessage, type Agent, type AgentState, type PullProgress } from './api';
import { confirmDialog, formatBytes, formatFuture, formatMb, h, setText, toast } from './dom';
import { store } from './store';
import { isExpiring, ttlText } from './ttlfmt';

const LABELS: Record<AgentState, string> = {
  creating: 'Creating',
  starting: 'Starting',
  running: 'Running',
  paused: 'Paused',
  stopping: 'Stopping',
  sleeping: 'Sleeping',
  rebuilding: 'Rebuilding',
  destroying: 'Destroying',
  error: 'Error',
};

const PROGRESS: Partial<Record<AgentState, string>> = {
  creating: 'Creating the sandbox…',
  starting: 'Starting the sandbox…',
  stopping: 'Stopping…',
  rebuilding: 'Rebuilding the container (home is kept)…',
  destroying: 'Destroying the agent and its files…',
};

export const isBusy = (s: AgentState) => s in PROGRESS;

/** A badge whose element stays put; `update` changes its state. */
export function badge(): { el: HTMLElement; update: (s: AgentState) => void } {
  const dot = h('span', { class: 'badge-dot', 'aria-hidden': 'true' });
  const label = h('span', { class: 'badge-label' });
  const el = h('span', { class: 'badge', 'data-testid': 'state' }, dot, label);
  return {
    el,
    update(s) {
      el.className = `badge badge-${s}${isBusy(s) ? ' badge-busy' : ''}`;
      el.dataset.state = s;
      setText(label, LABELS[s] ?? s);
    },
  };
}

export function resources(a: Agent): string {
  const disk = a.diskMb == null ? '' : ` · ${formatMb(a.diskMb)} disk`;
  return `${a.cpus} CPU${a.cpus === 1 ? '' : 's'} · ${formatMb(a.memoryMb)}${disk} · sleeps after ${a.idleMinutes} min idle`;
}

/**
 * The one-line status: progress while busy, the error and what to do, a rebuild notice, or
 * when a running agent will sleep. Fixed height, so state changes do not move the layout.
 */
export function statusLine(): { el: HTMLElement; update: (a: Agent) => void } {
  const bar = h('span', { class: 'progress-indeterminate', 'aria-hidden': 'true' });
  const text = h('span', { class: 'status-text' });
  const el = h('div', { class: 'status-line', 'data-testid': 'status-line' }, bar, text);
  return {
    el,
    update(a) {
      let msg = '';
      let kind = '';
      if (isBusy(a.state) && a.pull) {
        msg = `Pulling image… ${a.pull.percent}%`;
        kind = 'busy';
      } else if (isBusy(a.state)) {
        msg = PROGRESS[a.state]!;
        kind = 'busy';
      } else if (a.state === 'error') {
        msg = `Failed: ${a.error ?? 'unknown error'} — Start to retry, or Rebuild to recreate the container.`;
        kind = 'error';
      } else if (a.needsRebuild) {
        msg = 'Image or resources changed — Rebuild to apply (the home folder is kept).';
        kind = 'warn';
      } else if (a.state === 'running' && a.sleepsAt) {
        msg = `Sleeps ${formatFuture(a.sleepsAt)} if idle`;
      } else if (a.state === 'paused') {
        // When it sleeps fully comes before the hint: a narrow line cuts the end, and the Wake
        // button beside it says the rest.
        const deep = a.sleepsAt ? ` Sleeps fully ${formatFuture(a.sleepsAt)}.` : '';
        msg = `Paused (processes and memory kept).${deep} Wake or any use resumes it at once.`;
        kind = 'muted';
      } else if (a.state === 'sleeping') {
        msg = 'Asleep — opening a terminal or Start wakes it.';
        kind = 'muted';
      }
      el.className = `status-line${kind ? ` status-${kind}` : ''}`;
      el.setAttribute('role', kind === 'error' ? 'alert' : 'status');
      setText(text, msg);
      text.title = a.pull && isBusy(a.state) ? `${msg} ${pullDetail(a.pull)}` : msg;
    },
  };
}

/** `4.0 MiB of 12.0 MiB, 1 of 2 layers — IMAGE`, as far as the registry has told. */
function pullDetail(p: PullProgress): string {
  const parts: string[] = [];
  if (p.bytesTotal > 0) parts.push(`${formatBytes(p.bytesDone)} of ${formatBytes(p.bytesTotal)}`);
  if (p.layersTotal > 0) parts.push(`${p.layersDone} of ${p.layersTotal} layers`);
  parts.push(p.image);
  return `(${parts.join(', ')})`;
}

type Action = 'start' | 'stop' | 'rebuild' | 'destroy';

const ALLOWED: Record<Action, AgentState[]> = {
  start: ['paused', 'sleeping', 'error'],
  stop: ['running', 'paused', 'starting'],
  rebuild: ['running', 'paused', 'sleeping', 'error'],
  destroy: ['creating', 'starting', 'running', 'paused', 'stopping', 'sleeping', 'rebuilding', 'error'],
};

const LABEL: Record<Action, string> = { start: 'Start', stop: 'Stop', rebuild: 'Rebuild', destroy: 'Destroy' };

/**
 * The button's word for `act` on `a`. A paused agent is not started but woken: the same start
 * call thaws it at once, with its processes and memory as they were.
 */
function actionLabel(act: Action, a: Agent | null): string {
  return act === 'start' && a?.state === 'paused' ? 'Wake' : LABEL[act];
}

/**
 * Start (Wake, while paused) / Stop / Rebuild / Destroy. Buttons are always present; they are
 * disabled when the state forbids them.
 */
export function actions(opts: { onDestroyed?: () => void } = {}): {
  el: HTMLElement;
  update: (a: Agent) => void;
} {
  let agent: Agent | null = null;
  const busy = new Set<Action>();
  const buttons = {} as Record<Action, HTMLButtonElement>;
  const el = h('div', { class: 'actions' });

  const refresh = () => {
    for (const act of Object.keys(buttons) as Action[]) {
      const b = buttons[act];
      b.disabled = !agent || busy.has(act) || !ALLOWED[act].includes(agent.state);
      b.classList.toggle('btn-attention', act === 'rebuild' && !!agent?.needsRebuild && !b.disabled);
      const label = actionLabel(act, agent);
      setText(b, label);
      if (agent) b.setAttribute('aria-label', `${label} ${agent.name}`);
    }
  };

  const run = async (act: Action) => {
    if (!agent) return;
    const a = agent;
    // Named as the button read when clicked ("Wake", not "Start", for a paused agent).
    const label = actionLabel(act, a);
    if (act === 'destroy') {
      const ok = await confirmDialog({
        title: `Destroy “${a.name}”?`,
        body: [
          'The agent ',
          h('strong', null, a.name),
          ` (${a.id}), its container and its home folder will be deleted. This cannot be undone.`,
        ],
        confirmLabel: `Destroy ${a.name}`,
        danger: true,
      });
      if (!ok) return;
    }
    busy.add(act);
    refresh();
    try {
      const updated = await api[act](a.id);
      if (updated && typeof updated === 'object' && 'id' in updated) store.putAnswer(updated);
      if (act === 'destroy') opts.onDestroyed?.();
    } catch (e) {
      toast(`${label} ${a.name}: ${errorMessage(e)}`);
    } finally {
      busy.delete(act);
      refresh();
    }
  };

  for (const act of Object.keys(LABEL) as Action[]) {
    const b = h(
      'button',
      { type: 'button', class: `btn btn-small${act === 'destroy' ? ' btn-danger-ghost' : ''}`, 'data-action': act },
      LABEL[act],
    );
    b.addEventListener('click', () => void run(act));
    buttons[act] = b;
    el.appendChild(b);
  }
  refresh();
  return {
    el,
    update(a) {
      agent = a;
      refresh();
    },
  };
}

/**
 * The time left before the agent's TTL destroys it ("destroyed in 4 min"), with "Keep alive" to
 * restart its lifetime; hidden for an agent without a TTL. `update` with the same agent again
 * ticks it; under a minute, or once the server's `expiring` event came, it warns.
 */
export function ttlLine(): { el: HTMLElement; update: (a: Agent) => void } {
  const text = h('span', { class: 'ttl-text', 'data-testid': 'ttl-text' });
  const keep = h('button', { type: 'button', class: 'btn btn-small', 'data-testid': 'keep-alive' }, 'Keep alive') as HTMLButtonElement;
  const el = h('div', { class: 'ttl-line', 'data-testid': 'ttl', hidden: true }, text, keep);
  let agent: Agent | null = null;
  /** The deadline whose `expiring` event was already told as a toast. */
  let toldFor: string | null = null;
  keep.addEventListener('click', async () => {
    if (!agent) return;
    const a = agent;
    keep.disabled = true;
    try {
      const kept = await api.keepAlive(a.id);
      store.put(kept);
      toast(`${a.name} kept alive: ${ttlText(kept.expiresAt) ?? 'no lifetime'}`, 'info');
    } catch (e) {
      toast(`Keep alive ${a.name}: ${errorMessage(e)}`, 'error');
    } finally {
      keep.disabled = false;
    }
  });
  return {
    el,
    update(a) {
      agent = a;
      const words = a.state === 'destroying' ? null : ttlText(a.expiresAt);
      el.hidden = words === null;
      if (words === null) return;
      const told = store.toldExpiring(a);
      if (told && toldFor !== a.expiresAt) {
        toldFor = a.expiresAt ?? null;
        toast(`${a.name} is destroyed in under a minute unless kept alive`, 'info');
      }
      const warn = isExpiring(a.expiresAt, told);
      el.classList.toggle('ttl-expiring', warn);
      el.dataset.expiring = String(warn);
      el.setAttribute('role', warn ? 'alert' : 'status');
      setText(text, words.charAt(0).toUpperCase() + words.slice(1));
      text.title = `Destroyed at ${new Date(a.expiresAt!).toLocaleString()} unless kept alive`;
      keep.setAttribute('aria-label', `Keep ${a.name} alive`);
    },
  };
}
