// The Users page (admins): every user, a form to add one, and per user its role, a new password
// and removal. The server keeps the rules (the last admin stays, the built-in `admin` is fixed);
// this page shows its answers.
import { api, ApiError, errorMessage, type Role, type User } from './api';
import { confirmDialog, dataTable, formatTime, h, replace, setText, syncRows, toast, type KeyedRow } from './dom';
import { me } from './me';
import type { Page } from './nav';

/** The user `server.admin_token` acts as: it has no password and is never removed. */
const BUILT_IN = 'admin';

function roleSelect(id: string, value: Role): HTMLSelectElement {
  const select = h('select', { id, name: 'role' }, h('option', { value: 'member' }, 'member'), h('option', { value: 'admin' }, 'admin'));
  select.value = value;
  return select;
}

function userRow(user: User, reload: () => void): KeyedRow<User> {
  let current = user;
  const name = h('td', { class: 'col-name' });
  const role = roleSelect(`role-${user.id}`, user.role);
  const password = h('td', { class: 'col-password' });
  const created = h('td', { class: 'col-time muted' });
  const setPassword = h('button', { type: 'button', class: 'btn btn-small' }, 'Set password');
  const remove = h('button', { type: 'button', class: 'btn btn-small btn-danger-ghost' }, 'Remove');
  const el = h(
    'tr',
    { 'data-testid': 'user-row' },
    name,
    h('td', { class: 'col-role' }, h('label', { for: `role-${user.id}`, class: 'visually-hidden' }, `Role of ${user.name}`), role),
    password,
    created,
    h('td', { class: 'col-actions' }, h('div', { class: 'row-actions' }, setPassword, remove)),
  );
  const update = (u: User) => {
    current = u;
    el.dataset.userName = u.name;
    setText(name, u.name);
    role.value = u.role;
    setText(password, u.hasPassword ? 'set' : '—');
    setText(created, formatTime(u.createdAt));
    const builtIn = u.name === BUILT_IN;
    role.disabled = builtIn;
    setPassword.hidden = remove.hidden = builtIn;
    setPassword.setAttribute('aria-label', `Set the password of ${u.name}`);
    remove.setAttribute('aria-label', `Remove ${u.name}`);
  };
  role.addEventListener('change', async () => {
    const wanted = role.value as Role;
    role.disabled = true;
    try {
      update(await api.updateUser(current.id, { role: wanted }));
    } catch (e) {
      toast(errorMessage(e));
      role.value = current.role;
    } finally {
      role.disabled = current.name === BUILT_IN;
    }
  });
  setPassword.addEventListener('click', async () => {
    const input = h('input', { type: 'password', id: 'new-password', autocomplete: 'new-password', minlength: '8', class: 'dialog-input' });
    const body = [h('label', { for: 'new-password' }, `A new password for ${current.name} (8 to 1024 characters)`), input];
    queueMicrotask(() => input.focus());
    if (!(await confirmDialog({ title: `Set the password of “${current.name}”`, body, confirmLabel: 'Set password' }))) return;
    try {
      update(await api.updateUser(current.id, { password: input.value }));
      toast(`The password of ${current.name} is set.`, 'info');
    } catch (e) {
      toast(errorMessage(e));
    }
  });
  remove.addEventListener('click', async () => {
    const ok = await confirmDialog({
      title: `Remove “${current.name}”?`,
      body: [h('strong', null, current.name), ' can no longer sign in, and their tokens stop working.'],
      confirmLabel: `Remove ${current.name}`,
      danger: true,
    });
    if (!ok) return;
    try {
      await api.deleteUser(current.id);
      reload();
    } catch (e) {
      toast(errorMessage(e));
    }
  });
  update(user);
  return { el, update };
}

function createForm(created: () => void): HTMLElement {
  const name = h('input', { id: 'new-user-name', name: 'name', type: 'text', required: true, autocomplete: 'off', spellcheck: 'false', placeholder: 'e.g. ann' });
  const role = roleSelect('new-user-role', 'member');
  const password = h('input', { id: 'new-user-password', name: 'password', type: 'password', autocomplete: 'new-password', placeholder: 'none yet' });
  const error = h('p', { class: 'form-error', role: 'alert', 'data-testid': 'user-error' });
  const submit = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Add user');
  const form = h(
    'form',
    { class: 'create card', 'aria-labelledby': 'new-user-title', novalidate: true },
    h('h2', { id: 'new-user-title' }, 'Add a user'),
    h(
      'div',
      { class: 'team-fields' },
      h('div', { class: 'field' }, h('label', { for: 'new-user-name' }, 'Name'), name),
      h('div', { class: 'field' }, h('label', { for: 'new-user-role' }, 'Role'), role),
      h('div', { class: 'field' }, h('label', { for: 'new-user-password' }, 'Password', h('span', { class: 'hint' }, 'optional')), password),
      h('div', { class: 'field field-submit' }, submit),
    ),
    error,
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    setText(error, '');
    submit.disabled = true;
    try {
      await api.createUser({ name: name.value.trim(), role: role.value as Role, password: password.value || null });
      form.reset();
      role.value = 'member';
      created();
      name.focus();
    } catch (err) {
      setText(error, errorMessage(err));
      (err instanceof ApiError && err.field === 'password' ? password : name).focus();
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

export function usersPage(): Page {
  const rows = new Map<string, KeyedRow<User>>();
  const body = h('tbody');
  const table = dataTable(
    { class: 'data-table', 'data-testid': 'users-table', 'aria-labelledby': 'users-title' },
    [
      ['col-name', 'Name'],
      ['col-role', 'Role'],
      ['col-password', 'Password'],
      ['col-time', 'Added'],
      ['col-actions', null],
    ],
    body,
  );
  const status = h('p', { class: 'muted', role: 'status' }, 'Loading users…');
  let gen = 0;
  const load = () => {
    const mine = ++gen;
    api
      .users()
      .then((users) => {
        if (mine !== gen) return;
        setText(status, '');
        syncRows(body, rows, users, (u) => u.id, (u) => userRow(u, load));
      })
      .catch((e: unknown) => {
        if (mine === gen) setText(status, `Could not load the users: ${errorMessage(e)}`);
      });
  };
  load();
  const intro = me.can('admin')
    ? 'People who sign in with a name and password. Admins can do everything; members use the agents they may see.'
    : 'Only admins manage users.';
  const el = h(
    'div',
    { class: 'page users-page' },
    createForm(load),
    h('section', { class: 'card team-section', 'aria-labelledby': 'users-title' }, h('div', { class: 'section-head' }, h('h1', { id: 'users-title' }, 'Users')), h('p', { class: 'muted' }, intro), status, table),
  );
  return {
    el,
    unmount() {
      gen++;
      replace(body);
    },
  };
}
