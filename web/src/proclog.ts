// One background process's output, followed live: stdout and stderr told apart, a note for a gap
// and for the end. A cut stream is read again from its last offset; the view keeps the newest
// ~1 MB of text and drops the oldest.
import { api, ApiError, type OutputStream, type Process, type ProcessOutputLine } from './api';
import { formatBytes, h, replace, setText } from './dom';
import { endNote, procName } from './procfmt';

/** Characters of output the view keeps; older ones are dropped. */
const KEPT = 1024 * 1024;
const RETRY_FIRST_MS = 250;
const RETRY_MAX_MS = 5000;
/** Within this many pixels of the bottom, the view follows new output down. */
const STICKY_PX = 24;

type LogState = 'idle' | 'following' | 'reconnecting' | 'paused' | 'ended' | 'error';
type Piece = 'plog-out' | 'plog-err' | 'plog-note';

export interface ProcessLog {
  el: HTMLElement;
  /** The id of the process shown, if any. */
  current(): string | null;
  /** Show `p`'s output from its first kept byte and follow it (stops following the one before). */
  open(p: Process): void;
  /** Stop following and hide the view. */
  close(): void;
  /** Stop following for now (its tab was left, or its agent sleeps); `resume` goes on from there. */
  pause(why?: string): void;
  resume(): void;
  dispose(): void;
}

/** A stream that ended with an `error` line: read again from the last offset. */
class Cut extends Error {}

const utf8 = new TextEncoder();
const byteLength = (s: string) => utf8.encode(s).length;
const fromBase64 = (s: string) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface ProcessLogOptions {
  agentId: string;
  /** Why the view must not reconnect by itself (the agent is asleep: reading would wake it), or null. */
  blocked: () => string | null;
  /** The person closed the view. */
  onClose: () => void;
  /** The output's last line told how the process ended. */
  onExit: (p: Process) => void;
  /** `data-testid` of the text, and the prefix of its panel's and status's (default `process-log`). */
  testId?: string;
}

export function processLog({ agentId, blocked, onClose, onExit, testId = 'process-log' }: ProcessLogOptions): ProcessLog {
  let proc: Process | null = null;
  /** The offset of the next byte to read. */
  let offset = 0;
  let ended = false;
  let state: LogState = 'idle';
  /** Bumped whenever following stops or restarts: an older read loop sees it and quits. */
  let gen = 0;
  let ctrl: AbortController | null = null;
  let kept = 0;
  let lastChar = '\n';
  let stick = true;
  let scrollQueued = false;

  const title = h('h3', { class: 'plog-title mono' });
  const status = h('span', { class: 'plog-status muted', role: 'status', 'data-testid': `${testId}-status` });
  const closeBtn = h('button', { type: 'button', class: 'btn btn-small' }, 'Close');
  const dropped = h('p', { class: 'plog-dropped muted', hidden: true }, `Older output is not shown: this view keeps the last ${formatBytes(KEPT)}.`);
  const text = h('pre', { class: 'plog-text mono', role: 'log', 'aria-live': 'off', tabindex: '0', 'data-testid': testId });
  const el = h(
    'div',
    { class: 'plog', hidden: true, 'data-testid': `${testId}-panel`, 'data-state': 'idle' },
    h('div', { class: 'plog-head' }, title, status, h('span', { class: 'spacer' }), closeBtn),
    dropped,
    text,
  );
  closeBtn.addEventListener('click', () => {
    close();
    onClose();
  });
  text.addEventListener('scroll', () => {
    stick = text.scrollHeight - text.scrollTop - text.clientHeight < STICKY_PX;
  });

  const setState = (s: LogState, message: string) => {
    state = s;
    el.dataset.state = s;
    status.className = `plog-status${s === 'error' ? ' plog-status-error' : ' muted'}`;
    setText(status, message);
  };

  const scrollDown = () => {
    if (scrollQueued || !stick) return;
    scrollQueued = true;
    requestAnimationFrame(() => {
      scrollQueued = false;
      if (stick) text.scrollTop = text.scrollHeight;
    });
  };

  /** Drop the oldest text until at most KEPT characters remain. */
  const trim = () => {
    while (kept > KEPT) {
      const first = text.firstElementChild;
      const node = first?.firstChild;
      if (!first || !(node instanceof Text)) break;
      const excess = kept - KEPT;
      if (node.length <= excess) {
        kept -= node.length;
        first.remove();
      } else {
        node.deleteData(0, excess);
        kept -= excess;
      }
      dropped.hidden = false;
    }
  };

  const append = (piece: string, kind: Piece) => {
    if (!piece) return;
    if (piece.length > KEPT) piece = piece.slice(piece.length - KEPT);
    const last = text.lastElementChild;
    if (kind !== 'plog-note' && last?.className === kind && last.firstChild instanceof Text) last.firstChild.appendData(piece);
    else text.appendChild(h('span', { class: kind }, piece));
    kept += piece.length;
    lastChar = piece[piece.length - 1];
    trim();
    scrollDown();
  };

  /** A line of its own, told apart from the output. */
  const note = (message: string) => append(`${lastChar === '\n' ? '' : '\n'}[${message}]\n`, 'plog-note');

  const kind = (s: OutputStream): Piece => (s === 'stderr' ? 'plog-err' : 'plog-out');

  const onLine = (line: ProcessOutputLine) => {
    if ('error' in line) throw new Cut(line.error.message);
    if ('gap' in line) {
      note(`${formatBytes(line.gap.to - line.gap.from)} of output no longer kept`);
      offset = Math.max(offset, line.gap.to);
    } else if ('exit' in line) {
      ended = true;
      proc = line.exit;
      note(endNote(line.exit));
      onExit(line.exit);
    } else if ('data' in line) {
      append(line.data, kind(line.stream));
      offset = line.offset + byteLength(line.data);
    } else if ('data64' in line) {
      const bytes = fromBase64(line.data64);
      append(new TextDecoder().decode(bytes), kind(line.stream));
      offset = line.offset + bytes.length;
    }
  };

  /** Read from `offset` until the end; after a cut, again from where it stopped. */
  const follow = async (mine: number) => {
    const p = proc;
    if (!p) return;
    let delay = RETRY_FIRST_MS;
    while (mine === gen && !ended) {
      const c = new AbortController();
      ctrl = c;
      setState('following', p.state === 'running' ? 'Following…' : 'Loading…');
      const before = offset;
      try {
        for await (const line of api.processOutput(agentId, p.id, offset, c.signal)) {
          if (mine !== gen) return;
          onLine(line);
        }
      } catch (e) {
        if (mine !== gen) return;
        // The process is gone, or the server refuses: reading again would not help.
        if (e instanceof ApiError && e.status >= 400 && e.status < 500 && e.status !== 408 && e.status !== 429) {
          note(`cannot read the output: ${e.message}`);
          setState('error', e.message);
          return;
        }
      } finally {
        c.abort();
      }
      if (mine !== gen) return;
      if (ended) break;
      const why = blocked();
      if (why) {
        setState('paused', `Stopped following: ${why}`);
        return;
      }
      if (offset > before) delay = RETRY_FIRST_MS;
      setState('reconnecting', 'Reconnecting…');
      await sleep(delay);
      delay = Math.min(delay * 2, RETRY_MAX_MS);
    }
    if (mine === gen && proc) setState('ended', `Ended: ${endNote(proc)}`);
  };

  const stop = () => {
    gen++;
    ctrl?.abort();
    ctrl = null;
  };

  const close = () => {
    stop();
    proc = null;
    el.hidden = true;
    setState('idle', '');
  };

  return {
    el,
    current: () => proc?.id ?? null,
    open(p) {
      stop();
      proc = p;
      offset = 0;
      ended = false;
      kept = 0;
      lastChar = '\n';
      stick = true;
      replace(text);
      dropped.hidden = true;
      setText(title, procName(p));
      title.title = p.id;
      el.hidden = false;
      void follow(gen);
    },
    close,
    pause(why) {
      if (!proc || ended || state === 'error') return;
      stop();
      setState('paused', why ? `Stopped following: ${why}` : 'Paused');
    },
    resume() {
      if (!proc || ended || state === 'error' || state === 'following' || state === 'reconnecting') return;
      stop();
      void follow(gen);
    },
    dispose: stop,
  };
}
