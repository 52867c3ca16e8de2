// The Ports tab: the TCP ports listening in the agent's sandbox, asked for every 2 s while the tab
// is shown (a listing never wakes the agent; a sleeping one has none), each with "Open preview"
// and a choice of access; and the agent's previews below (see previews.ts).
import { api, ApiError, errorMessage, type Agent, type PreviewAccess } from './api';
import { dataTable, h, setText, syncRows, toast } from './dom';
import { ACCESS, ACCESS_HINT, portRows, previewOf, type PortRow } from './previewfmt';
import { ensurePreview, openInNewTab } from './previewopen';
import { previewsList } from './previews';

/** How often the ports are asked for while the tab is shown. */
const POLL_MS = 2000;
/** The previews are listed again every this many polls (they change from here, mostly). */
const PREVIEWS_EVERY = 5;

export interface PortsView {
  el: HTMLElement;
  /** The tab opened: list now, then every 2 s. */
  shown(): void;
  /** The tab was left: stop asking. */
  hidden(): void;
  /** The agent changed (state). */
  setAgent(a: Agent): void;
  dispose(): void;
}

interface Row {
  el: HTMLTableRowElement;
  update(r: PortRow): void;
}

export function portsView(agentId: string): PortsView {
  let agent: Agent | null = null;
  let visible = false;
  let disposed = false;
  let timer: ReturnType<typeof setTimeout> | null = null;
  let pollSeq = 0;
  let polls = 0;
  let ports: PortRow[] = [];
  let loaded = false;
  const rows = new Map<number, Row>();
  const opening = new Set<number>();

  const previews = previewsList(agentId);

  const message = h('div', { class: 'files-message', role: 'status', 'data-testid': 'ports-message' });
  const tbody = h('tbody');
  const table = dataTable(
    { class: 'ports-table', 'data-testid': 'ports-table' },
    [
      ['col-port', 'Port'],
      ['col-address', 'Address'],
      ['col-process', 'Process'],
      ['col-preview', 'Preview'],
      ['col-open', null],
    ],
    tbody,
  );
  const el = h(
    'div',
    { class: 'ports', 'data-testid': 'ports', 'data-state': 'idle' },
    h(
      'section',
      { class: 'ports-section', 'aria-labelledby': 'ports-title' },
      h('h3', { id: 'ports-title', class: 'ports-title' }, 'Listening ports'),
      h('p', { class: 'muted ports-note' }, 'What listens inside the sandbox. A preview opens a port in the browser on an address of its own; the sandbox stays closed to the network.'),
      h('div', { class: 'ports-listing' }, table, message),
    ),
    previews.el,
  );

  const setMessage = (text: string, kind: 'info' | 'error' = 'info') => {
    message.className = `files-message files-${kind}`;
    setText(message, text);
  };

  const open = async (port: number, access: PreviewAccess) => {
    opening.add(port);
    render();
    try {
      const { preview, created } = await openInNewTab(() => ensurePreview(agentId, port, access));
      if (created) previews.add(preview);
      else if (preview.access !== access) {
        toast(`Port ${port} has a ${preview.access} preview already: opened that one. Delete it to make a ${access} one.`, 'info');
      }
      void previews.load();
    } catch (e) {
      toast(`Open a preview of port ${port}: ${errorMessage(e)}`);
    } finally {
      opening.delete(port);
      render();
    }
  };

  const makeRow = (first: PortRow): Row => {
    let r = first;
    const port = h('td', { class: 'col-port mono' });
    const address = h('td', { class: 'col-address mono' });
    const proc = h('td', { class: 'col-process mono' });
    const badge = h('span', { class: 'preview-access' });
    const preview = h('td', { class: 'col-preview' }, badge);
    const id = `port-access-${first.port}`;
    const access = h(
      'select',
      { id, class: 'port-access', 'data-testid': 'preview-access' },
      ACCESS.map((a) => h('option', { value: a, title: ACCESS_HINT[a] }, a)),
    );
    const openBtn = h('button', { type: 'button', class: 'btn btn-small btn-primary', 'data-act': 'open-preview' }, 'Open preview');
    const el = h(
      'tr',
      { class: 'port-row', 'data-port': String(first.port) },
      port,
      address,
      proc,
      preview,
      h(
        'td',
        { class: 'col-open' },
        h('div', { class: 'file-actions' }, h('label', { for: id, class: 'visually-hidden' }, `Access of a new preview of port ${first.port}`), access, openBtn),
      ),
    );
    openBtn.addEventListener('click', () => void open(r.port, access.value as PreviewAccess));
    return {
      el,
      update(next) {
        r = next;
        setText(port, String(r.port));
        setText(address, r.addresses.join(', '));
        setText(proc, r.process ?? '');
        const p = previewOf(previews.current(), r.port);
        el.dataset.preview = p?.access ?? '';
        badge.hidden = !p;
        if (p) {
          setText(badge, p.access);
          badge.className = `preview-access preview-${p.access}`;
          badge.title = ACCESS_HINT[p.access];
        }
        // The port's preview decides the access: the choice is for a new one.
        access.disabled = !!p;
        if (p) access.value = p.access;
        access.title = p ? 'The port has a preview: this is its access' : 'Who may open the new preview';
        openBtn.disabled = opening.has(r.port);
        openBtn.setAttribute('aria-label', `Open preview of port ${r.port}`);
      },
    };
  };

  const render = () => {
    syncRows(tbody, rows, ports, (p) => p.port, makeRow);
    table.hidden = ports.length === 0;
    const s = agent?.state;
    if (ports.length) setMessage('');
    else if (s === 'sleeping') setMessage('The agent is asleep: nothing listens. Opening a preview wakes it.');
    else if (s && s !== 'running') setMessage(`The agent is ${s}: nothing listens.`);
    else if (loaded) setMessage('Nothing listens in the sandbox yet. Start a server (for example python3 -m http.server 8000) and its port shows here.');
  };
  previews.onChange(render);

  /** Whether asking can find anything: only a running sandbox has ports (a listing never wakes one). */
  const canList = () => !agent || agent.state === 'running';

  /** Set when the agent is gone (404): nothing more to ask. */
  let gone = false;

  const poll = async () => {
    timer = null;
    if (!visible || disposed || gone) return;
    const seq = ++pollSeq;
    if (polls++ % PREVIEWS_EVERY === 0) void previews.load();
    try {
      if (canList()) {
        if (!loaded) {
          el.dataset.state = 'loading';
          setMessage('Loading…');
        }
        const list = await api.ports(agentId);
        if (seq !== pollSeq) return;
        ports = portRows(list);
        loaded = true;
      } else {
        ports = [];
      }
      el.dataset.state = 'ready';
      render();
    } catch (e) {
      if (seq !== pollSeq) return;
      if (e instanceof ApiError && e.status === 404) gone = true;
      el.dataset.state = 'error';
      setMessage(`Cannot list the ports: ${errorMessage(e)}`, 'error');
    } finally {
      if (seq === pollSeq && visible && !disposed && !gone) timer = setTimeout(() => void poll(), POLL_MS);
    }
  };

  const stop = () => {
    pollSeq++;
    if (timer) clearTimeout(timer);
    timer = null;
  };

  return {
    el,
    shown() {
      if (visible) return;
      visible = true;
      polls = 0;
      void poll();
    },
    hidden() {
      if (!visible) return;
      visible = false;
      stop();
    },
    setAgent(a) {
      const was = agent?.state;
      agent = a;
      if (was === a.state) return;
      if (a.state !== 'running') ports = [];
      render();
      // Awake (or up) now: ask at once rather than at the next tick.
      if (visible && a.state === 'running') {
        stop();
        void poll();
      }
    },
    dispose() {
      disposed = true;
      visible = false;
      stop();
      previews.dispose();
    },
  };
}
