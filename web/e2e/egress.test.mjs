// An agent's internet access on its page: the rules shown, changed at once (no rebuild), and the
// server's refusal of a bad rule shown in the form with nothing changed.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { browserSuite } from './harness.mjs';

const ctx = browserSuite();

test('egress rules: shown, saved at once without a rebuild, a bad rule refused at the form', async () => {
  const { page } = ctx.b;
  const a = await ctx.server.runningAgent('net');
  const row = page.locator('[data-testid="agent-row"][data-agent-name="net"]');
  await row.getByRole('link', { name: 'Open net' }).click();
  await page.locator('.agent-page').waitFor();
  await page.getByTestId('egress').click();
  const allow = page.getByTestId('egress-allow');
  const deny = page.getByTestId('egress-deny');
  assert.equal(await allow.inputValue(), '', 'the default allows nothing');
  await page.getByTestId('egress-blocked').getByText('Nothing was blocked').waitFor();

  await allow.fill('foo.*.org');
  await page.getByRole('button', { name: 'Save rules' }).click();
  await page.getByTestId('egress-error').filter({ hasText: 'a wildcard may only start a rule' }).waitFor();
  assert.deepEqual((await ctx.server.apiJson('GET', `/agents/${a.id}`)).egress, { allow: [], deny: [] });

  await allow.fill('pypi.org\n  *.pythonhosted.org:443\n\n');
  await deny.fill('evil.example');
  await page.getByRole('button', { name: 'Save rules' }).click();
  await page.getByText('Egress rules saved').waitFor();
  const now = await ctx.server.apiJson('GET', `/agents/${a.id}`);
  assert.deepEqual(now.egress, { allow: ['pypi.org', '*.pythonhosted.org:443'], deny: ['evil.example'] });
  assert.equal(now.needsRebuild, false);
  assert.equal(now.state, 'running');
  assert.equal(await page.getByTestId('egress-error').textContent(), '');
});

test('blocked lately: loaded from the egress log, so it survives a reload', async () => {
  const { page } = ctx.b;
  const a = await ctx.server.runningAgent('netlog');
  // The fake sandbox has no proxy: the server's log is played here.
  const log = [
    { at: '2026-01-01T00:00:00Z', host: 'pypi.org', port: 443, allowed: true, rule: 'pypi.org', bytesUp: 10, bytesDown: 20 },
    { at: '2026-01-01T00:00:01Z', host: 'files.example', port: 443, allowed: false, rule: null, reason: 'no allow rule matches it', bytesUp: null, bytesDown: null },
    { at: '2026-01-01T00:00:02Z', host: 'evil.example', port: 80, allowed: false, rule: 'evil.example', reason: 'denied by rule evil.example', bytesUp: null, bytesDown: null },
  ];
  await page.route(`**/api/v1/agents/${a.id}/egress/log`, (route) => route.fulfill({ json: log }));
  try {
    for (const pass of ['first', 'after a reload']) {
      if (pass === 'first') await page.goto(`/agents/${a.id}`);
      else await page.reload();
      await page.locator('.agent-page').waitFor();
      await page.getByTestId('egress').click();
      const blocked = page.getByTestId('egress-blocked');
      await blocked.locator('[data-blocked="evil.example:80"]').waitFor();
      const shown = await blocked.locator('[data-blocked]').evaluateAll((els) => els.map((e) => e.getAttribute('data-blocked')));
      assert.deepEqual(shown, ['evil.example:80', 'files.example:443'], pass);
    }
  } finally {
    await page.unroute(`**/api/v1/agents/${a.id}/egress/log`);
  }
});
