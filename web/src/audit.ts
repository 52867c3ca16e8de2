// The Audit page: who did what, newest first, with filters (agent, user, action, since) and a
// button that reads older entries. Admins see every entry; others their own and their agents'.
import { api, ApiError, errorMessage, type AuditEntry } from './api';
import { dataTable, formatTime, h, replace, setText } from './dom';
import type { Page } from './nav';

const PAGE = 100;

function row(e: AuditEntry): HTMLTableRowElement {
  const who = e.tokenName ? `${e.userName} (token ${e.tokenName})` : e.userName;
  return h(
    'tr',
    { 'data-testid': 'audit-row', 'data-action': e.action },
    h('td', { class: 'col-time' }, formatTime(e.at)),
    h('td', null, who),
    h('td', { class: 'mono' }, e.action),
    h('td', null, e.agentName ?? e.agentId ?? ''),
    h('td', { class: 'mono audit-detail' }, e.detail ?? ''),
    h('td', { class: 'mono' }, String(e.status)),
    h('td', { class: 'mono muted' }, e.address),
  );
}

export function auditPage(): Page {
  const field = (id: string, label: string, placeholder: string) => {
    const input = h('input', { id, name: id, type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder });
    return { input, el: h('div', { class: 'field' }, h('label', { for: id }, label), input) };
  };
  const agent = field('audit-agent', 'Agent', 'name or id');
  const user = field('audit-user', 'User', 'name or id');
  const action = field('audit-action', 'Action', 'e.g. exec, fs.write');
  const since = field('audit-since', 'Since', 'e.g. 24h or a time');
  const apply = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Filter');
  const error = h('p', { class: 'form-error', role: 'alert', 'data-testid': 'audit-error' });
  const body = h('tbody');
  const table = dataTable(
    { class: 'data-table', 'data-testid': 'audit-table', 'aria-labelledby': 'audit-title' },
    [
      ['col-time', 'When'],
      ['col-who', 'Who'],
      ['col-action', 'Action'],
      ['col-agent', 'Agent'],
      ['col-detail', 'Detail'],
      ['col-status', 'Status'],
      ['col-address', 'From'],
    ],
    body,
  );
  const status = h('p', { class: 'muted', role: 'status' }, 'Loading…');
  const older = h('button', { type: 'button', class: 'btn btn-small', hidden: true }, 'Older entries');
  let oldest: number | null = null;
  let gen = 0;
  const params = (): Record<string, string> => {
    const p: Record<string, string> = { limit: String(PAGE) };
    for (const [k, f] of [['agent', agent], ['user', user], ['action', action], ['since', since]] as const) {
      const v = f.input.value.trim();
      if (v) p[k] = v;
    }
    return p;
  };
  const load = async (more: boolean) => {
    const mine = ++gen;
    const p = params();
    if (more && oldest !== null) p.before = String(oldest);
    setText(error, '');
    try {
      const entries = await api.audit(p);
      if (mine !== gen) return;
      if (!more) replace(body);
      body.append(...entries.map(row));
      oldest = entries.length ? entries[entries.length - 1].id : oldest;
      older.hidden = entries.length < PAGE;
      setText(status, body.childElementCount ? '' : 'No entries.');
    } catch (err) {
      if (mine !== gen) return;
      setText(status, '');
      setText(error, errorMessage(err));
      if (err instanceof ApiError && err.field) document.getElementById(`audit-${err.field}`)?.focus();
    }
  };
  const form = h(
    'form',
    { class: 'create card', novalidate: true, 'aria-label': 'Filters', 'data-testid': 'audit-filters' },
    h('div', { class: 'audit-fields' }, agent.el, user.el, action.el, since.el, h('div', { class: 'field field-submit' }, apply)),
    error,
  );
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    oldest = null;
    void load(false);
  });
  older.addEventListener('click', () => void load(true));
  void load(false);
  const el = h(
    'div',
    { class: 'page audit-page' },
    form,
    h('section', { class: 'card team-section', 'aria-labelledby': 'audit-title' }, h('div', { class: 'section-head' }, h('h1', { id: 'audit-title' }, 'Audit log')), status, table, older),
  );
  return {
    el,
    unmount() {
      gen++;
    },
  };
}
