// An agent's setup script (its preset's `setup`): how the last run went, its output followed live
// (the Processes tab's log view, on the process tagged `setup`), and a button to run it again.
// Hidden for an agent without one, and on a server without presets.
import { api, errorMessage, type Agent } from './api';
import { h, setText, toast } from './dom';
import { processLog } from './proclog';
import { store } from './store';

export interface SetupCard {
  el: HTMLElement;
  update(a: Agent): void;
  dispose(): void;
}

export function setupCard(agentId: string): SetupCard {
  let agent: Agent | null = null;
  /** The process whose output is shown (its id, or the tag before the server told the id). */
  let shownKey: string | null = null;
  let lastState: string | null = null;
  /** The person closed the log: it stays closed until they open it again. */
  let closedByHand = false;
  let openSeq = 0;

  const stateText = h('span', { class: 'setup-state', 'data-testid': 'setup-state' });
  const note = h('span', { class: 'muted setup-note' });
  const logBtn = h('button', { type: 'button', class: 'btn btn-small', 'aria-expanded': 'false', 'data-testid': 'setup-log-toggle' }, 'Show log');
  const again = h('button', { type: 'button', class: 'btn btn-small', 'data-testid': 'setup-again' }, 'Run setup again');
  const log = processLog({
    agentId,
    blocked: () => (agent && agent.state !== 'running' ? `the agent is ${agent.state}` : null),
    onClose: () => {
      closedByHand = true;
      shownKey = null;
      syncToggle();
    },
    onExit: () => {},
    testId: 'setup-log',
  });
  const el = h(
    'section',
    { class: 'setup-card card', hidden: true, 'aria-label': 'Setup script', 'data-testid': 'setup' },
    h('div', { class: 'setup-line' }, h('strong', null, 'Setup script'), stateText, note, h('span', { class: 'spacer' }), logBtn, again),
    log.el,
  );

  const syncToggle = () => {
    const open = log.current() !== null;
    logBtn.setAttribute('aria-expanded', String(open));
    setText(logBtn, open ? 'Hide log' : 'Show log');
  };

  /** Show the setup process's output from its start, following it. */
  const openLog = async (key: string) => {
    const seq = ++openSeq;
    shownKey = key;
    try {
      const p = await api.process(agentId, key);
      if (seq !== openSeq || shownKey !== key) return;
      log.open(p);
    } catch (e) {
      if (seq !== openSeq) return;
      shownKey = null;
      setText(note, `The log cannot be shown: ${errorMessage(e)}`);
    }
    syncToggle();
  };

  logBtn.addEventListener('click', () => {
    if (log.current() !== null || shownKey !== null) {
      closedByHand = true;
      openSeq++;
      shownKey = null;
      log.close();
      syncToggle();
    } else if (agent?.setup) {
      closedByHand = false;
      void openLog(agent.setup.processId ?? 'setup');
    }
  });

  again.addEventListener('click', async () => {
    again.disabled = true;
    try {
      await api.runSetup(agentId);
      closedByHand = false;
      // The agent's `setup` changes with the new run; the event may come later than this answer.
      store.put(await api.agent(agentId));
    } catch (e) {
      toast(`Run setup again: ${errorMessage(e)}`);
    } finally {
      if (agent) update(agent);
    }
  });

  function update(a: Agent): void {
    agent = a;
    const s = a.setup;
    el.hidden = !s;
    if (!s) {
      if (log.current() !== null) log.close();
      shownKey = null;
      return;
    }
    el.className = `setup-card card setup-${s.state}`;
    el.dataset.state = s.state;
    if (s.processId) el.dataset.processId = s.processId;
    else delete el.dataset.processId;
    const code = s.exitCode != null ? ` (exit code ${s.exitCode})` : '';
    setText(stateText, s.state === 'running' ? 'running…' : s.state === 'done' ? `done${code}` : `failed${code}`);
    setText(note, s.state === 'failed' ? 'The agent is usable; the log says what went wrong.' : '');
    again.disabled = s.state === 'running' || a.state !== 'running';
    again.title = a.state !== 'running' ? 'The agent must be running' : '';

    const key = s.processId ?? 'setup';
    // A new run: a new process id, or running again after it had ended.
    const rerun = (shownKey !== null && shownKey !== key) || (s.state === 'running' && lastState !== null && lastState !== 'running');
    lastState = s.state;
    const canRead = a.state === 'running';
    if (canRead && (rerun || (shownKey === null && !closedByHand))) void openLog(key);
    else if (canRead && rerun === false && shownKey !== null) log.resume();
    else if (!canRead) log.pause(`the agent is ${a.state}`);
    syncToggle();
  }

  return {
    el,
    update,
    dispose() {
      openSeq++;
      log.dispose();
    },
  };
}
