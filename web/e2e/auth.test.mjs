// Sign in with the admin token; a wrong token shows the server's message; sign out.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { browserSuite, signIn, tokenTab } from './harness.mjs';

const ctx = browserSuite({ signedIn: false });

test('the UI is served with the right headers, and /api never falls back to it', async () => {
  const res = await fetch(`${ctx.server.url}/agents/whatever`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/html/);
  assert.equal(res.headers.get('cache-control'), 'no-cache');
  const html = await res.text();
  const asset = /src="(\/assets\/[^"]+\.js)"/.exec(html);
  assert.ok(asset, `index.html names a hashed script: ${html.slice(0, 300)}`);
  const js = await fetch(`${ctx.server.url}${asset[1]}`);
  assert.equal(js.status, 200);
  assert.match(js.headers.get('content-type'), /javascript/);
  assert.match(js.headers.get('cache-control'), /max-age=31536000/);
  const api = await fetch(`${ctx.server.url}/api/v1/no-such-route`, { headers: { Authorization: `Bearer ${ctx.server.token}` } });
  assert.equal(api.status, 404);
  assert.match(api.headers.get('content-type') ?? '', /json/);
});

test('a wrong token shows the server’s error message', async () => {
  const { page } = ctx.b;
  await page.goto('/');
  const res = await fetch(`${ctx.server.url}/api/v1/session`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ token: 'wrong-token' }),
  });
  assert.equal(res.status, 401);
  const expected = (await res.json()).error.message;
  await tokenTab(page);
  await page.locator('#token').fill('wrong-token');
  await page.getByRole('button', { name: 'Sign in' }).click();
  const error = page.locator('#signin-error');
  await error.filter({ hasText: expected }).waitFor();
  assert.equal((await error.textContent()).trim(), expected);
  // Still on the sign-in form.
  assert.equal(await page.getByRole('heading', { name: 'Agents' }).count(), 0);
});

test('sign in, stay signed in across a reload, sign out', async () => {
  const { page, context } = ctx.b;
  await signIn(page, ctx.server.token);
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === 'agenthold_session');
  assert.ok(session, `session cookie set: ${JSON.stringify(cookies)}`);
  assert.equal(session.httpOnly, true);
  assert.equal(session.sameSite, 'Strict');
  await page.reload();
  await page.getByRole('heading', { name: 'Agents' }).waitFor();
  await page.getByTestId('live').filter({ hasText: 'Live' }).waitFor();
  await page.getByTestId('sign-out').click();
  await page.locator('#token').waitFor();
  await page.reload();
  await page.locator('#token').waitFor();
  assert.equal(await page.getByRole('heading', { name: 'Agents' }).count(), 0);
});
