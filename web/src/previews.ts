// An agent's previews: port, access, URL (with a copy button; a `token` preview's link with its
// token right after it was made, once: the server never shows the token again), expiry, Open
// (through the sign-in hand-off) and Delete.
import { api, errorMessage, type Preview } from './api';
import { copyText } from './clipboard';
import { confirmDialog, dataTable, formatTime, h, setText, syncRows, toast } from './dom';
import { ACCESS_HINT, expiryText, tokenUrl, webUrl } from './previewfmt';

export interface PreviewsList {
  el: HTMLElement;
  /** Ask the server for the list again. */
  load(): Promise<void>;
  /** The previews as last listed. */
  current(): Preview[];
  /** A preview made from this page: listed at once, with its token link if it has one. */
  add(p: Preview): void;
  /** Called after each listing. */
  onChange(fn: () => void): void;
  dispose(): void;
}

interface Row {
  el: HTMLTableRowElement;
  update(p: Preview): void;
}

export function previewsList(agentId: string): PreviewsList {
  let previews: Preview[] = [];
  /** Token links of previews made from this page: shown until the page closes, never stored. */
  const tokenLinks = new Map<string, string>();
  const rows = new Map<string, Row>();
  const busy = new Set<string>();
  let loaded = false;
  let loadSeq = 0;
  let disposed = false;
  let changed: () => void = () => {};

  const message = h('div', { class: 'files-message', role: 'status', 'data-testid': 'previews-message' });
  const tbody = h('tbody');
  const table = dataTable(
    { class: 'ports-table previews-table', 'data-testid': 'previews-table' },
    [
      ['col-port', 'Port'],
      ['col-access', 'Access'],
      ['col-url', 'URL'],
      ['col-expires', 'Expires'],
      ['col-actions', null],
    ],
    tbody,
  );
  const el = h(
    'section',
    { class: 'previews', 'aria-labelledby': 'previews-title', 'data-testid': 'previews', 'data-state': 'idle' },
    h('h3', { id: 'previews-title', class: 'ports-title' }, 'Previews'),
    h('div', { class: 'ports-listing' }, table, message),
  );

  const copy = async (text: string, what: string) => {
    if (await copyText(text)) toast(`Copied the ${what}.`, 'info');
    else toast(`The browser did not allow copying. The ${what}: ${text}`);
  };

  const remove = async (p: Preview) => {
    const ok = await confirmDialog({
      title: `Delete the preview of port ${p.port}?`,
      body: ['Its URL stops working at once, and every connection open through it is cut: ', h('span', { class: 'mono' }, p.url)],
      confirmLabel: 'Delete',
      danger: true,
    });
    if (!ok) return;
    busy.add(p.id);
    render();
    try {
      await api.deletePreview(agentId, p.id);
      previews = previews.filter((x) => x.id !== p.id);
      tokenLinks.delete(p.id);
    } catch (e) {
      toast(`Delete the preview of port ${p.port}: ${errorMessage(e)}`);
    } finally {
      busy.delete(p.id);
      render();
      void load();
    }
  };

  const makeRow = (first: Preview): Row => {
    let p = first;
    const port = h('td', { class: 'col-port mono' });
    const access = h('span', { class: 'preview-access' });
    const link = h('a', { class: 'preview-url mono', target: '_blank', rel: 'noopener noreferrer', 'data-testid': 'preview-url' });
    const plain = h('span', { class: 'preview-url mono' });
    const tokenLine = h('div', { class: 'preview-token-box', 'data-testid': 'preview-token-url' });
    const expires = h('td', { class: 'col-expires' });
    const open = h('a', { class: 'btn btn-small', target: '_blank', rel: 'noopener', 'data-act': 'open' }, 'Open');
    const copyBtn = h('button', { type: 'button', class: 'btn btn-small', 'data-act': 'copy' }, 'Copy');
    const del = h('button', { type: 'button', class: 'btn btn-small btn-danger-ghost', 'data-act': 'delete' }, 'Delete');
    const urlCell = h('td', { class: 'col-url' });
    /** What the URL cell shows (a link or text, and the token link), to rebuild it only when that changes. */
    let cellKey = '';
    const el = h(
      'tr',
      { class: 'preview-row', 'data-preview-id': first.id },
      port,
      h('td', { class: 'col-access' }, access),
      urlCell,
      expires,
      h('td', { class: 'col-actions' }, h('div', { class: 'file-actions' }, open, copyBtn, del)),
    );
    copyBtn.addEventListener('click', () => {
      const t = tokenLinks.get(p.id);
      void copy(t ?? p.url, t ? 'link with its token' : 'URL');
    });
    del.addEventListener('click', () => void remove(p));
    return {
      el,
      update(next) {
        p = next;
        el.dataset.port = String(p.port);
        el.dataset.access = p.access;
        setText(port, String(p.port));
        setText(access, p.access);
        access.className = `preview-access preview-${p.access}`;
        access.title = ACCESS_HINT[p.access];
        const href = webUrl(p.url);
        const shown = href ? link : plain;
        if (href) link.href = href;
        setText(shown, p.url);
        const t = tokenLinks.get(p.id);
        const key = `${href ? 'link' : 'text'} ${t ?? ''}`;
        if (key !== cellKey) {
          cellKey = key;
          if (t) {
            tokenLine.replaceChildren(
              h('span', { class: 'preview-token-note' }, 'With its token (shown once: copy it now): '),
              h('span', { class: 'mono preview-token-link' }, t),
            );
          }
          urlCell.replaceChildren(shown, t ? tokenLine : '');
        }
        setText(expires, expiryText(p.expiresAt));
        expires.title = p.expiresAt ? formatTime(p.expiresAt) : 'Until it is deleted or the agent is destroyed';
        open.href = api.previewOpenUrl(p.id);
        open.setAttribute('aria-label', `Open the preview of port ${p.port}`);
        copyBtn.setAttribute('aria-label', `Copy the ${t ? 'link with the token' : 'URL'} of the preview of port ${p.port}`);
        del.setAttribute('aria-label', `Delete the preview of port ${p.port}`);
        del.disabled = busy.has(p.id);
      },
    };
  };

  const render = () => {
    const ids = new Set(previews.map((p) => p.id));
    for (const id of tokenLinks.keys()) if (!ids.has(id)) tokenLinks.delete(id);
    syncRows(tbody, rows, previews, (p) => p.id, makeRow);
    table.hidden = previews.length === 0;
    if (loaded) {
      message.className = 'files-message files-info';
      setText(message, previews.length ? '' : 'No previews. “Open preview” on a port above makes one.');
    }
  };

  const load = async () => {
    const seq = ++loadSeq;
    el.dataset.state = 'loading';
    try {
      const list = await api.previews(agentId);
      if (seq !== loadSeq || disposed) return;
      previews = list.sort((a, b) => a.port - b.port);
      loaded = true;
      el.dataset.state = 'ready';
      render();
      changed();
    } catch (e) {
      if (seq !== loadSeq || disposed) return;
      el.dataset.state = 'error';
      message.className = 'files-message files-error';
      setText(message, `Cannot list the previews: ${errorMessage(e)}`);
    }
  };

  render();
  return {
    el,
    load,
    current: () => previews,
    add(p) {
      // A listing that left before this preview was made would drop it again.
      loadSeq++;
      if (p.token) tokenLinks.set(p.id, tokenUrl(p.url, p.token));
      previews = [...previews.filter((x) => x.id !== p.id), { ...p, token: null }].sort((a, b) => a.port - b.port);
      render();
      changed();
    },
    onChange(fn) {
      changed = fn;
    },
    dispose() {
      disposed = true;
      loadSeq++;
    },
  };
}
