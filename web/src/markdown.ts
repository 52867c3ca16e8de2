// Markdown from a harness (an agent's message), shown without ever becoming HTML: markdown-it
// parses it (raw HTML off, so `<script>` stays text), and its tokens are turned into a small tree
// of allowed elements and text, which becomes DOM through createElement and text nodes only.
// Links keep only http(s) and mailto targets and open in a new tab without a referrer; images are
// shown as links (a picture from a harness would load from anywhere as the page opens).
import MarkdownIt, { type Token } from 'markdown-it';

export interface MdElement {
  tag: string;
  attrs: Record<string, string>;
  children: MdNode[];
}
export type MdNode = string | MdElement;

/** The only elements the tree ever has. */
export const ALLOWED_TAGS = new Set([
  'p', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'blockquote', 'ul', 'ol', 'li', 'pre', 'code',
  'em', 'strong', 's', 'a', 'hr', 'br', 'table', 'thead', 'tbody', 'tr', 'th', 'td',
]);
/** Elements opened by a `*_open` token that the tree keeps (the others' content goes to the parent). */
const CONTAINERS = new Set(['p', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'blockquote', 'ul', 'ol', 'li', 'em', 'strong', 's', 'table', 'thead', 'tbody', 'tr', 'th', 'td']);

const md = new MarkdownIt({ html: false, linkify: true, typographer: false });

/** `url` when it is an absolute http(s) or mailto URL, else null. */
export function safeHref(url: string | null | undefined): string | null {
  if (!url) return null;
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return null;
  }
  return u.protocol === 'http:' || u.protocol === 'https:' || u.protocol === 'mailto:' ? u.href : null;
}

/** A token's attribute as text. */
const attr = (t: Token, name: string): string | null => {
  const v = t.attrGet(name);
  return v === null || v === undefined ? null : String(v);
};

const el = (tag: string, children: MdNode[] = [], attrs: Record<string, string> = {}): MdElement => ({ tag, attrs, children });

function pushText(into: MdNode[], text: string): void {
  if (!text) return;
  const n = into.length;
  if (n && typeof into[n - 1] === 'string') into[n - 1] = (into[n - 1] as string) + text;
  else into.push(text);
}

function link(href: string, children: MdNode[], title?: string | null): MdElement {
  const attrs: Record<string, string> = { href, target: '_blank', rel: 'noopener noreferrer nofollow' };
  if (title) attrs.title = title;
  return el('a', children, attrs);
}

/** The element a `*_open` token starts, or null when its content goes to the parent as it is. */
function opened(t: Token): MdElement | null {
  if (t.hidden) return null;
  if (t.type === 'link_open') {
    const href = safeHref(attr(t, 'href'));
    return href ? link(href, [], attr(t, 'title')) : null;
  }
  if (!CONTAINERS.has(t.tag)) return null;
  const e = el(t.tag);
  if (t.tag === 'ol') {
    const start = attr(t, 'start');
    if (start && /^\d{1,9}$/.test(start)) e.attrs.start = start;
  }
  if (t.tag === 'th' || t.tag === 'td') {
    const align = /text-align:\s*(left|right|center)/.exec(attr(t, 'style') ?? '');
    if (align) e.attrs.class = `md-align-${align[1]}`;
  }
  return e;
}

function walk(tokens: Token[], root: MdElement): void {
  // A transparent open pushes its parent again, so its content lands there.
  const stack: MdElement[] = [root];
  const top = () => stack[stack.length - 1];
  for (const t of tokens) {
    if (t.nesting === 1) {
      const e = opened(t);
      if (e) top().children.push(e);
      stack.push(e ?? top());
      continue;
    }
    if (t.nesting === -1) {
      if (stack.length > 1) stack.pop();
      continue;
    }
    const into = top().children;
    switch (t.type) {
      case 'inline':
        walk(t.children ?? [], top());
        break;
      case 'code_inline':
        into.push(el('code', [t.content]));
        break;
      case 'softbreak':
        pushText(into, '\n');
        break;
      case 'hardbreak':
        into.push(el('br'));
        break;
      case 'hr':
        into.push(el('hr'));
        break;
      case 'fence':
      case 'code_block': {
        const lang = (t.info || '').trim().split(/\s+/)[0];
        const code = el('code', [t.content]);
        if (lang && /^[A-Za-z0-9_+.#-]{1,32}$/.test(lang)) code.attrs['data-lang'] = lang;
        into.push(el('pre', [code]));
        break;
      }
      case 'image': {
        const label = `image: ${t.content || attr(t, 'src') || ''}`;
        const href = safeHref(attr(t, 'src'));
        if (href) into.push(link(href, [label], attr(t, 'title')));
        else pushText(into, `[${label}]`);
        break;
      }
      default:
        // text, text_special, and anything a newer markdown-it adds (html_* cannot occur with
        // html off; were it to, its source is text like the rest).
        pushText(into, t.content);
    }
  }
}

/** The message as a tree of allowed elements and strings. Pure: no DOM. */
export function markdownTree(src: string): MdNode[] {
  const root = el('root');
  walk(md.parse(src, {}), root);
  return root.children;
}

/** Append the tree to `parent` as elements and text nodes (an element not allowed is skipped, its content kept). */
export function appendTree(parent: Node, nodes: MdNode[]): void {
  for (const n of nodes) {
    if (typeof n === 'string') {
      parent.appendChild(document.createTextNode(n));
    } else if (ALLOWED_TAGS.has(n.tag)) {
      const e = document.createElement(n.tag);
      for (const [k, v] of Object.entries(n.attrs)) e.setAttribute(k, v);
      appendTree(e, n.children);
      parent.appendChild(e);
    } else appendTree(parent, n.children);
  }
}

/** `src` rendered as Markdown into a new `<div class="md">`. */
export function renderMarkdown(src: string): HTMLDivElement {
  const div = document.createElement('div');
  div.className = 'md';
  appendTree(div, markdownTree(src));
  return div;
}
