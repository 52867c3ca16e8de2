// The terminal's connection state machine (src/termconn.ts) and its wire messages
// (src/termwire.ts), driven through fake ports: no browser, no server, no real time.
// Run by `npm run test:unit`, which bundles the two modules into test/.build first.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TermConnection } from './.build/termconn.mjs';
import { parseControl, encodeResize, closeReason } from './.build/termwire.mjs';

class FakeSocket {
  constructor(args, events) {
    Object.assign(this, args);
    this.events = events;
    this.isOpen = false;
    this.sent = [];
    this.closedWith = null;
  }
  send(data) {
    assert.ok(this.isOpen, 'send on a socket that is not open');
    this.sent.push(data);
  }
  close(code) {
    this.closedWith = code;
    this.isOpen = false;
  }
  // What the server does:
  upgrade() {
    this.isOpen = true;
    this.events.open();
  }
  control(msg) {
    this.events.text(JSON.stringify(msg));
  }
  bytes(text) {
    this.events.binary(new TextEncoder().encode(text));
  }
  attach(id, offset = 0, cols = 80, rows = 24) {
    this.upgrade();
    this.control({ type: 'session', id, offset, cols, rows });
  }
  drop(code, reason = '') {
    this.isOpen = false;
    this.events.close(code, reason);
  }
}

/** A machine with fake ports; `world` records what it did. */
function setup({ stored = null, sessions = [], online = true } = {}) {
  const world = {
    sockets: [],
    statuses: [],
    notices: [],
    output: '',
    redraws: [],
    remoteSizes: [],
    stored,
    storeCalls: 0,
    timers: [],
    now: 0,
    size: { cols: 80, rows: 24 },
    sessions,
    fresh: 0,
  };
  let nextTimer = 1;
  const dec = new TextDecoder();
  const conn = new TermConnection({
    openSocket(cols, rows, session, offset, events) {
      const s = new FakeSocket({ cols, rows, session, offset }, events);
      world.sockets.push(s);
      return s;
    },
    listSessions: async () => (typeof world.sessions === 'function' ? world.sessions() : world.sessions),
    loadSession: () => world.stored,
    storeSession: (v) => {
      world.stored = v;
      world.storeCalls++;
    },
    setTimeout: (fn, ms) => {
      const t = { id: nextTimer++, fn, ms };
      world.timers.push(t);
      return t.id;
    },
    clearTimeout: (id) => (world.timers = world.timers.filter((t) => t.id !== id)),
    now: () => world.now,
    isOnline: () => online,
    agentName: () => 'box',
    status: (s, text, detail) => world.statuses.push({ s, text, detail }),
    prepare: () => {},
    size: () => world.size,
    output: (b) => (world.output += dec.decode(b)),
    redraw: (b) => world.redraws.push(dec.decode(b)),
    notice: (t) => world.notices.push(t),
    remoteResize: (cols, rows) => world.remoteSizes.push([cols, rows]),
    freshSession: () => world.fresh++,
  });
  const last = () => world.sockets[world.sockets.length - 1];
  const lastStatus = () => world.statuses[world.statuses.length - 1];
  /** Runs the pending timers (those they set wait for the next call). */
  const fire = () => {
    const due = world.timers;
    world.timers = [];
    for (const t of due) t.fn();
    return due.map((t) => t.ms);
  };
  return { conn, world, last, lastStatus, fire };
}

/** Lets the machine's awaited session list answer. */
const settle = () => new Promise((r) => setImmediate(r));

test('a first connect starts a new session and stores it once the server names it', () => {
  const { conn, world, last, lastStatus } = setup();
  conn.connect();
  assert.equal(conn.status, 'connecting');
  assert.deepEqual([last().session, last().offset, last().cols, last().rows], [null, null, 80, 24]);
  last().upgrade();
  last().bytes('Starting the sandbox…\r\n');
  last().control({ type: 'session', id: 's1', offset: 0, cols: 80, rows: 24 });
  assert.equal(conn.status, 'connected');
  assert.equal(lastStatus().text, 'Connected');
  assert.equal(conn.session, 's1');
  assert.deepEqual(world.stored, { id: 's1', offset: 0 }, 'status text before `session` is not counted');
  // connect() while connected does nothing.
  conn.connect();
  assert.equal(world.sockets.length, 1);
});

test('output after `session` advances the offset, stored within a second', () => {
  const { conn, world, last, fire } = setup();
  conn.connect();
  last().attach('s1', 100);
  last().bytes('hello');
  last().bytes('!!');
  assert.equal(conn.outputOffset, 107);
  assert.equal(world.output, 'hello!!');
  assert.deepEqual(world.stored, { id: 's1', offset: 100 }, 'not stored on every chunk');
  assert.deepEqual(fire(), [1000]);
  assert.deepEqual(world.stored, { id: 's1', offset: 107 });
});

test('a redraw resets the screen, is not counted, and moves the offset to where it stands', () => {
  const { conn, world, last } = setup({ stored: { id: 's1', offset: 5 } });
  conn.connect();
  assert.deepEqual([last().session, last().offset], ['s1', null], 'a fresh page attaches without an offset');
  last().attach('s1', 0);
  last().control({ type: 'redraw', offset: 4000, bytes: 6 });
  last().bytes('SCREEN');
  last().bytes('next');
  assert.deepEqual(world.redraws, ['SCREEN']);
  assert.equal(world.output, 'next');
  assert.equal(conn.outputOffset, 4004);
});

test('a drop after the upgrade reattaches from the offset with a doubling backoff capped at 5 s', () => {
  const { conn, world, last, lastStatus, fire } = setup();
  conn.connect();
  last().attach('s1', 3);
  last().drop(1006);
  assert.equal(conn.status, 'reconnecting');
  assert.equal(lastStatus().text, 'Reconnecting…');
  assert.equal(lastStatus().detail, 'the connection was refused or dropped');
  const delays = [];
  for (let i = 0; i < 7; i++) {
    delays.push(...fire());
    assert.deepEqual([last().session, last().offset], ['s1', 3], 'reattach names the session and the offset');
    last().upgrade();
    last().drop(1011, 'sandbox lost');
  }
  assert.deepEqual(delays, [250, 500, 1000, 2000, 4000, 5000, 5000]);
  // Reaching the session again resets the backoff.
  fire();
  last().attach('s1', 3);
  last().drop(1001);
  assert.deepEqual(fire(), [250]);
  assert.equal(world.sockets.length, 10);
});

test('keys typed while reconnecting are sent once the session is back', () => {
  const { conn, last, fire } = setup();
  conn.connect();
  const enc = new TextEncoder();
  conn.sendKeys(enc.encode('early'));
  last().attach('s1');
  assert.deepEqual(last().sent.map((b) => new TextDecoder().decode(b)), ['early']);
  last().drop(1006);
  conn.sendKeys(enc.encode('ls\r'));
  fire();
  last().attach('s1');
  assert.deepEqual(last().sent.map((b) => new TextDecoder().decode(b)), ['ls\r']);
});

test('the shell exiting ends the session, names the exit code and forgets the session', () => {
  const { conn, world, last, lastStatus } = setup();
  conn.connect();
  last().attach('s1');
  last().control({ type: 'exit', code: 3 });
  last().drop(1000);
  assert.equal(conn.status, 'ended');
  assert.equal(lastStatus().text, 'Shell ended');
  assert.match(world.notices.at(-1), /^The shell ended \(exit code 3\)\. Press “New session”/);
  assert.equal(conn.session, null);
  assert.equal(world.stored, null);
  // connect() after an end starts a new session on a separated screen.
  conn.connect();
  assert.equal(world.fresh, 1);
  assert.equal(last().session, null);
});

test('4404: a session seen here ended; one stored from before a reload is replaced by a new one', () => {
  const seen = setup();
  seen.conn.connect();
  seen.last().attach('s1');
  seen.last().drop(4404);
  assert.equal(seen.conn.status, 'ended');
  assert.equal(seen.lastStatus().text, 'Session ended');

  const stale = setup({ stored: { id: 'old', offset: 9 } });
  stale.conn.connect();
  stale.last().upgrade();
  stale.last().drop(4404);
  assert.equal(stale.world.sockets.length, 2);
  assert.equal(stale.last().session, null);
  assert.equal(stale.conn.status, 'connecting');
});

test('4400 while in sync asks for a redraw instead of an offset', () => {
  const { conn, last } = setup();
  conn.connect();
  last().attach('s1', 50);
  last().drop(4400);
  assert.deepEqual([last().session, last().offset], ['s1', null]);
});

test('4409 is too many viewers (a final state); 4429 retries with backoff', () => {
  const busy = setup();
  busy.conn.connect();
  busy.last().attach('s1');
  busy.last().drop(4409);
  assert.equal(busy.conn.status, 'disconnected');
  assert.equal(busy.lastStatus().text, 'Too many viewers');
  assert.equal(busy.fire().length, 0, 'no retry');

  const flood = setup();
  flood.conn.connect();
  flood.last().upgrade();
  flood.last().drop(4429, 'too many streams');
  assert.equal(flood.conn.status, 'reconnecting');
  assert.deepEqual(flood.fire(), [250]);
  assert.equal(flood.world.sockets.length, 2);
});

test('a close with no meaning for the session disconnects, naming the agent and the reason', () => {
  const { conn, world, last, lastStatus } = setup();
  conn.connect();
  last().upgrade();
  last().drop(1008, 'policy');
  assert.equal(conn.status, 'disconnected');
  assert.equal(world.notices.at(-1), 'Disconnected from box: policy');
  assert.equal(lastStatus().detail, 'policy');
});

test('an attach refused before the upgrade asks the session list why', async () => {
  // Gone, after this view had it: the agent slept.
  const gone = setup({ sessions: [] });
  gone.conn.connect();
  gone.last().attach('s1');
  gone.last().drop(1006);
  gone.fire();
  gone.last().drop(1006);
  await settle();
  assert.equal(gone.conn.status, 'ended');
  assert.equal(gone.lastStatus().text, 'Session ended');

  // Too many viewers.
  const busy = setup({ stored: { id: 's1', offset: 0 }, sessions: [{ id: 's1', viewers: 32, offset: 0 }] });
  busy.conn.connect();
  busy.last().drop(1006);
  await settle();
  assert.equal(busy.lastStatus().text, 'Too many viewers');

  // The agent is gone.
  const noAgent = setup({ stored: { id: 's1', offset: 0 }, sessions: 'no-agent' });
  noAgent.conn.connect();
  noAgent.last().drop(1006);
  await settle();
  assert.equal(noAgent.lastStatus().text, 'Agent gone');
  assert.match(noAgent.world.notices.at(-1), /^box no longer exists\./);

  // We are ahead of the session's output: the next attach takes a redraw.
  const ahead = setup({ sessions: [{ id: 's1', viewers: 1, offset: 2 }] });
  ahead.conn.connect();
  ahead.last().attach('s1');
  ahead.last().bytes('abcdef');
  ahead.last().drop(1006);
  ahead.fire();
  ahead.last().drop(1006);
  await settle();
  assert.equal(ahead.conn.status, 'reconnecting');
  ahead.fire();
  assert.deepEqual([ahead.last().session, ahead.last().offset], ['s1', null]);

  // The list itself failed: keep retrying.
  const unknown = setup({ stored: { id: 's1', offset: 0 }, sessions: null });
  unknown.conn.connect();
  unknown.last().drop(1006);
  await settle();
  assert.equal(unknown.conn.status, 'reconnecting');
});

test('an answer about a socket that was replaced meanwhile changes nothing', async () => {
  let answer;
  const { conn, world, last } = setup({ stored: { id: 's1', offset: 0 }, sessions: () => new Promise((r) => (answer = r)) });
  conn.connect();
  last().drop(1006);
  conn.startNew();
  answer([]);
  await settle();
  assert.equal(conn.status, 'connecting');
  assert.equal(world.sockets.length, 2);
  assert.equal(last().session, null);
});

test('a replaced socket is closed and what it still says is ignored', () => {
  const { conn, world, last } = setup();
  conn.connect();
  const first = last();
  first.attach('s1');
  conn.attach('s2');
  assert.equal(first.closedWith, 1000);
  first.bytes('stale');
  first.drop(1006);
  assert.equal(world.output, '');
  assert.equal(conn.status, 'connecting', 'the old socket’s close is not ours');
  assert.deepEqual([last().session, last().offset], ['s2', null]);
});

test('our own resize echoes are not applied; another viewer’s size is', () => {
  const { conn, world, last } = setup();
  conn.connect();
  last().attach('s1', 0, 80, 24);
  assert.deepEqual(last().sent, [], 'the session already has our size');
  conn.sendSize(100, 30);
  assert.deepEqual(last().sent, [encodeResize(100, 30)]);
  last().control({ type: 'resize', cols: 100, rows: 30 });
  assert.deepEqual(world.remoteSizes, []);
  last().control({ type: 'resize', cols: 120, rows: 40 });
  assert.deepEqual(world.remoteSizes, [[120, 40]]);
  world.now = 3001;
  last().control({ type: 'resize', cols: 100, rows: 30 });
  assert.deepEqual(world.remoteSizes, [[120, 40], [100, 30]], 'an old size is no longer taken for an echo');
});

test('a session message naming another size gets ours back', () => {
  const { conn, world, last } = setup();
  world.size = { cols: 90, rows: 20 };
  conn.connect();
  last().attach('s1', 0, 80, 24);
  assert.deepEqual(last().sent, [encodeResize(90, 20)]);
});

test('offline then online reattaches a live socket from its offset', () => {
  const { conn, last } = setup();
  conn.connect();
  last().attach('s1');
  last().bytes('xy');
  conn.offline();
  conn.online();
  assert.equal(conn.status, 'reconnecting');
  assert.deepEqual([last().session, last().offset], ['s1', 2]);
});

test('dispose stores the offset and closes the socket', () => {
  const { conn, world, last } = setup();
  conn.connect();
  last().attach('s1');
  last().bytes('12345');
  conn.dispose();
  assert.deepEqual(world.stored, { id: 's1', offset: 5 });
  assert.equal(last().closedWith, 1000);
  assert.deepEqual(world.timers, []);
});

test('control messages: only known types of JSON objects', () => {
  assert.equal(parseControl('not json'), null);
  assert.equal(parseControl('"text"'), null);
  assert.equal(parseControl('null'), null);
  assert.equal(parseControl('{"type":"later"}'), null);
  assert.deepEqual(parseControl('{"type":"session","id":"a","offset":7,"cols":80,"rows":24}'), { type: 'session', id: 'a', offset: 7, cols: 80, rows: 24 });
  assert.deepEqual(parseControl('{"type":"redraw","offset":"x"}'), { type: 'redraw', offset: 0 });
  assert.deepEqual(parseControl('{"type":"exit"}'), { type: 'exit', code: null });
  assert.deepEqual(JSON.parse(encodeResize(3, 4)), { type: 'resize', cols: 3, rows: 4 });
  assert.equal(closeReason(1006, ''), 'the connection was refused or dropped');
  assert.equal(closeReason(1011, 'sandbox lost'), 'sandbox lost');
  assert.equal(closeReason(4000, ''), 'code 4000');
});
