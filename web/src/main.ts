import './style.css';
import { api, errorMessage, setUnauthorizedHandler } from './api';
import { h, replace, setText, toast } from './dom';
import { store } from './store';
import { approvals, approvalsBadge } from './approvals';
import { agentsPage } from './agents';
import { agentPage } from './agent';
import { me } from './me';
import { tokensPage } from './tokens';
import { auditPage } from './audit';
import { usersPage } from './users';
import { secretsPage } from './secrets';
import { linkHandler, setRenderer, type Page } from './nav';
import { isRepeat, nextTarget } from './nextpath';

const root = document.getElementById('app')!;


let current: Page | null = null;
let signedIn = false;
/**
 * Where to go once signed in: a private preview's sign-in hand-off (`?next=`, see nextpath.ts),
 * followed once, with `location.replace` (the hand-off is not a page to come back to).
 */
let next = nextTarget(location.search, location.origin);


function mount(page: Page): void {
  current?.unmount?.();
  current = page;
  replace(root, page.el);
}

function header(): HTMLElement {
  const signOut = h('button', { type: 'button', class: 'btn btn-ghost', 'data-testid': 'sign-out' }, 'Sign out');
  signOut.addEventListener('click', async () => {
    try {
      await api.signOut();
    } catch {
      /* signed out anyway below */
    }
    showSignIn();
  });
  const home = h('a', { href: '/', class: 'brand' }, h('span', { class: 'brand-mark', 'aria-hidden': 'true' }, '▸'), 'agenthold');
  home.addEventListener('click', linkHandler('/'));
  const link = (path: string, label: string) => {
    const current = location.pathname === path || (path === '/' && location.pathname.startsWith('/agents'));
    const a = h('a', { href: path, class: 'nav-link', 'aria-current': current ? 'page' : null }, label);
    a.addEventListener('click', linkHandler(path));
    return a;
  };
  const nav = h('nav', { class: 'topnav', 'aria-label': 'Pages' }, link('/', 'Agents'), link('/tokens', 'Tokens'), link('/audit', 'Audit'), me.can('admin') ? link('/users', 'Users') : null, me.can('admin') ? link('/secrets', 'Secrets') : null);
  const who = me.get();
  const user = who ? h('span', { class: 'whoami muted', 'data-testid': 'whoami', title: `Signed in as ${who.user.name} (${who.user.role})` }, who.user.name) : null;
  return h('header', { class: 'topbar' }, home, nav, h('div', { class: 'topbar-right' }, approvalsBadge().el, user, signOut));
}

function render(): void {
  if (!signedIn) return;
  const path = location.pathname;
  const m = /^\/agents\/([^/]+)\/?$/.exec(path);
  let page: Page;
  if (m) page = agentPage(decodeURIComponent(m[1]));
  else if (path === '/tokens') page = tokensPage();
  else if (path === '/users') page = usersPage();
  else if (path === '/audit') page = auditPage();
  else if (path === '/secrets') page = secretsPage();
  else page = agentsPage();
  const wrap = h('div', { class: 'shell' }, header(), h('main', { class: 'main', id: 'main' }, page.el));
  mount({ el: wrap, unmount: page.unmount });
}

/** The sign-in form's two ways in; the last one used is offered first next time. */
type SignInMode = 'password' | 'token';
const MODE_KEY = 'agenthold.signin';

function savedMode(): SignInMode {
  try {
    return localStorage.getItem(MODE_KEY) === 'token' ? 'token' : 'password';
  } catch {
    return 'password';
  }
}

function showSignIn(message?: string): void {
  signedIn = false;
  approvals.stop();
  store.stop();
  me.clear();
  let mode = savedMode();
  const field = (id: string, label: string, attrs: Record<string, unknown>) => {
    const input = h('input', { id, name: id, required: true, spellcheck: 'false', 'aria-describedby': 'signin-error', ...attrs });
    return { input, wrap: h('div', { class: 'signin-field' }, h('label', { for: id }, label), input) };
  };
  const name = field('signin-name', 'Name', { type: 'text', autocomplete: 'username', autocapitalize: 'none' });
  const password = field('signin-password', 'Password', { type: 'password', autocomplete: 'current-password' });
  const token = field('token', 'Admin token', { type: 'password', autocomplete: 'current-password' });
  const error = h('p', { id: 'signin-error', class: 'field-error', role: 'alert' }, message ?? '');
  const submit = h('button', { type: 'submit', class: 'btn btn-primary btn-block' }, 'Sign in');
  const tab = (m: SignInMode, label: string) =>
    h('button', { type: 'button', role: 'tab', class: 'signin-tab', 'data-mode': m, id: `signin-tab-${m}` }, label);
  const tabs = [tab('password', 'Name and password'), tab('token', 'Admin token')];
  const note = h('p', { class: 'muted', 'data-testid': 'signin-note' });
  const show = (m: SignInMode, focus: boolean) => {
    mode = m;
    for (const t of tabs) t.setAttribute('aria-selected', String(t.dataset.mode === m));
    name.wrap.hidden = password.wrap.hidden = m !== 'password';
    token.wrap.hidden = m !== 'token';
    const what = m === 'token' ? 'the admin token' : 'your name and password';
    setText(note, next ? `Sign in with ${what} to open the preview.` : `Sign in with ${what}.`);
    if (focus) (m === 'token' ? token.input : name.input.value ? password.input : name.input).focus();
  };
  for (const t of tabs) {
    t.addEventListener('click', () => {
      error.textContent = '';
      show(t.dataset.mode as SignInMode, true);
    });
  }
  const form = h(
    'form',
    { class: 'signin card', 'data-testid': 'signin-form', novalidate: true },
    h('h1', { class: 'signin-title' }, h('span', { class: 'brand-mark', 'aria-hidden': 'true' }, '▸'), 'agenthold'),
    h('div', { class: 'signin-tabs', role: 'tablist', 'aria-label': 'How to sign in' }, tabs),
    note,
    name.wrap,
    password.wrap,
    token.wrap,
    error,
    submit,
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const missing =
      mode === 'token'
        ? token.input.value.trim()
          ? null
          : ([token.input, 'Enter the token.'] as const)
        : !name.input.value.trim()
          ? ([name.input, 'Enter your name.'] as const)
          : !password.input.value
            ? ([password.input, 'Enter your password.'] as const)
            : null;
    if (missing) {
      error.textContent = missing[1];
      missing[0].focus();
      return;
    }
    submit.disabled = true;
    submit.textContent = 'Signing in…';
    error.textContent = '';
    try {
      if (mode === 'token') await api.signIn(token.input.value.trim());
      else await api.signInWithPassword(name.input.value.trim(), password.input.value);
      try {
        localStorage.setItem(MODE_KEY, mode);
      } catch {
        /* private mode: the choice is simply not remembered */
      }
      token.input.value = '';
      password.input.value = '';
      await startApp();
    } catch (err) {
      error.textContent = errorMessage(err);
      const input = mode === 'token' ? token.input : password.input;
      input.select();
      input.focus();
    } finally {
      submit.disabled = false;
      submit.textContent = 'Sign in';
    }
  });
  mount({ el: h('main', { class: 'signin-wrap' }, form) });
  show(mode, true);
}

/** Goes on to the hand-off of `?next=`; false when there is none to follow. */
function followNext(): boolean {
  const target = next;
  next = null;
  if (!target) return false;
  let storage: Pick<Storage, 'getItem' | 'setItem'>;
  try {
    storage = sessionStorage;
  } catch {
    storage = { getItem: () => null, setItem: () => {} };
  }
  if (isRepeat(storage, target, Date.now())) {
    // The hand-off sent the browser straight back: it did not carry the session. Stop here.
    history.replaceState(null, '', location.pathname);
    toast('The preview did not open: the sign-in did not reach it. Open it from the agent’s Ports tab.');
    return false;
  }
  mount({ el: h('main', { class: 'signin-wrap' }, h('p', { class: 'muted', role: 'status' }, 'Opening the preview…')) });
  location.replace(target);
  return true;
}

async function startApp(): Promise<void> {
  if (followNext()) return;
  await me.load();
  signedIn = true;
  store.start();
  approvals.start();
  render();
}

setUnauthorizedHandler(() => {
  if (signedIn) showSignIn('Your session has ended. Sign in again.');
});
store.onSignedOut = () => {
  if (signedIn) showSignIn('Your session has ended. Sign in again.');
};

setRenderer(render);
window.addEventListener('popstate', render);

async function boot(): Promise<void> {
  try {
    if (await api.session()) await startApp();
    else showSignIn();
  } catch (e) {
    showSignIn(errorMessage(e));
  }
}

void boot();
