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
