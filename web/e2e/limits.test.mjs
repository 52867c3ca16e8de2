// An upload over `server.max_file_mb` shows the server's message, which names the limit.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { openBrowser, signIn, startServer } from './harness.mjs';

let server;
let b;
let agent;

before(async () => {
  server = await startServer({ maxFileMb: 1 });
  b = await openBrowser(server);
  agent = await server.runningAgent('limits');
  await signIn(b.page, server.token);
  await b.page.goto(`/agents/${agent.id}#files`);
  await b.page.locator('[data-testid="files"][data-state="ready"]').waitFor();
});

after(async () => {
  const pageErrors = (b?.consoleErrors ?? []).filter((e) => e.startsWith('pageerror'));
  await b?.browser.close();
  await server?.stop();
  assert.deepEqual(pageErrors, [], 'no uncaught errors in the page');
});

test('an upload over the limit shows the limit; one under it succeeds', async () => {
  const { page } = b;
  const big = Buffer.alloc(2 * 1024 * 1024 + 17, 7);
  const res = await server.api('PUT', `/agents/${agent.id}/fs/write?path=probe.bin`, big);
  assert.equal(res.status, 413);
  const err = (await res.json()).error;
  assert.equal(err.code, 'too_large');
  assert.match(err.message, /1\s*(MiB|MB)/i, `the server's message names the limit: ${err.message}`);

  await page.getByTestId('upload-input').setInputFiles([
    { name: 'too-big.bin', mimeType: 'application/octet-stream', buffer: big },
    { name: 'small.bin', mimeType: 'application/octet-stream', buffer: Buffer.alloc(1000, 1) },
  ]);
  const failed = page.locator('[data-testid="upload"][data-name="too-big.bin"].upload-failed');
  await failed.waitFor({ timeout: 30_000 });
  assert.equal((await failed.locator('.upload-text').textContent()).trim(), err.message);
  await page.locator('[data-testid="upload"][data-name="small.bin"].upload-done').waitFor({ timeout: 30_000 });
  const list = await server.apiJson('GET', `/agents/${agent.id}/fs/list?path=.`);
  assert.ok(list.some((e) => e.name === 'small.bin'));
  assert.ok(!list.some((e) => e.name === 'too-big.bin'), 'nothing left behind by the refused upload');
});
