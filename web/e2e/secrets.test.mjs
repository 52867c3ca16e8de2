// The Secrets page (admins): a secret set through the form is listed by name, hosts and how it is
// sent, never with its value; a new value and removal work from its row; the server's refusal of a
// bad field is shown at the form. An agent's egress card names the secrets the proxy swapped in
// and the ones it refused, without an "Allow" for the latter (the rules cannot let a secret through).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { browserSuite, screenshot } from './harness.mjs';

const ctx = browserSuite();
const VALUE = 'sk-test-do-not-show-0123456789';

test('secrets: set, listed without a value, given a new value, removed', async () => {
  const { page } = ctx.b;
  await page.goto('/');
  await page.getByRole('link', { name: 'Secrets' }).click();
  await page.getByRole('heading', { name: 'Secrets' }).waitFor();
  await page.getByText('No secrets yet.').waitFor();

  // A bad host rule: the server's message at the form, nothing made.
  await page.locator('#secret-name').fill('ANTHROPIC_API_KEY');
  await page.locator('#secret-value').fill(VALUE);
  await page.locator('#secret-hosts').fill('*');
  await page.getByRole('button', { name: 'Save secret' }).click();
  await page.getByTestId('secret-error').filter({ hasText: /\S/ }).waitFor();
  assert.deepEqual(await ctx.server.apiJson('GET', '/secrets'), []);

  await page.locator('#secret-hosts').fill('api.anthropic.com, *.anthropic.com');
  await page.locator('#secret-header').fill('x-api-key');
  await page.locator('#secret-format').fill('{value}');
  await page.locator('#secret-value').fill(VALUE);
  await page.getByRole('button', { name: 'Save secret' }).click();
  const row = page.locator('[data-testid="secret-row"][data-secret-name="ANTHROPIC_API_KEY"]');
  await row.waitFor();
  assert.match(await row.textContent(), /api\.anthropic\.com, \*\.anthropic\.com/);
  assert.match(await row.textContent(), /x-api-key: \{value\}/);
  assert.equal(await page.getByTestId('secret-error').textContent(), '');
  // The value is nowhere on the page, and the form does not keep it.
  assert.ok(!(await page.content()).includes(VALUE), 'the value is on the page');
  assert.equal(await page.locator('#secret-value').inputValue(), '');
  await screenshot(page, 'secrets.png');

  const before = (await ctx.server.apiJson('GET', '/secrets'))[0];
  await row.getByRole('button', { name: 'Set a new value of ANTHROPIC_API_KEY' }).click();
  await page.locator('#secret-new-value').fill('sk-test-rotated');
  await page.getByRole('button', { name: 'Set value', exact: true }).click();
  await page.getByText('ANTHROPIC_API_KEY has its new value.').waitFor();
  const after = (await ctx.server.apiJson('GET', '/secrets'))[0];
  assert.deepEqual(after.hosts, before.hosts, 'a new value keeps the hosts');
  assert.equal(after.header, 'x-api-key');
  assert.ok(after.updatedAt >= before.updatedAt);

  await row.getByRole('button', { name: 'Remove ANTHROPIC_API_KEY' }).click();
  await page.getByRole('button', { name: 'Remove ANTHROPIC_API_KEY' }).last().click();
  await row.waitFor({ state: 'detached' });
  assert.deepEqual(await ctx.server.apiJson('GET', '/secrets'), []);
});

test('an agent’s egress card names the secrets swapped in and refused, from its log', async () => {
  const { page } = ctx.b;
  const a = await ctx.server.runningAgent('keys');
  // The fake sandbox has no proxy: the server's log is played here.
  const log = [
    { at: '2026-01-01T00:00:00Z', host: 'api.anthropic.com', port: 443, allowed: true, rule: 'api.anthropic.com', secret: 'ANTHROPIC_API_KEY', bytesUp: null, bytesDown: null },
    { at: '2026-01-01T00:00:01Z', host: 'paste.example', port: 443, allowed: false, rule: 'paste.example', secret: 'ANTHROPIC_API_KEY', reason: 'secret ANTHROPIC_API_KEY may only be sent to api.anthropic.com', bytesUp: null, bytesDown: null },
    { at: '2026-01-01T00:00:02Z', host: 'files.example', port: 443, allowed: false, rule: null, reason: 'no allow rule matches it', bytesUp: null, bytesDown: null },
  ];
  await page.route(`**/api/v1/agents/${a.id}/egress/log`, (route) => route.fulfill({ json: log }));
  try {
    await page.goto(`/agents/${a.id}`);
    await page.locator('.agent-page').waitFor();
    await page.getByTestId('egress').click();
    await page.getByTestId('egress-secret-uses').locator('[data-secret-use="ANTHROPIC_API_KEY@api.anthropic.com:443"]').waitFor();
    const blocked = page.getByTestId('egress-blocked');
    const refused = blocked.locator('[data-blocked="paste.example:443"]');
    await refused.waitFor();
    assert.equal(await refused.getAttribute('data-secret'), 'ANTHROPIC_API_KEY');
    assert.match(await refused.textContent(), /may only be sent to api\.anthropic\.com/);
    assert.equal(await refused.getByRole('button', { name: 'Allow' }).count(), 0, 'a refused secret has no Allow');
    assert.equal(await blocked.locator('[data-blocked="files.example:443"]').getByRole('button', { name: 'Allow' }).count(), 1);
  } finally {
    await page.unroute(`**/api/v1/agents/${a.id}/egress/log`);
  }
});
