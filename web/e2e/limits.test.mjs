// An upload over `server.max_file_mb` shows the server's message, which names the limit.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import http from 'node:http';
import { browserSuite, openFiles } from './harness.mjs';

const ctx = browserSuite({ options: { maxFileMb: 1 }, agent: 'limits', open: openFiles });

/**
 * PUTs `body` with `Expect: 100-continue`, sending it only if the server asks for it. A server
 * that refuses at the headers answers at once and closes; had the body been sent regardless,
 * the close could reset the connection under it before the answer was read.
 */
function putExpectingContinue(p, body) {
  const url = new URL(`${ctx.server.url}/api/v1${p}`);
  return new Promise((resolve, reject) => {
    const req = http.request(url, {
      method: 'PUT',
      headers: {
        Authorization: `Bearer ${ctx.server.token}`,
        'Content-Type': 'application/octet-stream',
        'Content-Length': body.length,
        Expect: '100-continue',
      },
    });
    req.on('continue', () => req.end(body));
    req.on('response', (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString() }));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

test('an upload over the limit shows the limit; one under it succeeds', async () => {
  const { page } = ctx.b;
  const big = Buffer.alloc(2 * 1024 * 1024 + 17, 7);
  const res = await putExpectingContinue(`/agents/${ctx.agent.id}/fs/write?path=probe.bin`, big);
  assert.equal(res.status, 413);
  const err = JSON.parse(res.body).error;
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
  const list = await ctx.server.apiJson('GET', `/agents/${ctx.agent.id}/fs/list?path=.`);
  assert.ok(list.some((e) => e.name === 'small.bin'));
  assert.ok(!list.some((e) => e.name === 'too-big.bin'), 'nothing left behind by the refused upload');
});
