// The Secrets page (admins): every secret by name with the hosts it may be sent to and how it is
// sent, a form that sets one, and per secret a new value and removal. A value goes in and is
// never shown again: the server answers with the secret's description only.
import { api, ApiError, errorMessage, type Secret } from './api';
import { confirmDialog, dataTable, formatTime, h, replace, setText, syncRows, toast, type KeyedRow } from './dom';
import { me } from './me';
import type { Page } from './nav';

/** The hosts a person typed, one rule per comma, space or line. */
const rules = (text: string): string[] => text.split(/[\s,]+/).filter((r) => r !== '');

function secretRow(secret: Secret, reload: () => void): KeyedRow<Secret> {
  let current = secret;
  const name = h('td', { class: 'col-name mono' });
  const hosts = h('td', { class: 'col-hosts mono' });
  const header = h('td', { class: 'col-header mono' });
  const updated = h('td', { class: 'col-time muted' });
  const setValue = h('button', { type: 'button', class: 'btn btn-small' }, 'Set value');
  const remove = h('button', { type: 'button', class: 'btn btn-small btn-danger-ghost' }, 'Remove');
  const el = h('tr', { 'data-testid': 'secret-row' }, name, hosts, header, updated, h('td', { class: 'col-actions' }, h('div', { class: 'row-actions' }, setValue, remove)));
  const update = (s: Secret) => {
    current = s;
    el.dataset.secretName = s.name;
    setText(name, s.name);
    setText(hosts, s.hosts.join(', '));
    setText(header, `${s.header}: ${s.format}${s.inBody ? ' (and in bodies)' : ''}`);
    setText(updated, formatTime(s.updatedAt));
    setValue.setAttribute('aria-label', `Set a new value of ${s.name}`);
    remove.setAttribute('aria-label', `Remove ${s.name}`);
  };
  setValue.addEventListener('click', async () => {
    const input = h('input', { type: 'password', id: 'secret-new-value', autocomplete: 'off', class: 'dialog-input' });
    const body = [h('label', { for: 'secret-new-value' }, `The new value of ${current.name}; agents’ next requests use it`), input];
    queueMicrotask(() => input.focus());
    if (!(await confirmDialog({ title: `A new value for “${current.name}”`, body, confirmLabel: 'Set value' }))) return;
    const { hosts, header, format, inBody } = current;
    try {
      update(await api.putSecret(current.name, { value: input.value, hosts, header, format, inBody }));
      toast(`${current.name} has its new value.`, 'info');
    } catch (e) {
      toast(errorMessage(e));
    } finally {
      input.value = '';
    }
  });
  remove.addEventListener('click', async () => {
    const ok = await confirmDialog({
      title: `Remove “${current.name}”?`,
      body: ['Agents granted ', h('strong', null, current.name), ' keep its placeholder, but the proxy no longer swaps in a value.'],
      confirmLabel: `Remove ${current.name}`,
      danger: true,
    });
    if (!ok) return;
    try {
      await api.deleteSecret(current.name);
      reload();
    } catch (e) {
      toast(errorMessage(e));
    }
  });
  update(secret);
  return { el, update };
}

function setForm(saved: () => void): HTMLElement {
  const field = (id: string, label: string, input: HTMLElement, hint?: string) =>
    h('div', { class: 'field' }, h('label', { for: id }, label, hint ? h('span', { class: 'hint' }, hint) : null), input);
  const name = h('input', { id: 'secret-name', name: 'name', type: 'text', required: true, autocomplete: 'off', spellcheck: 'false', placeholder: 'e.g. ANTHROPIC_API_KEY' });
  const value = h('input', { id: 'secret-value', name: 'value', type: 'password', required: true, autocomplete: 'off' });
  const hosts = h('input', { id: 'secret-hosts', name: 'hosts', type: 'text', required: true, autocomplete: 'off', spellcheck: 'false', placeholder: 'e.g. api.anthropic.com' });
  const header = h('input', { id: 'secret-header', name: 'header', type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'Authorization' });
  const format = h('input', { id: 'secret-format', name: 'format', type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'Bearer {value}' });
  const inBody = h('input', { id: 'secret-inBody', name: 'inBody', type: 'checkbox' });
  const error = h('p', { class: 'form-error', role: 'alert', 'data-testid': 'secret-error' });
  const submit = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Save secret');
  const form = h(
    'form',
    { class: 'create card', 'aria-labelledby': 'secret-form-title', novalidate: true, 'data-testid': 'secret-form' },
    h('h2', { id: 'secret-form-title' }, 'Set a secret'),
    h(
      'div',
      { class: 'secret-fields' },
      field('secret-name', 'Name', name, 'the env variable agents see'),
      field('secret-value', 'Value', value, 'never shown again'),
      field('secret-hosts', 'Hosts', hosts, 'egress rules, comma-separated'),
      field('secret-header', 'Header', header, 'optional'),
      field('secret-format', 'Format', format, 'optional'),
      h('div', { class: 'field field-check' }, h('label', { for: 'secret-inBody' }, inBody, ' Also in form and JSON bodies')),
      h('div', { class: 'field field-submit' }, submit),
    ),
    error,
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    setText(error, '');
    submit.disabled = true;
    try {
      await api.putSecret(name.value.trim(), {
        value: value.value,
        hosts: rules(hosts.value),
        header: header.value.trim() || null,
        format: format.value.trim() || null,
        inBody: inBody.checked,
      });
      form.reset();
      saved();
      name.focus();
    } catch (err) {
      setText(error, errorMessage(err));
      const fields: Record<string, HTMLElement> = { name, value, hosts, header, format, inBody };
      (err instanceof ApiError && err.field && fields[err.field] ? fields[err.field] : name).focus();
    } finally {
      submit.disabled = false;
      value.value = '';
    }
  });
  return form;
}

export function secretsPage(): Page {
  const rows = new Map<string, KeyedRow<Secret>>();
  const body = h('tbody');
  const table = dataTable(
    { class: 'data-table', 'data-testid': 'secrets-table', 'aria-labelledby': 'secrets-title' },
    [
      ['col-name', 'Name'],
      ['col-hosts', 'May go to'],
      ['col-header', 'Sent as'],
      ['col-time', 'Updated'],
      ['col-actions', null],
    ],
    body,
  );
  const status = h('p', { class: 'muted', role: 'status' }, 'Loading secrets…');
  let gen = 0;
  const load = () => {
    const mine = ++gen;
    api
      .secrets()
      .then((secrets) => {
        if (mine !== gen) return;
        setText(status, secrets.length ? '' : 'No secrets yet.');
        syncRows(body, rows, secrets, (s) => s.name, (s) => secretRow(s, load));
      })
      .catch((e: unknown) => {
        if (mine === gen) setText(status, `Could not load the secrets: ${errorMessage(e)}`);
      });
  };
  load();
  const admin = me.can('admin');
  const intro = admin
    ? 'Values stay in the server, sealed. An agent granted a secret sees a placeholder in its env; the egress proxy swaps in the value only in requests to the secret’s hosts, and refuses the placeholder wherever else it sees it.'
    : 'Only admins manage secrets.';
  const el = h(
    'div',
    { class: 'page secrets-page' },
    admin ? setForm(load) : null,
    h('section', { class: 'card team-section', 'aria-labelledby': 'secrets-title' }, h('div', { class: 'section-head' }, h('h1', { id: 'secrets-title' }, 'Secrets')), h('p', { class: 'muted' }, intro), status, table),
  );
  return {
    el,
    unmount() {
      gen++;
      replace(body);
    },
  };
}
