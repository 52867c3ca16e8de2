// The UI's `?next=` (src/nextpath.ts): only a preview's sign-in hand-off on the UI's own origin is
// followed, never another site or another route (an open redirect), and a hand-off that comes
// straight back is not followed again. And how ports and previews read (src/previewfmt.ts).
// Run by `npm run test:unit`, which bundles the modules into test/.build first.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isRepeat, nextTarget, NEXT_KEY } from './.build/nextpath.mjs';
import { expiryText, portRows, previewOf, tokenUrl, webUrl } from './.build/previewfmt.mjs';

const ORIGIN = 'http://localhost:8080';
const search = (next) => `?next=${encodeURIComponent(next)}`;

test('next: the hand-off route on this origin is followed, with its own next', () => {
  assert.equal(nextTarget(search('/api/v1/previews/pk3m9x0b2c4d/open'), ORIGIN), '/api/v1/previews/pk3m9x0b2c4d/open');
  assert.equal(
    nextTarget(search('/api/v1/previews/pk3m9x0b2c4d/open?next=%2Fapp%3Fa%3D1'), ORIGIN),
    '/api/v1/previews/pk3m9x0b2c4d/open?next=%2Fapp%3Fa%3D1',
  );
  // As the server writes it: the whole path percent-encoded, every character but letters and digits.
  const server = '?next=%2Fapi%2Fv1%2Fpreviews%2Fpk3m9x0b2c4d%2Fopen%3Fnext%3D%252F';
  assert.equal(nextTarget(server, ORIGIN), '/api/v1/previews/pk3m9x0b2c4d/open?next=%2F');
  // Among other parameters.
  assert.equal(nextTarget(`?x=1&next=${encodeURIComponent('/api/v1/previews/p1/open')}`, ORIGIN), '/api/v1/previews/p1/open');
});

test('next: anything else is ignored', () => {
  const bad = [
    '',
    'https://evil.example/',
    '//evil.example/api/v1/previews/p/open',
    '/\\evil.example/api/v1/previews/p/open',
    'http://localhost:8080/api/v1/previews/p/open',
    'javascript:alert(1)',
    '/',
    '/agents/abc',
    '/api/v1/agents',
    '/api/v1/previews/',
    '/api/v1/previews/p',
    '/api/v1/previews/p/open/more',
    '/api/v1/previews/p/delete',
    '/api/v1/previews/../agents',
    '/api/v1/previews/../../../evil',
    '/api/v1/previews/%2e%2e/open',
    '/api/v1/previews/p/%2e%2e/%2e%2e/agents',
    '/api/v1/previews/p/open#frag',
    '/api/v1/previews/p\\open',
    '/api/v1/previews/p/open\n',
    '/api/v1/previews/p/open\t',
    '/api/v1/previewsX/p/open',
  ];
  for (const next of bad) assert.equal(nextTarget(search(next), ORIGIN), null, JSON.stringify(next));
  assert.equal(nextTarget('', ORIGIN), null, 'no next at all');
  assert.equal(nextTarget('?next=', ORIGIN), null);
  assert.equal(nextTarget('?other=/api/v1/previews/p/open', ORIGIN), null);
});

/** A Storage-like map. */
function memoryStorage() {
  const m = new Map();
  return { getItem: (k) => (m.has(k) ? m.get(k) : null), setItem: (k, v) => m.set(k, String(v)), m };
}

test('a hand-off that comes straight back is not followed again', () => {
  const s = memoryStorage();
  const t = '/api/v1/previews/p1/open';
  assert.equal(isRepeat(s, t, 1_000), false, 'the first time: go');
  assert.equal(isRepeat(s, t, 3_000), true, 'back 2 s later: a loop');
  assert.equal(isRepeat(s, '/api/v1/previews/p2/open', 3_500), false, 'another preview is not a repeat');
  assert.equal(isRepeat(s, t, 4_000), false, 'the record is of p2 now');
  assert.equal(isRepeat(s, t, 4_000 + 15_000), false, 'long after: go again');
  s.setItem(NEXT_KEY, '{not json');
  assert.equal(isRepeat(s, t, 50_000), false, 'an unreadable record is none');
  const refusing = {
    getItem() {
      throw new Error('denied');
    },
    setItem() {
      throw new Error('denied');
    },
  };
  assert.equal(isRepeat(refusing, t, 1), false, 'storage that refuses does not stop the hand-off');
});

test('ports: one row per port, by port, addresses once each', () => {
  const rows = portRows([
    { port: 8000, address: '0.0.0.0', process: 'python3' },
    { port: 5173, address: '127.0.0.1', process: null },
    { port: 8000, address: '::', process: 'python3' },
    { port: 8000, address: '::' },
    { port: 5173, address: '::1', process: 'node' },
  ]);
  assert.deepEqual(rows, [
    { port: 5173, addresses: ['127.0.0.1', '::1'], process: 'node' },
    { port: 8000, addresses: ['0.0.0.0', '::'], process: 'python3' },
  ]);
  assert.deepEqual(portRows([]), []);
});

test('previews: the token link, links only for http(s), expiry, the preview of a port', () => {
  assert.equal(tokenUrl('http://8000-web.localhost:8081/', 'a b&c'), 'http://8000-web.localhost:8081/?token=a+b%26c');
  assert.equal(webUrl('http://8000-web.localhost:8081/'), 'http://8000-web.localhost:8081/');
  assert.equal(webUrl('https://8000-web.example.org/'), 'https://8000-web.example.org/');
  assert.equal(webUrl('javascript:alert(1)'), null);
  assert.equal(webUrl('not a url'), null);

  const now = Date.parse('2030-01-01T00:00:00Z');
  assert.equal(expiryText(null, now), 'never');
  assert.equal(expiryText(undefined, now), 'never');
  assert.equal(expiryText('2029-12-31T23:59:00Z', now), 'expired');
  assert.equal(expiryText('2030-01-01T00:00:30Z', now), 'in under a minute');
  assert.equal(expiryText('2030-01-01T00:12:00Z', now), 'in 12 min');
  assert.equal(expiryText('2030-01-01T03:00:00Z', now), 'in 3 h');
  assert.equal(expiryText('2030-01-05T00:00:00Z', now), 'in 4 d');

  const list = [
    { id: 'a', port: 5173, access: 'private', url: 'http://5173-w.localhost/', createdAt: '' },
    { id: 'b', port: 8000, access: 'public', url: 'http://8000-w.localhost/', createdAt: '' },
  ];
  assert.equal(previewOf(list, 8000)?.id, 'b');
  assert.equal(previewOf(list, 9000), undefined);
});
