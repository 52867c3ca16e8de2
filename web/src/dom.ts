// A tiny DOM builder. Data only ever reaches the page as text nodes or attribute values,
// never as HTML, so hostile names (quotes, `<script>`, unicode) render as what they are.

export type Child = Node | string | number | null | undefined | false | Child[];

type Handler = (ev: Event) => void;
export interface Props {
  [key: string]: unknown;
}

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props?: Props | null,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (props) {
    for (const [key, value] of Object.entries(props)) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith('on') && typeof value === 'function') {
        el.addEventListener(key.slice(2).toLowerCase(), value as Handler);
      } else if (key === 'class') {
        el.className = String(value);
      } else if (key === 'value' || key === 'checked' || key === 'disabled' || key === 'hidden') {
        (el as unknown as Record<string, unknown>)[key] = value;
      } else if (value === true) {
        el.setAttribute(key, '');
      } else {
        el.setAttribute(key, String(value));
      }
    }
  }
  append(el, children);
  return el;
}

/**
 * A table with one header row: `columns` are [class, label] pairs, the last one's label null for
 * an actions column (named for screen readers only).
 */
export function dataTable(props: Props, columns: Array<[string, string | null]>, body: HTMLTableSectionElement): HTMLTableElement {
  const head = columns.map(([cls, label]) =>
    h('th', { scope: 'col', class: cls }, label ?? h('span', { class: 'visually-hidden' }, 'Actions')),
  );
  return h('table', props, h('thead', null, h('tr', null, head)), body);
}

/** A table row kept across renders: its element and how it shows a new version of its item. */
export interface KeyedRow<T> {
  el: HTMLElement;
  update(item: T): void;
}

/**
 * Makes `body` show `items` in order, one row each, keyed by `key`: rows of items that went are
 * removed, new ones made by `make`, every row updated and moved into place. Rows live on in
 * `rows` between renders, so what a person is doing in one (a selection, a focused button)
 * survives a refresh. `each` runs on every row after its update.
 */
export function syncRows<K, T, R extends KeyedRow<T>>(
  body: HTMLElement,
  rows: Map<K, R>,
  items: T[],
  key: (item: T) => K,
  make: (item: T) => R,
  each?: (row: R, item: T) => void,
): void {
  const present = new Set(items.map(key));
  for (const [k, r] of rows) {
    if (!present.has(k)) {
      r.el.remove();
      rows.delete(k);
    }
  }
  items.forEach((item, i) => {
    const k = key(item);
    let r = rows.get(k);
    if (!r) {
      r = make(item);
      rows.set(k, r);
    }
    r.update(item);
    each?.(r, item);
    if (body.children[i] !== r.el) body.insertBefore(r.el, body.children[i] ?? null);
  });
}

export function append(parent: Node, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(parent, child);
    else if (child instanceof Node) parent.appendChild(child);
    else parent.appendChild(document.createTextNode(String(child)));
  }
}

/** Replace all children of `parent` with `children`. */
export function replace(parent: Node, ...children: Child[]): void {
  while (parent.firstChild) parent.removeChild(parent.firstChild);
  append(parent, children);
}

/** Set text only when it changed (keeps selection and avoids needless layout). */
export function setText(el: Node, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}

export function formatBytes(n: number): string {
  if (!Number.isFinite(n) || n < 0) return '—';
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[i]}`;
}

export function formatMb(mb: number): string {
  if (mb >= 1024 && mb % 1024 === 0) return `${mb / 1024} GiB`;
  if (mb >= 1024) return `${(mb / 1024).toFixed(1)} GiB`;
  return `${mb} MiB`;
}

const dateFmt = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });

/** `mtime` may be RFC 3339 or seconds since the epoch. */
export function formatTime(value: string | number | null | undefined): string {
  if (value === null || value === undefined || value === '') return '—';
  const d = typeof value === 'number' ? new Date(value < 1e12 ? value * 1000 : value) : new Date(value);
  if (Number.isNaN(d.getTime())) return String(value);
  return dateFmt.format(d);
}

/** "in 12 min", "in 1 h 5 min", "in under a minute". */
export function formatFuture(iso: string, now = Date.now()): string {
  const ms = new Date(iso).getTime() - now;
  if (Number.isNaN(ms)) return '';
  if (ms <= 60_000) return 'in under a minute';
  const min = Math.round(ms / 60_000);
  if (min < 60) return `in ${min} min`;
  const hours = Math.floor(min / 60);
  const rest = min % 60;
  return rest ? `in ${hours} h ${rest} min` : `in ${hours} h`;
}

/** "350 ms", "4.2 s", "12 s", "3 min 12 s", "2 h 5 min". */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) return '—';
  ms = Math.max(0, ms);
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 10_000) return `${(Math.floor(ms / 100) / 10).toFixed(1)} s`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s} s`;
  const min = Math.floor(s / 60);
  if (min < 60) return s % 60 ? `${min} min ${s % 60} s` : `${min} min`;
  const hours = Math.floor(min / 60);
  if (hours < 48) return min % 60 ? `${hours} h ${min % 60} min` : `${hours} h`;
  return `${Math.floor(hours / 24)} d ${hours % 24} h`;
}

let toastHost: HTMLElement | null = null;

/** A short message at the bottom of the screen, read out by screen readers. */
export function toast(message: string, kind: 'error' | 'info' = 'error'): void {
  if (!toastHost) {
    toastHost = h('div', { class: 'toasts', role: 'status', 'aria-live': 'polite' });
    document.body.appendChild(toastHost);
  }
  const close = h('button', { class: 'toast-close', type: 'button', 'aria-label': 'Dismiss' }, '×');
  const item = h('div', { class: `toast toast-${kind}` }, h('span', null, message), close);
  const remove = () => item.remove();
  close.addEventListener('click', remove);
  toastHost.appendChild(item);
  setTimeout(remove, kind === 'error' ? 10_000 : 4_000);
}

/** A modal confirmation. Resolves true when the person confirms. */
export function confirmDialog(opts: {
  title: string;
  body: Child;
  confirmLabel: string;
  danger?: boolean;
}): Promise<boolean> {
  return new Promise((resolve) => {
    const cancel = h('button', { type: 'button', class: 'btn', value: 'cancel' }, 'Cancel');
    const ok = h(
      'button',
      { type: 'button', class: `btn ${opts.danger ? 'btn-danger' : 'btn-primary'}`, 'data-confirm': '' },
      opts.confirmLabel,
    );
    const dialog = h(
      'dialog',
      { class: 'dialog', 'aria-labelledby': 'dialog-title' },
      h('h2', { id: 'dialog-title' }, opts.title),
      h('div', { class: 'dialog-body' }, opts.body),
      h('div', { class: 'dialog-actions' }, cancel, ok),
    );
    let answered = false;
    const finish = (v: boolean) => {
      if (answered) return;
      answered = true;
      dialog.close();
      dialog.remove();
      resolve(v);
    };
    cancel.addEventListener('click', () => finish(false));
    ok.addEventListener('click', () => finish(true));
    dialog.addEventListener('close', () => finish(false));
    document.body.appendChild(dialog);
    dialog.showModal();
    cancel.focus();
  });
}
