// How an agent's lifetime reads (src/ttlfmt.ts): the countdown's words at each scale, and when it
// warns. Run by `npm run test:unit`, which bundles the modules into test/.build first.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isExpiring, leftText, ttlText } from './.build/ttlfmt.mjs';

const NOW = Date.parse('2026-12-06T09:00:00Z');
const at = (ms) => new Date(NOW + ms).toISOString();

test('ttlText: none without a TTL, then the time left at each scale', () => {
  assert.equal(ttlText(null, NOW), null);
  assert.equal(ttlText(undefined, NOW), null);
  assert.equal(ttlText('not a time', NOW), null);
  assert.equal(ttlText(at(4 * 60_000 + 30_000), NOW), 'destroyed in 4 min 30 s');
  assert.equal(ttlText(at(42_000), NOW), 'destroyed in 42 s');
  assert.equal(ttlText(at(0), NOW), 'destroyed any moment now');
  assert.equal(ttlText(at(-5_000), NOW), 'destroyed any moment now');
});

test('leftText: seconds tick in the last ten minutes, minutes then hours and days above', () => {
  assert.equal(leftText(1), '1 s');
  assert.equal(leftText(59_000), '59 s');
  assert.equal(leftText(60_000), '1 min 00 s');
  assert.equal(leftText(65_500), '1 min 06 s');
  assert.equal(leftText(9 * 60_000 + 59_000), '9 min 59 s');
  assert.equal(leftText(10 * 60_000), '10 min');
  assert.equal(leftText(59 * 60_000 + 1), '1 h');
  assert.equal(leftText(58 * 60_000 + 1), '59 min');
  assert.equal(leftText(60 * 60_000 + 1), '1 h 1 min');
  assert.equal(leftText(2 * 3_600_000), '2 h');
  assert.equal(leftText(2 * 3_600_000 + 5 * 60_000), '2 h 5 min');
  assert.equal(leftText(3 * 86_400_000), '3 d');
  assert.equal(leftText(3 * 86_400_000 + 4 * 3_600_000), '3 d 4 h');
});

test('isExpiring: when the server said so, or under a minute is left', () => {
  assert.equal(isExpiring(null, true, NOW), false);
  assert.equal(isExpiring(at(10 * 60_000), false, NOW), false);
  assert.equal(isExpiring(at(10 * 60_000), true, NOW), true);
  assert.equal(isExpiring(at(60_000), false, NOW), true);
  assert.equal(isExpiring(at(-1), false, NOW), true);
});
