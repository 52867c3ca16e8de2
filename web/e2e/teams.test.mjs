// Teams in the browser: a user signs in with name and password, makes an API token on the Tokens
// page (shown once, then working, then revoked), and an admin manages users on the Users page.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { browserSuite, screenshot, signIn, until } from './harness.mjs';

const ctx = browserSuite({ signedIn: false });
const PASSWORD = 'correct horse battery';

/** `GET /api/v1/me` with `token` as the bearer: its status. */
async function meWith(token) {
  const res = await fetch(`${ctx.server.url}/api/v1/me`, { headers: { Authorization: `Bearer ${token}` } });
  return res.status;
}

test('a user signs in with name and password; a wrong password shows the server’s message', async () => {
  const { page } = ctx.b;
  await ctx.server.apiJson('POST', '/users', { name: 'ann', role: 'member', password: PASSWORD });
  await page.goto('/');
  await page.getByRole('tab', { name: 'Name and password' }).click();
  await page.locator('#signin-name').fill('ann');
  await page.locator('#signin-password').fill('not the password');
  await page.getByRole('button', { name: 'Sign in' }).click();
  const error = page.locator('#signin-error');
  await error.filter({ hasText: /./ }).waitFor();
  assert.match((await error.textContent()).trim(), /name and password do not match/);
  assert.equal(await page.getByRole('heading', { name: 'Agents' }).count(), 0);

  await page.locator('#signin-password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Agents' }).waitFor();
  assert.equal((await page.getByTestId('whoami').textContent()).trim(), 'ann');
  // A member is not offered the Users page.
  assert.equal(await page.getByRole('link', { name: 'Users' }).count(), 0);
  assert.equal(await page.getByRole('link', { name: 'Secrets' }).count(), 0);
  await screenshot(page, 'signed-in-member.png');
});

test('the Tokens page makes a token shown once that works, and revokes it', async () => {
  const { page } = ctx.b;
  await page.getByRole('link', { name: 'Tokens' }).click();
  await page.getByRole('heading', { name: 'Tokens' }).waitFor();
  // A member cannot hand out admin.
  assert.equal(await page.locator('#scope-admin').count(), 0);
  await page.locator('#new-token-name').fill('laptop');
  await page.locator('#scope-agents-use').check();
  await page.locator('#new-token-days').fill('7');
  await page.getByRole('button', { name: 'Create token' }).click();
  const shown = page.getByTestId('new-token');
  await shown.waitFor();
  const value = await shown.inputValue();
  assert.ok(value.length > 20, `a token: ${value}`);
  const row = page.locator('[data-testid="token-row"][data-token-name="laptop"]');
  await row.waitFor();
  assert.match(await row.textContent(), /agents:read agents:use/);
  assert.equal(await meWith(value), 200, 'the shown token works');
  await screenshot(page, 'tokens-page.png');

  // A bad expiry is the server's message, next to the form.
  await page.locator('#new-token-name').fill('bad');
  await page.locator('#new-token-days').fill('0');
  await page.getByRole('button', { name: 'Create token' }).click();
  await page.getByTestId('token-error').filter({ hasText: /./ }).waitFor();

  // A supervised token that refuses what would wait for approval (a subagent's).
  await page.locator('#new-token-name').fill('subagent');
  await page.locator('#new-token-days').fill('');
  await page.locator('#new-token-supervised').check();
  await page.locator('#new-token-approvals').selectOption('deny');
  await page.getByRole('button', { name: 'Create token' }).click();
  const sub = page.locator('[data-testid="token-row"][data-token-name="subagent"]');
  await sub.waitFor();
  assert.equal(await sub.getAttribute('data-supervised'), 'true');
  const made = (await ctx.server.apiJson('GET', '/tokens')).find((t) => t.name === 'subagent');
  assert.equal(made.approvals, 'deny');

  await row.getByRole('button', { name: 'Revoke laptop' }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Revoke laptop' }).click();
  await row.waitFor({ state: 'detached' });
  assert.equal(await meWith(value), 401, 'a revoked token is refused');
  await page.getByTestId('sign-out').click();
  await page.getByTestId('signin-form').waitFor();
});

test('an admin adds a user, changes their role, sets a password and removes them', async () => {
  const { page } = ctx.b;
  await signIn(page, ctx.server.token);
  await page.getByRole('link', { name: 'Users' }).click();
  await page.getByRole('heading', { name: 'Users' }).waitFor();
  const builtIn = page.locator('[data-testid="user-row"][data-user-name="admin"]');
  await builtIn.waitFor();
  assert.equal(await builtIn.getByRole('button', { name: 'Remove admin' }).isHidden(), true, 'the built-in admin stays');

  // A name the server refuses: its message.
  await page.locator('#new-user-name').fill('Not A Name');
  await page.getByRole('button', { name: 'Add user' }).click();
  await page.getByTestId('user-error').filter({ hasText: /./ }).waitFor();

  await page.locator('#new-user-name').fill('bob');
  await page.getByRole('button', { name: 'Add user' }).click();
  const bob = page.locator('[data-testid="user-row"][data-user-name="bob"]');
  await bob.waitFor();
  assert.equal((await bob.locator('td.col-password').textContent()).trim(), '—', 'no password yet');
  await bob.getByLabel('Role of bob').selectOption('admin');
  const users = async () => ctx.server.apiJson('GET', '/users');
  await until('bob is an admin', async () => (await users()).find((u) => u.name === 'bob')?.role === 'admin', { timeout: 10_000, interval: 100 });

  await bob.getByRole('button', { name: 'Set the password of bob' }).click();
  await page.locator('#new-password').fill('another good password');
  await page.getByRole('dialog').getByRole('button', { name: 'Set password' }).click();
  await bob.locator('td.col-password').filter({ hasText: /^set$/ }).waitFor();
  const res = await fetch(`${ctx.server.url}/api/v1/session`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ name: 'bob', password: 'another good password' }),
  });
  assert.equal(res.status, 204, 'bob signs in with the password set on the page');
  await screenshot(page, 'users-page.png');

  await bob.getByRole('button', { name: 'Remove bob' }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Remove bob' }).click();
  await bob.waitFor({ state: 'detached' });
  assert.equal((await users()).some((u) => u.name === 'bob'), false);
});
