// The Tokens page: one's API tokens (an admin sees everyone's), a form that makes one — scopes,
// the agents it is limited to, an expiry — and shows it this once, and revocation.
import { api, ApiError, errorMessage, type NewToken, type Scope, type Token } from './api';
import { confirmDialog, dataTable, formatTime, h, replace, setText, syncRows, toast, type KeyedRow } from './dom';
import { me } from './me';
import type { Page } from './nav';
import { store } from './store';

const SCOPES: Array<[Scope, string]> = [
  ['agents:read', 'see agents and their events'],
  ['agents:write', 'create, change, start, stop, rebuild and destroy agents'],
  ['agents:use', 'terminals, exec, processes, files, code, sessions, previews'],
  ['approvals:answer', 'answer approvals'],
  ['admin', 'users, everyone’s tokens, config reload, metrics'],
];

/** An agent's name when this page knows it, else its id. */
const agentName = (id: string) => store.agents.get(id)?.name ?? id;

function tokenRow(token: Token, revoked: () => void): KeyedRow<Token> {
  let current = token;
  const name = h('td', { class: 'col-name' });
  const scopes = h('td', { class: 'col-scopes mono' });
  const agents = h('td', { class: 'col-agents' });
  const expires = h('td', { class: 'col-time' });
  const revoke = h('button', { type: 'button', class: 'btn btn-small btn-danger-ghost' }, 'Revoke');
  const el = h('tr', { 'data-testid': 'token-row' }, name, scopes, agents, expires, h('td', { class: 'col-actions' }, revoke));
  const update = (t: Token) => {
    current = t;
    el.dataset.tokenName = t.name;
    setText(name, t.name);
    setText(scopes, t.scopes.join(' '));
    setText(agents, t.agents ? t.agents.map(agentName).join(', ') : 'every agent');
    el.dataset.supervised = String(!!t.supervised);
    setText(expires, t.expiresAt ? formatTime(t.expiresAt) : 'never');
    revoke.setAttribute('aria-label', `Revoke ${t.name}`);
  };
  revoke.addEventListener('click', async () => {
    const ok = await confirmDialog({
      title: `Revoke “${current.name}”?`,
      body: 'Programs using it are refused from now on, and what it has open (terminals, streams) closes.',
      confirmLabel: `Revoke ${current.name}`,
      danger: true,
    });
    if (!ok) return;
    try {
      await api.revokeToken(current.id);
      revoked();
    } catch (e) {
      toast(errorMessage(e));
    }
  });
  update(token);
  return { el, update };
}

/** The made token, shown this once with a copy button. */
function shownOnce(name: string, value: string): HTMLElement {
  const field = h('input', { type: 'text', readonly: true, value, class: 'mono token-value', 'data-testid': 'new-token', 'aria-label': `The token ${name}` });
  const copy = h('button', { type: 'button', class: 'btn btn-small' }, 'Copy');
  copy.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(value);
      setText(copy, 'Copied');
    } catch {
      field.select();
    }
  });
  return h(
    'div',
    { class: 'token-once', role: 'status' },
    h('p', null, h('strong', null, name), ' — copy it now: it is not shown again.'),
    h('div', { class: 'token-once-line' }, field, copy),
  );
}

function createForm(created: () => void): HTMLElement {
  const name = h('input', { id: 'new-token-name', name: 'name', type: 'text', required: true, autocomplete: 'off', spellcheck: 'false', placeholder: 'e.g. ci-deploy', maxlength: '64' });
  const boxes = SCOPES.filter(([s]) => me.can(s)).map(([scope, what]) => {
    const id = `scope-${scope.replace(':', '-')}`;
    const box = h('input', { type: 'checkbox', id, value: scope, checked: scope === 'agents:read' });
    return { scope, box, el: h('label', { for: id, class: 'scope-choice' }, box, h('span', { class: 'mono' }, scope), h('span', { class: 'muted' }, ` — ${what}`)) };
  });
  const agents = h('input', { id: 'new-token-agents', name: 'agents', type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'every agent' });
  const supervised = h('input', { type: 'checkbox', id: 'new-token-supervised' });
  const mode = h(
    'select',
    { id: 'new-token-approvals', name: 'approvals' },
    h('option', { value: 'ask' }, 'ask a person'),
    h('option', { value: 'deny' }, 'refuse at once'),
    h('option', { value: 'allow' }, 'run them'),
  );
  const days = h('input', { id: 'new-token-days', name: 'expiresInDays', type: 'number', min: '1', max: '3650', step: '1', inputmode: 'numeric', placeholder: 'never' });
  const error = h('p', { class: 'form-error', role: 'alert', 'data-testid': 'token-error' });
  const result = h('div', { class: 'token-result' });
  const submit = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Create token');
  const form = h(
    'form',
    { class: 'create card', 'aria-labelledby': 'new-token-title', novalidate: true },
    h('h2', { id: 'new-token-title' }, 'Create a token'),
    h(
      'div',
      { class: 'team-fields' },
      h('div', { class: 'field' }, h('label', { for: 'new-token-name' }, 'Name'), name),
      h('div', { class: 'field' }, h('label', { for: 'new-token-agents' }, 'Agents', h('span', { class: 'hint' }, 'names or ids, comma-separated')), agents),
      h('div', { class: 'field' }, h('label', { for: 'new-token-days' }, 'Expires after', h('span', { class: 'hint' }, 'days')), days),
      h('div', { class: 'field field-submit' }, submit),
    ),
    h('fieldset', { class: 'scopes' }, h('legend', null, 'Scopes'), boxes.map((b) => b.el)),
    h(
      'div',
      { class: 'token-approvals' },
      h('label', { for: 'new-token-supervised', class: 'scope-choice' }, supervised, h('span', null, 'Supervised'), h('span', { class: 'muted' }, ' — its commands wait for approval on agents that hold them, even yours (unless approvals is allow)')),
      h('div', { class: 'field' }, h('label', { for: 'new-token-approvals' }, 'Commands that would wait for approval'), mode),
    ),
    error,
    result,
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    setText(error, '');
    const list = agents.value
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
    const body: NewToken = {
      name: name.value.trim(),
      scopes: boxes.filter((b) => b.box.checked).map((b) => b.scope),
      agents: list.length ? list : null,
      expiresInDays: days.value ? Number(days.value) : null,
      supervised: supervised.checked,
      approvals: mode.value as NewToken['approvals'],
    };
    submit.disabled = true;
    try {
      const made = await api.createToken(body);
      replace(result, shownOnce(made.name, made.token));
      form.querySelectorAll('input:not([type=checkbox])').forEach((i) => {
        if (!(i as HTMLInputElement).readOnly) (i as HTMLInputElement).value = '';
      });
      created();
    } catch (err) {
      setText(error, errorMessage(err));
      const field = err instanceof ApiError ? err.field : undefined;
      (field === 'agents' ? agents : field === 'expiresInDays' ? days : name).focus();
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

export function tokensPage(): Page {
  const rows = new Map<string, KeyedRow<Token>>();
  const body = h('tbody');
  const table = dataTable(
    { class: 'data-table', 'data-testid': 'tokens-table', 'aria-labelledby': 'tokens-title' },
    [
      ['col-name', 'Name'],
      ['col-scopes', 'Scopes'],
      ['col-agents', 'Agents'],
      ['col-time', 'Expires'],
      ['col-actions', null],
    ],
    body,
  );
  const status = h('p', { class: 'muted', role: 'status' }, 'Loading tokens…');
  let gen = 0;
  const load = () => {
    const mine = ++gen;
    api
      .tokens()
      .then((tokens) => {
        if (mine !== gen) return;
        setText(status, tokens.length ? '' : 'No tokens yet.');
        syncRows(body, rows, tokens, (t) => t.id, (t) => tokenRow(t, load));
      })
      .catch((e: unknown) => {
        if (mine === gen) setText(status, `Could not load the tokens: ${errorMessage(e)}`);
      });
  };
  load();
  const el = h(
    'div',
    { class: 'page tokens-page' },
    createForm(load),
    h(
      'section',
      { class: 'card team-section', 'aria-labelledby': 'tokens-title' },
      h('div', { class: 'section-head' }, h('h1', { id: 'tokens-title' }, 'Tokens')),
      h('p', { class: 'muted' }, me.can('admin') ? 'Everyone’s API tokens: send one as “Authorization: Bearer …”.' : 'Your API tokens: send one as “Authorization: Bearer …”. A token can do at most what you can.'),
      status,
      table,
    ),
  );
  return {
    el,
    unmount() {
      gen++;
      replace(body);
    },
  };
}
