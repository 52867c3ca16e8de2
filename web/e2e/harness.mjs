// Shared helpers for the browser tests: a real `agenthold serve` (fake driver) per test file,
// headless Debian Chromium through playwright-core, each file's setup and teardown
// (`browserSuite`), and small polling helpers with deadlines.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, mkdir, rm, writeFile, readFile } from 'node:fs/promises';
import { connect as tcpConnect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
export const REPO = path.resolve(here, '..', '..');
export const SCREENSHOTS = path.join(REPO, 'test-artifacts', 'screenshots');
const BIN = process.env.AGENTHOLD_BIN || path.join(REPO, 'target', 'debug', 'agenthold');
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export const sha256 = (buf) => createHash('sha256').update(buf).digest('hex');

/** Poll `fn` until it returns a truthy value, or throw after `timeout` ms with `what`. */
export async function until(what, fn, { timeout = 30_000, interval = 100 } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
      last = v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeout} ms waiting for ${what}; last: ${last instanceof Error ? last.message : JSON.stringify(last)}`);
    }
    await sleep(interval);
  }
}

async function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/** Runs `cmd args`, resolving to { code, stdout, stderr } (never rejects). */
export function run(cmd, args) {
  return new Promise((resolve) => {
    execFile(cmd, args, { maxBuffer: 16 << 20 }, (err, stdout, stderr) =>
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout: String(stdout), stderr: String(stderr || err?.message || '') }),
    );
  });
}

/** The static sandboxd that scripts/build-sandboxd.sh makes, which the Docker driver mounts into sandboxes. */
export const SANDBOXD = process.env.AGENTHOLD_SANDBOXD || path.join(process.env.CARGO_TARGET_DIR || path.join(REPO, 'target'), 'sandboxd', 'sandboxd');

/**
 * Why a test of the Docker driver cannot run here (no engine, no static sandboxd, a missing
 * `image`), or null when it can. With `AGENTHOLD_DOCKER_TESTS=require` (scripts/test) the caller
 * fails on it rather than skipping.
 */
export async function dockerMissing(image) {
  const info = await run('docker', ['info', '--format', '{{.ServerVersion}}']);
  if (info.code !== 0) return `no Docker engine answers (${info.stderr.trim().split('\n')[0]})`;
  try {
    await readFile(SANDBOXD);
  } catch {
    return `no static sandboxd at ${SANDBOXD} (scripts/build-sandboxd.sh; AGENTHOLD_SANDBOXD names another)`;
  }
  if ((await run('docker', ['image', 'inspect', image])).code !== 0) return `the image ${image} is missing (scripts/build-agent-image.sh)`;
  return null;
}

/**
 * Removes what a Docker-driver server with `prefix` may have left (after a crash, or a test that
 * failed before destroying its agents): containers, networks, volumes and host firewall rules.
 */
async function dockerCleanup(prefix) {
  const label = `label=agenthold.prefix=${prefix}`;
  const ids = async (args) => (await run('docker', [...args, '--filter', label])).stdout.split('\n').filter(Boolean);
  for (const c of await ids(['ps', '-aq'])) await run('docker', ['rm', '-f', c]);
  for (const n of await ids(['network', 'ls', '-q'])) await run('docker', ['network', 'rm', n]);
  for (const v of await ids(['volume', 'ls', '-q'])) await run('docker', ['volume', 'rm', '-f', v]);
  const tag = `agenthold:${prefix}:`;
  for (const [table, chain] of [['filter', 'INPUT'], ['nat', 'PREROUTING']]) {
    const rules = (await run('iptables', ['-w', '-t', table, '-S', chain])).stdout.split('\n');
    for (const line of rules) {
      if (!line.includes(tag) || !line.startsWith(`-A ${chain} `)) continue;
      const rule = line.slice(`-A ${chain} `.length).split(/\s+/).map((w) => w.replace(/^"|"$/g, ''));
      await run('iptables', ['-w', '-t', table, '-D', chain, ...rule]);
    }
  }
}

/**
 * Start `agenthold serve` on free loopback ports with a temp data dir and the fake driver.
 * `sandboxConfig`: more lines under `sandbox:` (indented by two); `topConfig`: more top-level
 * lines (e.g. `presets:`). `docker: { image }` runs the Docker driver instead (see
 * dockerMissing), on a name prefix and address pool of its own, with `image` as the default.
 * Returns { url, token, previewsPort, api(), stop(), log() }.
 */
export async function startServer({ maxFileMb, sandboxConfig = [], topConfig = [], docker } = {}) {
  const dir = await mkdtemp(path.join(tmpdir(), 'agenthold-e2e-'));
  const port = await freePort();
  const tunnel = await freePort();
  const previewsPort = await freePort();
  const token = randomBytes(24).toString('hex');
  const lines = [
    'server:',
    `  listen: 127.0.0.1:${port}`,
    '  previews:',
    `    listen: 127.0.0.1:${previewsPort}`,
    `  data_dir: ${JSON.stringify(path.join(dir, 'data'))}`,
  ];
  if (maxFileMb) lines.push(`  max_file_mb: ${maxFileMb}`);
  let prefix = null;
  if (docker) {
    // Sandboxes in containers dial the tunnel on their bridge's gateway: it listens everywhere.
    prefix = `ahe2e${randomBytes(3).toString('hex')}`;
    const pool = `10.212.${100 + (randomBytes(1)[0] % 150)}.0/24`;
    lines.push(
      'sandbox:',
      '  driver: docker',
      `  tunnel_listen: 0.0.0.0:${tunnel}`,
      `  default_image: ${docker.image}`,
      '  default_cpus: 1',
      '  default_memory_mb: 512',
      `  sandboxd_path: ${JSON.stringify(SANDBOXD)}`,
      '  docker:',
      `    name_prefix: ${prefix}`,
      `    network_pool: ${pool}`,
    );
  } else {
    lines.push('sandbox:', '  driver: fake', `  tunnel_listen: 127.0.0.1:${tunnel}`);
  }
  lines.push(...sandboxConfig, '  egress:', '    port: 0', '    dns_port: 0', '  idle_check_interval: 5s');
  lines.push(...topConfig, '');
  const config = path.join(dir, 'config.yaml');
  await writeFile(config, lines.join('\n'));
  const logPath = path.join(dir, 'server.log');
  let log = '';
  const child = spawn(BIN, ['serve', '--config', config], {
    cwd: dir,
    env: { ...process.env, AGENTHOLD_ADMIN_TOKEN: token, AGENTHOLD_LOG: process.env.AGENTHOLD_LOG || 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout.on('data', (d) => (log += d));
  child.stderr.on('data', (d) => (log += d));
  let exited = null;
  child.on('exit', (code, signal) => (exited = { code, signal }));
  child.on('error', (e) => (exited = { error: e.message }));
  const url = `http://127.0.0.1:${port}`;
  try {
    await until(
      `GET ${url}/api/v1/health`,
      async () => {
        if (exited) throw new Error(`server exited early (${JSON.stringify(exited)}):\n${log}`);
        const res = await fetch(`${url}/api/v1/health`).catch(() => null);
        return res && res.ok;
      },
      { timeout: 30_000, interval: 100 },
    );
  } catch (e) {
    child.kill('SIGKILL');
    if (prefix) await dockerCleanup(prefix);
    throw new Error(`${e.message}\n--- server log (${BIN}) ---\n${log}`);
  }

  // Development aid: AGENTHOLD_E2E_UI=preview serves web/dist with `vite preview`, proxying /api to
  // the server, for a server binary that does not serve the UI yet.
  let uiUrl = url;
  let preview = null;
  if (process.env.AGENTHOLD_E2E_UI === 'preview') {
    const uiPort = await freePort();
    preview = spawn(process.execPath, [path.join(REPO, 'web', 'node_modules', 'vite', 'bin', 'vite.js'), 'preview', '--port', String(uiPort), '--strictPort', '--host', '127.0.0.1'], {
      cwd: path.join(REPO, 'web'),
      env: { ...process.env, AGENTHOLD_DEV_SERVER: url },
      stdio: 'ignore',
    });
    uiUrl = `http://127.0.0.1:${uiPort}`;
    await until('vite preview', async () => (await fetch(uiUrl).catch(() => null))?.ok, { timeout: 20_000 });
  }

  async function api(method, p, body, headers = {}) {
    const init = { method, headers: { Authorization: `Bearer ${token}`, ...headers } };
    if (body !== undefined) {
      if (typeof body === 'string' || body instanceof Uint8Array || Buffer.isBuffer(body)) init.body = body;
      else {
        init.body = JSON.stringify(body);
        init.headers['Content-Type'] = 'application/json';
      }
    }
    return fetch(`${url}/api/v1${p}`, init);
  }
  async function apiJson(method, p, body) {
    const res = await api(method, p, body);
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${p} → ${res.status}: ${text}`);
    return text ? JSON.parse(text) : null;
  }
  /** Create an agent through the API (`more`: other fields of the request) and wait until it is running. */
  async function runningAgent(name, more = {}) {
    const a = await apiJson('POST', '/agents', { name, ...more });
    await until(`${name} running`, async () => (await apiJson('GET', `/agents/${a.id}`)).state === 'running', { timeout: 60_000, interval: 200 });
    return apiJson('GET', `/agents/${a.id}`);
  }

  return {
    url,
    uiUrl,
    token,
    dir,
    previewsPort,
    api,
    apiJson,
    runningAgent,
    log: () => log,
    async stop() {
      preview?.kill('SIGTERM');
      if (!exited) {
        child.kill('SIGTERM');
        await until('server exit', () => exited, { timeout: 10_000 }).catch(() => child.kill('SIGKILL'));
      }
      await writeFile(logPath, log).catch(() => {});
      if (prefix) await dockerCleanup(prefix);
      if (!process.env.AGENTHOLD_E2E_KEEP) await rm(dir, { recursive: true, force: true }).catch(() => {});
    },
  };
}

/**
 * A loopback TCP proxy in front of `url`, so a test can cut every connection through it (as a
 * network drop would: the browser sees its WebSockets close with 1006) while new connections
 * still get through. Returns { url, sever(), setDown(bool), close() }; `sever()` answers how
 * many it cut.
 */
export async function startProxy(url) {
  const target = new URL(url);
  const conns = new Set();
  let down = false;
  const srv = createServer((client) => {
    if (down) {
      client.resetAndDestroy();
      return;
    }
    const upstream = tcpConnect(Number(target.port), target.hostname);
    const pair = { client, upstream };
    conns.add(pair);
    const drop = () => {
      conns.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', resolve);
  });
  return {
    url: `http://127.0.0.1:${srv.address().port}`,
    sever() {
      const n = conns.size;
      for (const { client, upstream } of [...conns]) {
        client.resetAndDestroy();
        upstream.destroy();
      }
      conns.clear();
      return n;
    },
    /** While down, every connection is cut and new ones are reset at once (a network outage). */
    setDown(value) {
      down = value;
      return value ? this.sever() : 0;
    },
    close: () => new Promise((resolve) => {
      for (const { client, upstream } of conns) {
        client.destroy();
        upstream.destroy();
      }
      srv.close(() => resolve());
    }),
  };
}

/** Headless Chromium with a 1280×720 page on the server (or on `server.uiUrl`, e.g. a proxy). */
export async function openBrowser(server) {
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS, timeout: 60_000 });
  const context = await browser.newContext({
    baseURL: server.uiUrl,
    viewport: { width: 1280, height: 720 },
    acceptDownloads: true,
  });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.uiUrl });
  const page = await context.newPage();
  page.setDefaultTimeout(30_000);
  const consoleErrors = [];
  page.on('pageerror', (e) => consoleErrors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') consoleErrors.push(`console: ${m.text()}`);
  });
  return { browser, context, page, consoleErrors };
}

/** Opens the sign-in form on its admin-token tab. */
export async function tokenTab(page) {
  await page.getByRole('tab', { name: 'Admin token' }).click();
}

export async function signIn(page, token) {
  await page.goto('/');
  await tokenTab(page);
  await page.locator('#token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Agents' }).waitFor();
}

export async function screenshot(page, name) {
  await mkdir(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SCREENSHOTS, name) });
}

/** Opens `agent`'s file browser and waits until it has listed the home. */
export async function openFiles(page, agent) {
  await page.goto(`/agents/${agent.id}#files`);
  await page.locator('[data-testid="files"][data-state="ready"]').waitFor();
}

/** Opens `agent`'s page and waits until its terminal is connected (the first may wait a while). */
export async function openTerminal(page, agent) {
  await page.goto(`/agents/${agent.id}`);
  await page.locator('.term[data-status="connected"]').waitFor({ timeout: 60_000 });
}

/** The lines of the xterm buffer (window.__agentholdTerm). */
export async function termLines(page) {
  return page.evaluate(() => {
    const t = window.__agentholdTerm;
    if (!t) return [];
    const b = t.buffer.active;
    const out = [];
    for (let i = 0; i < b.length; i++) out.push(b.getLine(i)?.translateToString(true) ?? '');
    return out;
  });
}

/**
 * Type a command into the terminal and wait for a line matching `expect`. Retypes once a few
 * seconds pass without it (input sent while the sandbox is still starting may be dropped).
 */
export async function runInTerminal(page, command, expect, { timeout = 30_000 } = {}) {
  const deadline = Date.now() + timeout;
  let lastLines = [];
  while (Date.now() < deadline) {
    await page.locator('.xterm').click();
    await page.keyboard.type(command);
    await page.keyboard.press('Enter');
    const until2 = Math.min(deadline, Date.now() + 8000);
    while (Date.now() < until2) {
      lastLines = await termLines(page);
      const hit = lastLines.find((l) => expect.test(l));
      if (hit) return { line: hit, lines: lastLines };
      await sleep(100);
    }
  }
  throw new Error(`terminal never showed ${expect} after \`${command}\`; buffer:\n${lastLines.filter(Boolean).join('\n')}`);
}

/**
 * A test file's setup and teardown, registered as its `before` and `after`: a server started with
 * `options` (see startServer); with `proxied`, a startProxy in front of it that the browser goes
 * through; Chromium on it (`onBrowser(ctx)` runs once it is open); with `agent`, a running agent
 * of that name; signed in with the admin token unless `signedIn` is false; then `open(page, agent)`.
 * `uiHost` opens the UI under another name of the loopback (`localhost`: the API origin a preview
 * sends a browser to for sign-in, when no `server.public_url` is set; cookies are per host).
 * `after` closes it all and fails the file on an uncaught error in the page. Returns the context
 * that `before` fills: { server, proxy, b, agent }.
 */
export function browserSuite({ options, proxied = false, uiHost, onBrowser, agent, signedIn = true, open } = {}) {
  const ctx = {};
  before(async () => {
    ctx.server = await startServer(options);
    if (proxied) ctx.proxy = await startProxy(ctx.server.uiUrl);
    let uiUrl = ctx.proxy ? ctx.proxy.url : ctx.server.uiUrl;
    if (uiHost) {
      const u = new URL(uiUrl);
      u.hostname = uiHost;
      uiUrl = u.origin;
    }
    ctx.uiUrl = uiUrl;
    ctx.b = await openBrowser({ ...ctx.server, uiUrl });
    await onBrowser?.(ctx);
    if (agent) ctx.agent = await ctx.server.runningAgent(agent);
    if (signedIn) await signIn(ctx.b.page, ctx.server.token);
    await open?.(ctx.b.page, ctx.agent);
  });
  after(async () => {
    const pageErrors = (ctx.b?.consoleErrors ?? []).filter((e) => e.startsWith('pageerror'));
    await ctx.b?.browser.close();
    await ctx.proxy?.close();
    await ctx.server?.stop();
    assert.deepEqual(pageErrors, [], 'no uncaught errors in the page');
  });
  return ctx;
}

export { readFile };
