// The terminal's session picker: the agent's sessions (`GET …/terminals`), to attach to or end.
import { api, errorMessage, type TerminalSession } from './api';
import { formatTime, h, replace, toast } from './dom';

export interface SessionPicker {
  /** The "Sessions" button, which opens and closes the list. */
  button: HTMLButtonElement;
  /** The list's panel. */
  list: HTMLElement;
}

/**
 * `current` is the session shown (its row says "Shown"); `attach` is called with the session
 * chosen (the list closes first).
 */
export function sessionPicker(agentId: string, current: () => string | null, attach: (id: string) => void): SessionPicker {
  const button = h('button', { type: 'button', class: 'btn btn-small', 'aria-expanded': 'false', 'data-testid': 'sessions', title: 'This agent’s terminal sessions' }, 'Sessions');
  const list = h('div', { class: 'term-sessions card', hidden: true, 'data-testid': 'sessions-list' });

  const row = (t: TerminalSession): HTMLElement => {
    const shown = t.id === current();
    const attachBtn = h('button', { type: 'button', class: 'btn btn-small', disabled: shown }, shown ? 'Shown' : 'Attach');
    const kill = h('button', { type: 'button', class: 'btn btn-small btn-danger-ghost' }, 'End');
    attachBtn.addEventListener('click', () => {
      close();
      if (!shown) attach(t.id);
    });
    kill.addEventListener('click', async () => {
      kill.disabled = true;
      try {
        await api.killTerminal(agentId, t.id);
      } catch (e) {
        toast(errorMessage(e));
      }
      if (!list.hidden) void show();
    });
    const viewers = `${t.viewers} viewer${t.viewers === 1 ? '' : 's'}`;
    return h(
      'li',
      { 'data-session': t.id },
      h('span', { class: 'mono' }, t.id),
      h('span', { class: 'muted term-session-cmd', title: t.command }, t.command),
      h('span', { class: 'muted' }, `${viewers} · since ${formatTime(t.createdAt)}${t.exitCode != null ? ` · exited ${t.exitCode}` : ''}`),
      h('span', { class: 'spacer' }),
      attachBtn,
      kill,
    );
  };

  const show = async () => {
    replace(list, h('span', { class: 'muted' }, 'Loading…'));
    let sessions: TerminalSession[];
    try {
      sessions = await api.terminals(agentId);
    } catch (e) {
      replace(list, h('span', null, errorMessage(e)));
      return;
    }
    if (list.hidden) return;
    if (!sessions.length) {
      replace(list, h('span', { class: 'muted' }, 'No sessions (a sleeping agent has none).'));
      return;
    }
    replace(list, h('ul', { class: 'term-session-list' }, sessions.map(row)));
  };
  const close = () => {
    list.hidden = true;
    button.setAttribute('aria-expanded', 'false');
  };
  button.addEventListener('click', () => {
    if (!list.hidden) return close();
    list.hidden = false;
    button.setAttribute('aria-expanded', 'true');
    void show();
  });
  return { button, list };
}
