import './style.css';
import { api, errorMessage, setUnauthorizedHandler } from './api';
import { h, replace, toast } from './dom';
import { store } from './store';
import { approvals, approvalsBadge } from './approvals';
import { agentsPage } from './agents';
import { agentPage } from './agent';
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
  return h('header', { class: 'topbar' }, home, h('div', { class: 'topbar-right' }, approvalsBadge().el, signOut));
}

function render(): void {
  if (!signedIn) return;
  const path = location.pathname;
  const m = /^\/agents\/([^/]+)\/?$/.exec(path);
  let page: Page;
  if (m) page = agentPage(decodeURIComponent(m[1]));
  else page = agentsPage();
  const wrap = h('div', { class: 'shell' }, header(), h('main', { class: 'main', id: 'main' }, page.el));
  mount({ el: wrap, unmount: page.unmount });
}

function showSignIn(message?: string): void {
  signedIn = false;
  approvals.stop();
  store.stop();
  const input = h('input', {
    id: 'token',
    name: 'token',
    type: 'password',
    autocomplete: 'current-password',
    required: true,
    spellcheck: 'false',
    'aria-describedby': 'signin-error',
  });
  const error = h('p', { id: 'signin-error', class: 'field-error', role: 'alert' }, message ?? '');
  const submit = h('button', { type: 'submit', class: 'btn btn-primary btn-block' }, 'Sign in');
  const form = h(
    'form',
    { class: 'signin card', 'data-testid': 'signin-form', novalidate: true },
    h('h1', { class: 'signin-title' }, h('span', { class: 'brand-mark', 'aria-hidden': 'true' }, '▸'), 'agenthold'),
    h('p', { class: 'muted', 'data-testid': 'signin-note' }, next ? 'Sign in with the admin token to open the preview.' : 'Sign in with the admin token.'),
    h('label', { for: 'token' }, 'Token'),
    input,
    error,
    submit,
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const token = input.value.trim();
    if (!token) {
      error.textContent = 'Enter the token.';
      input.focus();
      return;
    }
    submit.disabled = true;
    submit.textContent = 'Signing in…';
    error.textContent = '';
    try {
      await api.signIn(token);
      input.value = '';
      startApp();
    } catch (err) {
      error.textContent = errorMessage(err);
      input.select();
      input.focus();
    } finally {
      submit.disabled = false;
      submit.textContent = 'Sign in';
    }
  });
  mount({ el: h('main', { class: 'signin-wrap' }, form) });
  input.focus();
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

function startApp(): void {
  if (followNext()) return;
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
    if (await api.session()) startApp();
    else showSignIn();
  } catch (e) {
    showSignIn(errorMessage(e));
  }
}

void boot();
