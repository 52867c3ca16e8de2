// An agent's internet access on its page: the rules shown, changed at once (no rebuild), and the
// server's refusal of a bad rule shown in the form with nothing changed.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { openBrowser, signIn, startServer } from './harness.mjs';

let server;
let b;

before(async () => {
  server = await startServer();
  b = await openBrowser(server);
  await signIn(b.page, server.token);
});

after(async () => {
  const pageErrors = (b?.consoleErrors ?? []).filter((e) => e.startsWith('pageerror'));
  await b?.browser.close();
  await server?.stop();
  assert.deepEqual(pageErrors, [], 'no uncaught errors in the page');
});

test('egress rules: shown, saved at once without a rebuild, a bad rule refused at the form', async () => {
  const { page } = b;
  const a = await server.runningAgent('net');
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
  assert.deepEqual((await server.apiJson('GET', `/agents/${a.id}`)).egress, { allow: [], deny: [] });

  await allow.fill('pypi.org\n  *.pythonhosted.org:443\n\n');
  await deny.fill('evil.example');
  await page.getByRole('button', { name: 'Save rules' }).click();
  await page.getByText('Egress rules saved').waitFor();
  const now = await server.apiJson('GET', `/agents/${a.id}`);
  assert.deepEqual(now.egress, { allow: ['pypi.org', '*.pythonhosted.org:443'], deny: ['evil.example'] });
  assert.equal(now.needsRebuild, false);
  assert.equal(now.state, 'running');
  assert.equal(await page.getByTestId('egress-error').textContent(), '');
});
