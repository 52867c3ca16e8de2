// Teams on an agent's page and beyond: the Access panel (policy, access token, members, which
// commands wait), a held command answered from the approvals inbox, and the Audit page.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { browserSuite, screenshot, until } from './harness.mjs';

const ctx = browserSuite({ agent: 'club', open: async (page, agent) => page.goto(`/agents/${agent.id}`) });

async function userToken(name) {
  await ctx.server.apiJson('POST', '/users', { name, role: 'member', password: 'a good password' });
  const signIn = await fetch(`${ctx.server.url}/api/v1/session`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ name, password: 'a good password' }),
  });
  assert.equal(signIn.status, 204);
  const cookie = signIn.headers.get('set-cookie').split(';')[0];
  const res = await fetch(`${ctx.server.url}/api/v1/tokens`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', cookie, origin: ctx.server.url },
    body: JSON.stringify({ name: 'e2e', scopes: ['agents:read', 'agents:use'] }),
  });
  assert.equal(res.status, 201, await res.clone().text());
  return (await res.json()).token;
}

test('the Access panel sets the policy, hands out an access token and adds members', async () => {
  const { page } = ctx.b;
  const { agent } = ctx;
  await page.getByTestId('access').click();
  const form = page.getByTestId('access-form');
  await form.waitFor();
  assert.equal((await page.getByTestId('access-owner').textContent()).trim(), 'admin');
  await page.locator('#access-policy').selectOption('protected');
  await form.getByRole('button', { name: 'Save' }).click();
  await until('protected', async () => (await ctx.server.apiJson('GET', `/agents/${agent.id}`)).access === 'protected');
  await page.getByTestId('access-new-token').click();
  const shown = page.getByTestId('access-token-out').locator('input');
  await shown.waitFor();
  const accessToken = await shown.inputValue();
  assert.match(accessToken, /^ahj_/);

  // Someone with the id and the token joins; the panel lists them after a reload of it.
  const carol = await userToken('carol');
  const join = await fetch(`${ctx.server.url}/api/v1/agents/${agent.id}/join`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${carol}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ accessToken }),
  });
  assert.equal(join.status, 200, await join.text());

  await ctx.server.apiJson('POST', '/users', { name: 'dave', role: 'member' });
  await page.locator('#member-user').fill('dave');
  await page.locator('#member-role').selectOption('operator');
  await form.getByRole('button', { name: 'Add member' }).click();
  const members = page.getByTestId('access-members');
  await members.locator('[data-member="dave"]').waitFor();
  await members.locator('[data-member="carol"]').waitFor();
  assert.match(await members.locator('[data-member="dave"]').textContent(), /operator/);
  await screenshot(page, 'access-panel.png');
  await members.getByRole('button', { name: 'Remove dave' }).click();
  await members.locator('[data-member="dave"]').waitFor({ state: 'detached' });
});

test('a held command waits in the approvals inbox and runs once allowed; the Audit page shows it', async () => {
  const { page } = ctx.b;
  const { agent } = ctx;
  await page.locator('#access-commands').selectOption('always');
  await page.getByTestId('access-form').getByRole('button', { name: 'Save' }).click();
  await until('always', async () => (await ctx.server.apiJson('GET', `/agents/${agent.id}`)).approvals.commands === 'always');
  const sup = await ctx.server.apiJson('POST', '/tokens', { name: 'sup', scopes: ['agents:read', 'agents:use'], supervised: true });
  const exec = fetch(`${ctx.server.url}/api/v1/agents/${agent.id}/exec`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${sup.token}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ command: ['echo', 'held-then-run'] }),
  });
  const badge = page.getByTestId('approvals-badge');
  await badge.waitFor();
  await badge.click();
  const item = page.getByTestId('approvals-panel').locator('.approval-item').filter({ hasText: 'held-then-run' });
  await item.waitFor();
  assert.match(await item.textContent(), /runs: echo held-then-run/);
  await screenshot(page, 'approvals-command.png');
  await item.getByRole('button', { name: /allow/i }).click();
  const res = await exec;
  assert.equal(res.status, 200);
  assert.match((await res.json()).stdout, /held-then-run/);

  await page.getByRole('link', { name: 'Audit' }).click();
  await page.getByRole('heading', { name: 'Audit log' }).waitFor();
  await page.locator('#audit-action').fill('exec');
  await page.getByRole('button', { name: 'Filter' }).click();
  const row = page.locator('[data-testid="audit-row"][data-action="exec"]').first();
  await row.waitFor();
  assert.match(await row.textContent(), /admin \(token sup\)/);
  assert.match(await row.textContent(), /held-then-run/);
  // A bad filter is the server's message.
  await page.locator('#audit-action').fill('explode');
  await page.getByRole('button', { name: 'Filter' }).click();
  await page.getByTestId('audit-error').filter({ hasText: /./ }).waitFor();
  await screenshot(page, 'audit-page.png');
});
