// Agent messages as Markdown (src/markdown.ts): what a harness writes never becomes HTML. The
// tree is checked directly, and the DOM it makes through a minimal fake document (elements and
// text nodes only, serialized with escaping as a browser would).
// Run by `npm run test:unit`, which bundles the module into test/.build first.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { markdownTree, renderMarkdown, safeHref, ALLOWED_TAGS } from './.build/markdown.mjs';

/** Every element tag in the tree. */
function tags(nodes, out = []) {
  for (const n of nodes) {
    if (typeof n === 'string') continue;
    out.push(n.tag);
    tags(n.children, out);
  }
  return out;
}
/** All text of the tree, in order. */
const text = (nodes) => nodes.map((n) => (typeof n === 'string' ? n : text(n.children))).join('');
/** Every element of the tree with its attributes. */
function elements(nodes, out = []) {
  for (const n of nodes) {
    if (typeof n === 'string') continue;
    out.push(n);
    elements(n.children, out);
  }
  return out;
}

// A document that can only make elements and text nodes, serialized like innerHTML.
const esc = (s) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const escAttr = (s) => esc(s).replace(/"/g, '&quot;');
class FakeText {
  constructor(data) {
    this.data = data;
  }
  get html() {
    return esc(this.data);
  }
}
class FakeElement {
  constructor(tag) {
    this.tagName = tag;
    this.attrs = [];
    this.children = [];
    this.className = '';
  }
  setAttribute(k, v) {
    this.attrs.push([k, String(v)]);
  }
  appendChild(c) {
    this.children.push(c);
    return c;
  }
  get html() {
    const attrs = [...(this.className ? [['class', this.className]] : []), ...this.attrs].map(([k, v]) => ` ${k}="${escAttr(v)}"`).join('');
    return `<${this.tagName}${attrs}>${this.children.map((c) => c.html).join('')}</${this.tagName}>`;
  }
}
globalThis.document = {
  createElement: (tag) => new FakeElement(tag),
  createTextNode: (data) => new FakeText(data),
};

test('raw HTML in a message is text: <script> and <img onerror> make no element', () => {
  const src = 'Hello <script>alert(1)</script>\n\n<img src=x onerror="alert(2)">\n\n<b>bold?</b> <iframe src="https://evil.example"></iframe>';
  const tree = markdownTree(src);
  // Paragraphs, and the iframe's address as a plain link (linkify): no other element.
  const all = tags(tree);
  assert.deepEqual([...new Set(all)], ['p', 'a'], `only paragraphs and a link: ${all}`);
  assert.deepEqual(elements(tree).filter((e) => e.tag === 'a').map((a) => a.attrs.href), ['https://evil.example/']);
  const t = text(tree);
  assert.match(t, /<script>alert\(1\)<\/script>/);
  assert.match(t, /<img src=x onerror="alert\(2\)">/);
  assert.match(t, /<b>bold\?<\/b>/);

  const div = renderMarkdown(src);
  const html = div.html;
  assert.doesNotMatch(html, /<script/i);
  assert.doesNotMatch(html, /<img/i);
  assert.doesNotMatch(html, /<iframe/i);
  assert.match(html, /&lt;script&gt;alert\(1\)&lt;\/script&gt;/);
  assert.match(html, /&lt;img src=x onerror="alert\(2\)"&gt;/);
});

test('a fenced HTML block and inline code stay text inside pre/code', () => {
  const tree = markdownTree('```html\n<script>x()</script>\n```\n\nUse `<img onerror=y>` here');
  const [pre, p] = tree;
  assert.equal(pre.tag, 'pre');
  assert.equal(pre.children[0].tag, 'code');
  assert.equal(pre.children[0].attrs['data-lang'], 'html');
  assert.deepEqual(pre.children[0].children, ['<script>x()</script>\n']);
  assert.equal(p.tag, 'p');
  assert.deepEqual(p.children, ['Use ', { tag: 'code', attrs: {}, children: ['<img onerror=y>'] }, ' here']);
});

test('links: http(s) and mailto kept, opened apart without a referrer; javascript:, data: and relative ones are text', () => {
  const tree = markdownTree(
    '[ok](https://example.com/a?b=1) [mail](mailto:x@example.com) [js](javascript:alert(1)) [JS](JaVaScRiPt:alert(1)) [data](data:text/html;base64,PHNjcmlwdD4=) [rel](/api/v1/agents) <javascript:alert(3)> https://www.example.org',
  );
  const links = elements(tree).filter((e) => e.tag === 'a');
  assert.deepEqual(
    links.map((a) => [a.attrs.href, text(a.children)]),
    [
      ['https://example.com/a?b=1', 'ok'],
      ['mailto:x@example.com', 'mail'],
      ['https://www.example.org/', 'https://www.example.org'],
    ],
  );
  for (const a of links) {
    assert.equal(a.attrs.target, '_blank');
    assert.equal(a.attrs.rel, 'noopener noreferrer nofollow');
  }
  const t = text(tree);
  assert.match(t, /js/);
  assert.doesNotMatch(t.replace(/\[js\]\(javascript:alert\(1\)\)|\[JS\]\(JaVaScRiPt:alert\(1\)\)|<javascript:alert\(3\)>/g, ''), /javascript:/i);
});

test('images become links (nothing loads by itself); an unsafe source stays text', () => {
  const tree = markdownTree('![a cat](https://example.com/cat.png) ![x](javascript:alert(1)) ![y](data:image/png;base64,AAAA)');
  const all = tags(tree);
  assert.ok(!all.includes('img'));
  const links = elements(tree).filter((e) => e.tag === 'a');
  assert.deepEqual(links.map((a) => [a.attrs.href, text(a.children)]), [['https://example.com/cat.png', 'image: a cat']]);
  assert.match(text(tree), /\[image: y\]/);
});

test('ordinary Markdown: headings, emphasis, lists, quotes, tables, rules', () => {
  const tree = markdownTree('# Title\n\nSome *em* and **strong** and ~~gone~~.\n\n- one\n- two\n\n3. three\n4. four\n\n> quoted\n\n| a | b |\n|:-|-:|\n| 1 | 2 |\n\n---\nline  \nbreak');
  const all = new Set(tags(tree));
  for (const t of ['h1', 'em', 'strong', 's', 'ul', 'ol', 'li', 'blockquote', 'table', 'thead', 'tbody', 'tr', 'th', 'td', 'hr', 'br', 'p']) assert.ok(all.has(t), `has ${t}`);
  for (const t of all) assert.ok(ALLOWED_TAGS.has(t), `${t} is allowed`);
  const ol = elements(tree).find((e) => e.tag === 'ol');
  assert.equal(ol.attrs.start, '3');
  const cells = elements(tree).filter((e) => e.tag === 'th');
  assert.deepEqual(cells.map((c) => c.attrs.class), ['md-align-left', 'md-align-right']);
  // A tight list has no paragraphs inside its items.
  const li = elements(tree).find((e) => e.tag === 'li');
  assert.deepEqual(li.children, ['one']);
});

test('entities decode to text, which the DOM escapes again', () => {
  const html = renderMarkdown('&lt;script&gt; &amp; &quot;q&quot;').html;
  assert.equal(html, '<div class="md"><p>&lt;script&gt; &amp; "q"</p></div>');
});

test('safeHref', () => {
  assert.equal(safeHref('https://a.example/x'), 'https://a.example/x');
  assert.equal(safeHref('HTTP://A.example'), 'http://a.example/');
  assert.equal(safeHref('javascript:alert(1)'), null);
  assert.equal(safeHref(' javascript:alert(1)'), null);
  assert.equal(safeHref('vbscript:x'), null);
  assert.equal(safeHref('file:///etc/passwd'), null);
  assert.equal(safeHref('/relative'), null);
  assert.equal(safeHref(''), null);
  assert.equal(safeHref(null), null);
});
