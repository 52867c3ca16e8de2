// An agent's background processes: the list (fetched when the tab opens, since listing wakes a
// sleeping agent, then kept current by `process` events), a form to start one with `sh -c`,
// Stop and Remove, and the selected one's output followed live.
import { api, ApiError, errorMessage, type Agent, type AgentState, type Process } from './api';
import { confirmDialog, dataTable, formatDuration, h, setText, syncRows, toast } from './dom';
import { processLog } from './proclog';
import { commandLine, exitText, procName, runTime } from './procfmt';
import { store } from './store';

/** States in which the agent can answer for its processes (a sleeping one wakes to do so). */
const LISTABLE: AgentState[] = ['running', 'paused', 'sleeping', 'starting'];

/** A process only ever goes from running to ended: an older report never undoes a newer one. */
function merge(m: Map<string, Process>, p: Process): void {
  const old = m.get(p.id);
  if (old && old.state !== 'running' && p.state === 'running') return;
  m.set(p.id, p);
}

/** Newest first. */
const byStart = (a: Process, b: Process) => b.startedAt.localeCompare(a.startedAt) || b.id.localeCompare(a.id);

export interface ProcessesView {
  el: HTMLElement;
  /** The tab opened: load the list, go on following the selected output. */
  shown(): void;
  /** The tab was left: stop following. */
  hidden(): void;
  /** The agent changed (state). */
  setAgent(a: Agent): void;
  dispose(): void;
}

interface Row {
  el: HTMLTableRowElement;
  update(p: Process): void;
  tick(now: number): void;
}

export function processesView(agentId: string): ProcessesView {
  let procs = new Map<string, Process>();
  const rows = new Map<string, Row>();
  let agent: Agent | null = null;
  let visible = false;
  let loaded = false;
  let loadSeq = 0;
  /** Events that came while the list was loading, replayed on top of it. */
  let pending: Process[] | null = null;
  let selected: string | null = null;
  /** Processes sent TERM from this page: their button sends KILL next. */
  const termSent = new Set<string>();
  const busy = new Set<string>();
  let ticker: ReturnType<typeof setInterval> | null = null;
  let disposed = false;

  // Start form
  const command = h('input', { id: 'proc-command', name: 'command', type: 'text', spellcheck: 'false', autocomplete: 'off', placeholder: 'npm run dev', 'data-testid': 'process-command' });
  const tag = h('input', { id: 'proc-tag', name: 'tag', type: 'text', spellcheck: 'false', autocomplete: 'off', placeholder: 'optional', 'data-testid': 'process-tag' });
  const keepAwake = h('input', { id: 'proc-keep-awake', name: 'keepAwake', type: 'checkbox', 'data-testid': 'process-keep-awake' });
  const startBtn = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Start');
  const formError = h('p', { class: 'form-error', role: 'alert', 'data-testid': 'process-error' });
  const form = h(
    'form',
    { class: 'procs-start', novalidate: true, 'aria-label': 'Start a process', 'data-testid': 'process-form' },
    h(
      'div',
      { class: 'procs-fields' },
      h('div', { class: 'field' }, h('label', { for: 'proc-command' }, 'Command', h('span', { class: 'hint' }, 'run with sh -c')), command),
      h('div', { class: 'field' }, h('label', { for: 'proc-tag' }, 'Tag'), tag),
      h('div', { class: 'field procs-check' }, h('label', { for: 'proc-keep-awake', title: 'While it runs, the agent does not fall asleep' }, keepAwake, ' Keep awake')),
      h('div', { class: 'field' }, startBtn),
    ),
    formError,
  );

  // List
  const notice = h('p', { class: 'procs-notice muted', 'data-testid': 'processes-notice' });
  const message = h('div', { class: 'files-message', role: 'status', 'data-testid': 'processes-message' });
  const tbody = h('tbody');
  const table = dataTable(
    { class: 'procs-table', 'data-testid': 'processes-table' },
    [
      ['col-proc', 'Process'],
      ['col-cmd', 'Command'],
      ['col-pstate', 'State'],
      ['col-exit', 'Exit'],
      ['col-dur', 'Duration'],
      ['col-actions', null],
    ],
    tbody,
  );
  const listing = h('div', { class: 'procs-listing' }, table, message);

  const log = processLog({
    agentId,
    blocked: () => (agent && agent.state !== 'running' ? `the agent is ${agent.state}` : null),
    onClose: () => select(null),
    onExit: (p) => {
      if (!procs.has(p.id)) return;
      merge(procs, p);
      render();
    },
  });

  const el = h('div', { class: 'procs', 'data-testid': 'processes', 'data-state': 'idle' }, form, notice, listing, log.el);

  const setMessage = (text: string, kind: 'info' | 'error' = 'info') => {
    message.className = `files-message files-${kind}`;
    setText(message, text);
  };

  const select = (id: string | null) => {
    selected = id;
    for (const [k, r] of rows) {
      r.el.classList.toggle('proc-selected', k === id);
      r.el.setAttribute('aria-selected', String(k === id));
    }
    const p = id ? procs.get(id) : undefined;
    if (!p) log.close();
    else if (log.current() !== p.id) log.open(p);
    else log.resume();
  };

  const stopOrKill = async (p: Process) => {
    const sig = termSent.has(p.id) ? 'KILL' : 'TERM';
    busy.add(p.id);
    render();
    try {
      await api.signalProcess(agentId, p.id, sig);
      termSent.add(p.id);
    } catch (e) {
      toast(`${sig === 'KILL' ? 'Kill' : 'Stop'} ${procName(p)}: ${errorMessage(e)}`);
    } finally {
      busy.delete(p.id);
      render();
    }
  };

  const remove = async (p: Process) => {
    const ok = await confirmDialog({
      title: `Remove “${procName(p)}”?`,
      body: ['The process ', h('strong', { class: 'mono' }, procName(p)), ' and its output will be forgotten.'],
      confirmLabel: 'Remove',
      danger: true,
    });
    if (!ok) return;
    busy.add(p.id);
    render();
    try {
      await api.removeProcess(agentId, p.id);
      procs.delete(p.id);
      if (selected === p.id) select(null);
    } catch (e) {
      toast(`Remove ${procName(p)}: ${errorMessage(e)}`);
    } finally {
      busy.delete(p.id);
      render();
    }
  };

  const makeRow = (first: Process): Row => {
    let p = first;
    const name = h('button', { type: 'button', class: 'file-link proc-name', 'data-act': 'select' });
    const cmd = h('td', { class: 'col-cmd mono' });
    const state = h('span', { class: 'proc-state' });
    const exit = h('td', { class: 'col-exit' });
    const dur = h('td', { class: 'col-dur' });
    const stop = h('button', { type: 'button', class: 'btn btn-small', 'data-act': 'stop' });
    const del = h('button', { type: 'button', class: 'btn btn-small btn-danger-ghost', 'data-act': 'remove' }, 'Remove');
    const el = h(
      'tr',
      { class: 'proc-row', 'data-process-id': first.id },
      h('td', { class: 'col-proc' }, name),
      cmd,
      h('td', { class: 'col-pstate' }, state),
      exit,
      dur,
      h('td', { class: 'col-actions' }, h('div', { class: 'file-actions' }, stop, del)),
    );
    name.addEventListener('click', () => select(p.id));
    stop.addEventListener('click', () => void stopOrKill(p));
    del.addEventListener('click', () => void remove(p));
    const tick = (now: number) => setText(dur, formatDuration(runTime(p, now)));
    return {
      el,
      tick,
      update(next) {
        p = next;
        const label = procName(p);
        const running = p.state === 'running';
        el.dataset.state = p.state;
        if (p.tag) el.dataset.tag = p.tag;
        setText(name, label);
        name.title = `Show the output of ${label}${p.tag ? ` (${p.id})` : ''}${p.pid ? `, pid ${p.pid}` : ''}`;
        const line = commandLine(p.command);
        setText(cmd, line);
        cmd.title = line;
        state.className = `proc-state proc-${p.state}`;
        setText(state, p.keepAwake && running ? `${p.state} · keeps awake` : p.state);
        setText(exit, exitText(p));
        tick(Date.now());
        const kill = termSent.has(p.id);
        setText(stop, kill ? 'Kill' : 'Stop');
        stop.title = kill ? 'Send KILL to the whole process tree' : 'Send TERM to the whole process tree';
        stop.setAttribute('aria-label', `${kill ? 'Kill' : 'Stop'} ${label}`);
        stop.disabled = !running || busy.has(p.id);
        del.setAttribute('aria-label', `Remove ${label}`);
        del.disabled = running || busy.has(p.id);
      },
    };
  };

  const anyRunning = () => [...procs.values()].some((p) => p.state === 'running');
  const updateTicker = () => {
    const want = visible && anyRunning();
    if (want && !ticker) {
      ticker = setInterval(() => {
        const now = Date.now();
        for (const [id, r] of rows) if (procs.get(id)?.state === 'running') r.tick(now);
      }, 1000);
    } else if (!want && ticker) {
      clearInterval(ticker);
      ticker = null;
    }
  };

  const render = () => {
    const list = [...procs.values()].sort(byStart);
    syncRows(tbody, rows, list, (p) => p.id, makeRow, (r, p) => {
      r.el.classList.toggle('proc-selected', p.id === selected);
      r.el.setAttribute('aria-selected', String(p.id === selected));
    });
    if (loaded) setMessage(list.length ? '' : 'No processes yet. Start one above: it keeps running after this page closes.');
    updateTicker();
  };

  const load = async () => {
    const seq = ++loadSeq;
    const events: Process[] = [];
    pending = events;
    el.dataset.state = 'loading';
    if (!loaded) setMessage('Loading…');
    try {
      const list = await api.processes(agentId);
      if (seq !== loadSeq) return;
      const m = new Map<string, Process>();
      for (const p of list) m.set(p.id, p);
      for (const p of events) merge(m, p);
      procs = m;
      pending = null;
      loaded = true;
      el.dataset.state = 'ready';
      render();
      if (selected && !procs.has(selected)) select(null);
    } catch (e) {
      if (seq !== loadSeq) return;
      pending = null;
      el.dataset.state = 'error';
      setMessage(`Cannot list the processes: ${errorMessage(e)}`, 'error');
    }
  };

  /** Load when the tab is open and the agent can answer; otherwise say why not. */
  const maybeLoad = () => {
    if (!visible || disposed || pending) return;
    if (agent && !LISTABLE.includes(agent.state)) {
      if (!loaded) setMessage(`Processes are available once the agent is running (now: ${agent.state}).`);
      return;
    }
    if (agent) void load();
  };

  const showNotice = () => {
    const s = agent?.state;
    setText(
      notice,
      !s || s === 'running'
        ? ''
        : s === 'sleeping'
          ? 'The agent is asleep; processes that were running when it fell asleep are lost. Starting one wakes it.'
          : `The agent is ${s}.`,
    );
  };

  const unsubEvents = store.subscribeProcesses((e) => {
    if (e.id !== agentId) return;
    // Before the first list nothing is shown: one process alone would read as the whole list.
    if (!loaded && !pending) return;
    pending?.push(e.process);
    merge(procs, e.process);
    render();
  });
  // The event stream came back after a drop: what ended meanwhile was not told.
  let streamStatus = store.status;
  const unsubStore = store.subscribe(() => {
    const was = streamStatus;
    streamStatus = store.status;
    if (was === 'reconnecting' && streamStatus === 'live' && visible && loaded && agent?.state === 'running') void load();
  });

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const line = command.value.trim();
    const name = tag.value.trim();
    formError.textContent = '';
    command.removeAttribute('aria-invalid');
    tag.removeAttribute('aria-invalid');
    if (!line) {
      formError.textContent = 'Enter a command.';
      command.setAttribute('aria-invalid', 'true');
      command.focus();
      return;
    }
    startBtn.disabled = true;
    try {
      const p = await api.startProcess(agentId, {
        command: ['sh', '-c', line],
        tag: name || undefined,
        keepAwake: keepAwake.checked || undefined,
      });
      command.value = '';
      tag.value = '';
      merge(procs, p);
      render();
      select(p.id);
      if (!loaded) void load();
    } catch (err) {
      const msg = errorMessage(err);
      if (err instanceof ApiError && err.status === 0) toast(msg);
      else formError.textContent = msg;
      if (err instanceof ApiError && err.field === 'tag') tag.setAttribute('aria-invalid', 'true');
      else if (err instanceof ApiError && err.field === 'command') command.setAttribute('aria-invalid', 'true');
    } finally {
      startBtn.disabled = false;
    }
  });

  return {
    el,
    shown() {
      if (visible) return;
      visible = true;
      maybeLoad();
      if (agent?.state === 'running') log.resume();
      updateTicker();
    },
    hidden() {
      if (!visible) return;
      visible = false;
      log.pause();
      updateTicker();
    },
    setAgent(a) {
      const was = agent?.state;
      agent = a;
      showNotice();
      if (!visible || was === a.state) return;
      if (a.state === 'running') {
        // Awake again (or at last): the list may have changed meanwhile.
        maybeLoad();
        log.resume();
      } else if (!loaded) maybeLoad();
    },
    dispose() {
      disposed = true;
      loadSeq++;
      unsubEvents();
      unsubStore();
      if (ticker) clearInterval(ticker);
      ticker = null;
      log.dispose();
    },
  };
}
