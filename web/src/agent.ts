// One agent: header with state and actions, then Terminal, Files, Processes, Ports and Chat tabs.
import { api, ApiError, errorMessage, type Agent } from './api';
import { actions, badge, resources, statusLine, ttlLine } from './agentui';
import { h, replace, setText } from './dom';
import { filesView } from './files';
import { linkHandler, navigate, type Page } from './nav';
import { processesView } from './processes';
import { portsView } from './ports';
import { chatView } from './chat';
import { store } from './store';
import { settingsForm } from './settings';
import { egressCard } from './egress';
import { accessCard } from './access';
import { envCard } from './env';
import { setupCard } from './setup';
import { terminalView } from './terminal';

type Tab = 'terminal' | 'files' | 'processes' | 'ports' | 'chat';

export function agentPage(id: string): Page {
  let agent: Agent | null = store.agents.get(id) ?? null;
  let disposed = false;

  const back = h('a', { href: '/', class: 'back', onclick: linkHandler('/') }, '← Agents');
  const title = h('h1', { class: 'agent-page-title' });
  const idText = h('span', { class: 'agent-id mono' }, id);
  const b = badge();
  const acts = actions({ onDestroyed: () => navigate('/') });
  const meta = h('div', { class: 'agent-meta' });
  const status = statusLine();
  const ttl = ttlLine();
  /** A panel under the header that `button` opens (filled from the agent) and closes. */
  const disclosure = <P extends { el: HTMLElement; fill: (a: Agent) => void }>(
    button: HTMLButtonElement,
    make: (getAgent: () => Agent | null, onDone: () => void) => P,
  ): P => {
    const panel: P = make(
      () => agent,
      () => {
        panel.el.hidden = true;
        button.setAttribute('aria-expanded', 'false');
        button.focus();
      },
    );
    panel.el.hidden = true;
    button.addEventListener('click', () => {
      const open = panel.el.hidden;
      panel.el.hidden = !open;
      button.setAttribute('aria-expanded', String(open));
      if (open && agent) {
        panel.fill(agent);
        panel.el.querySelector<HTMLElement>('input, textarea')?.focus();
      }
    });
    return panel;
  };
  const settingsBtn = h('button', { type: 'button', class: 'btn btn-small', 'aria-expanded': 'false', 'data-testid': 'settings' }, 'Settings');
  const settings = disclosure(settingsBtn, settingsForm);
  const egressBtn = h('button', { type: 'button', class: 'btn btn-small', 'aria-expanded': 'false', 'data-testid': 'egress' }, 'Internet');
  const egress = disclosure(egressBtn, egressCard);
  const accessBtn = h('button', { type: 'button', class: 'btn btn-small', 'aria-expanded': 'false', 'data-testid': 'access' }, 'Access');
  const access = disclosure(accessBtn, accessCard);
  // Env and setup: only on a server that has them (the agent then carries `env` / `setup`).
  const envBtn = h('button', { type: 'button', class: 'btn btn-small', 'aria-expanded': 'false', 'data-testid': 'env', hidden: true }, 'Env');
  const env = disclosure(envBtn, envCard);
  const setup = setupCard(id);
  const head = h(
    'div',
    { class: 'agent-head' },
    h('div', { class: 'agent-head-line' }, back, title, idText, b.el, h('span', { class: 'spacer' }), envBtn, egressBtn, accessBtn, settingsBtn, acts.el),
    h('div', { class: 'agent-head-line agent-line2' }, meta, status.el, ttl.el),
    settings.el,
    egress.el,
    access.el,
    env.el,
    setup.el,
  );

  const term = terminalView(id, () => agent?.name ?? id);
  const files = filesView(id);
  const procs = processesView(id);
  const ports = portsView(id);
  const chat = chatView(id);

  const tabs: Record<Tab, { button: HTMLButtonElement; panel: HTMLElement }> = {
    terminal: {
      button: h('button', { type: 'button', role: 'tab', id: 'tab-terminal', 'aria-controls': 'panel-terminal', class: 'tab' }, 'Terminal'),
      panel: h('section', { role: 'tabpanel', id: 'panel-terminal', 'aria-labelledby': 'tab-terminal', class: 'panel panel-terminal' }, term.el),
    },
    files: {
      button: h('button', { type: 'button', role: 'tab', id: 'tab-files', 'aria-controls': 'panel-files', class: 'tab' }, 'Files'),
      panel: h('section', { role: 'tabpanel', id: 'panel-files', 'aria-labelledby': 'tab-files', class: 'panel panel-files' }, files.el),
    },
    processes: {
      button: h('button', { type: 'button', role: 'tab', id: 'tab-processes', 'aria-controls': 'panel-processes', class: 'tab' }, 'Processes'),
      panel: h('section', { role: 'tabpanel', id: 'panel-processes', 'aria-labelledby': 'tab-processes', class: 'panel panel-processes' }, procs.el),
    },
    ports: {
      button: h('button', { type: 'button', role: 'tab', id: 'tab-ports', 'aria-controls': 'panel-ports', class: 'tab' }, 'Ports'),
      panel: h('section', { role: 'tabpanel', id: 'panel-ports', 'aria-labelledby': 'tab-ports', class: 'panel panel-ports' }, ports.el),
    },
    chat: {
      button: h('button', { type: 'button', role: 'tab', id: 'tab-chat', 'aria-controls': 'panel-chat', class: 'tab' }, 'Chat'),
      panel: h('section', { role: 'tabpanel', id: 'panel-chat', 'aria-labelledby': 'tab-chat', class: 'panel panel-chat' }, chat.el),
    },
  };
  const tabOrder: Tab[] = ['terminal', 'files', 'processes', 'ports', 'chat'];
  // `#chat/SID` opens the Chat tab on that session.
  let active: Tab = tabOrder.find((t) => t !== 'terminal' && (location.hash === `#${t}` || location.hash.startsWith(`#${t}/`))) ?? 'terminal';
  const select = (t: Tab, focus = false) => {
    active = t;
    for (const k of tabOrder) {
      const on = k === t;
      tabs[k].button.setAttribute('aria-selected', String(on));
      tabs[k].button.tabIndex = on ? 0 : -1;
      tabs[k].panel.hidden = !on;
    }
    // The Chat tab writes its own address (with the session).
    if (t !== 'chat') history.replaceState(null, '', t === 'terminal' ? location.pathname : `#${t}`);
    if (focus) tabs[t].button.focus();
    // Listing processes wakes a sleeping agent: only while their tab is open.
    if (t === 'processes') procs.shown();
    else procs.hidden();
    // The ports are asked for every 2 s, but only while their tab is open.
    if (t === 'ports') ports.shown();
    else ports.hidden();
    // A conversation streams only while its tab is open.
    if (t === 'chat') chat.shown();
    else chat.hidden();
    if (t === 'terminal') {
      term.shown();
      maybeConnect();
    }
  };
  const tablist = h('div', { role: 'tablist', class: 'tabs', 'aria-label': 'Agent views' }, tabOrder.map((t) => tabs[t].button));
  tablist.addEventListener('keydown', (e) => {
    const i = tabOrder.indexOf(active);
    if (e.key === 'ArrowRight' || e.key === 'ArrowLeft') {
      e.preventDefault();
      select(tabOrder[(i + (e.key === 'ArrowRight' ? 1 : tabOrder.length - 1)) % tabOrder.length], true);
    }
  });
  for (const t of tabOrder) tabs[t].button.addEventListener('click', () => select(t));

  const gone = h('div', { class: 'gone card', hidden: true, role: 'alert' });
  const body = h('div', { class: 'agent-body' }, tablist, tabOrder.map((t) => tabs[t].panel));
  const el = h('div', { class: 'page agent-page', 'data-agent-id': id }, head, gone, body);

  /** The terminal opens by itself once, when the agent can take one (that wakes a sleeping agent). */
  let autoConnected = false;
  const maybeConnect = () => {
    if (!agent || disposed || active !== 'terminal') return;
    const s = agent.state;
    const canOpen = s === 'running' || s === 'paused' || s === 'sleeping' || s === 'starting';
    if (canOpen) {
      term.setWaiting(null);
      if (!autoConnected) {
        autoConnected = true;
        term.connect();
      }
    } else if (!autoConnected) {
      term.setWaiting(
        s === 'error'
          ? `The agent failed: ${agent.error ?? 'unknown error'}. Start or rebuild it to open a terminal.`
          : s === 'creating' || s === 'rebuilding'
            ? 'Waiting for the sandbox… the terminal opens when it is ready.'
            : `The agent is ${s}.`,
      );
    }
  };

  const update = () => {
    if (store.deleted.has(id)) {
      agent = null;
      gone.hidden = false;
      replace(gone, 'This agent was destroyed. ', h('a', { href: '/', onclick: linkHandler('/') }, 'Back to the agents'));
      body.hidden = true;
      b.update('destroying');
      ttl.el.hidden = true;
      return;
    }
    const a = store.agents.get(id) ?? agent;
    if (!a) return;
    agent = a;
    document.title = `${a.name} — agenthold`;
    setText(title, a.name);
    b.update(a.state);
    acts.update(a);
    const sep = () => h('span', { class: 'sep', 'aria-hidden': 'true' }, '·');
    replace(
      meta,
      a.preset ? [h('span', { class: 'agent-preset', 'data-testid': 'agent-preset', title: 'Preset' }, `preset ${a.preset}`), sep()] : null,
      h('span', { class: 'mono agent-image' }, a.image),
      sep(),
      h('span', null, resources(a)),
      sep(),
      h('span', { class: 'agent-runtime', 'data-testid': 'agent-runtime', title: 'Container runtime' }, `runtime ${a.runtime}`),
      a.env && Object.keys(a.env).length ? [sep(), h('span', { class: 'agent-env mono', 'data-testid': 'agent-env', title: Object.entries(a.env).map(([k, v]) => `${k}=${v}`).join('\n') }, `env ${Object.keys(a.env).sort().join(', ')}`)] : null,
      // Granted secrets, by name only: the sandbox sees placeholders, the API never a value.
      a.secrets && a.secrets.length ? [sep(), h('span', { class: 'agent-secrets mono', 'data-testid': 'agent-secrets', title: 'Secrets granted to the agent (placeholders in its env)' }, `secrets ${a.secrets.join(', ')}`)] : null,
    );
    envBtn.hidden = a.env === undefined;
    setup.update(a);
    status.update(a);
    ttl.update(a);
    if (!egress.el.hidden) egress.update(a);
    const running = a.state === 'running';
    files.setAvailable(
      running,
      running ? '' : a.state === 'sleeping' ? 'The agent is asleep. Start it (or open the terminal) to browse its files.' : a.state === 'paused' ? 'The agent is paused. Wake it (or open the terminal) to browse its files.' : `Files are available while the agent is running (now: ${a.state}).`,
    );
    procs.setAgent(a);
    ports.setAgent(a);
    maybeConnect();
  };

  const unsub = store.subscribe(update);
  const tick = setInterval(() => agent && status.update(agent), 20_000);
  // The lifetime's countdown ticks by the second.
  const ttlTick = setInterval(() => agent && ttl.update(agent), 1000);

  // The store may not have the list yet (first page load): ask for this agent directly.
  api
    .agent(id)
    .then((a) => {
      if (disposed) return;
      if (!store.agents.has(id) && !store.deleted.has(id)) store.put(a);
      else update();
    })
    .catch((e: unknown) => {
      if (disposed) return;
      if (e instanceof ApiError && e.status === 404) {
        gone.hidden = false;
        replace(gone, `There is no agent “${id}”. `, h('a', { href: '/', onclick: linkHandler('/') }, 'Back to the agents'));
        body.hidden = true;
        setText(title, 'Not found');
      } else {
        gone.hidden = false;
        replace(gone, `Cannot load the agent: ${errorMessage(e)}`);
      }
    });

  setText(title, agent?.name ?? id);
  // Mount first, then select (xterm needs to be in the document to measure itself).
  queueMicrotask(() => {
    if (disposed) return;
    select(active);
    update();
  });

  return {
    el,
    unmount() {
      disposed = true;
      unsub();
      clearInterval(tick);
      clearInterval(ttlTick);
      term.dispose();
      files.dispose();
      procs.dispose();
      ports.dispose();
      chat.dispose();
      setup.dispose();
      document.title = 'agenthold';
    },
  };
}
