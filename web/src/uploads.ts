// The file browser's upload queue: each file a row with progress and Cancel/Dismiss, two at a
// time, each streamed as the body of `PUT …/fs/write` (see `upload` in api.ts).
import { errorMessage, upload } from './api';
import { formatBytes, h, setText } from './dom';
import { join } from './paths';

const PARALLEL_UPLOADS = 2;
/** How long a finished upload's row stays. */
const DONE_ROW_MS = 8000;

export interface UploadQueue {
  /** The list of uploads (queued, running, done or failed). */
  el: HTMLElement;
  /** Upload `files` into folder `dir`. */
  enqueue(files: File[], dir: string): void;
}

/** `uploaded(dir)` is called after each file that arrived in `dir`. */
export function uploadQueue(agentId: string, uploaded: (dir: string) => void): UploadQueue {
  const el = h('ul', { class: 'uploads', 'aria-label': 'Uploads', 'data-testid': 'uploads' });
  const queue: Array<() => Promise<void>> = [];
  let running = 0;
  const pump = () => {
    while (running < PARALLEL_UPLOADS && queue.length) {
      const job = queue.shift()!;
      running++;
      void job().finally(() => {
        running--;
        pump();
      });
    }
  };

  const enqueueOne = (file: File, dir: string) => {
    const target = join(dir, file.name);
    const bar = h('progress', { max: String(Math.max(file.size, 1)), value: '0', 'aria-label': `Uploading ${file.name}` });
    const text = h('span', { class: 'upload-text mono' }, `0 / ${formatBytes(file.size)}`);
    const cancel = h('button', { type: 'button', class: 'btn btn-small btn-ghost', 'aria-label': `Cancel upload of ${file.name}` }, 'Cancel');
    const item = h(
      'li',
      { class: 'upload upload-queued', 'data-testid': 'upload', 'data-name': file.name },
      h('span', { class: 'upload-name', title: target }, file.name),
      bar,
      text,
      cancel,
    );
    el.appendChild(item);
    let abort: (() => void) | null = null;
    let cancelled = false;
    const dismiss = () => item.remove();
    cancel.addEventListener('click', () => {
      if (item.classList.contains('upload-done') || item.classList.contains('upload-failed')) return dismiss();
      cancelled = true;
      abort?.();
    });
    queue.push(async () => {
      if (cancelled) {
        item.className = 'upload upload-failed';
        setText(text, 'Cancelled');
        setText(cancel, 'Dismiss');
        return;
      }
      item.className = 'upload upload-active';
      const u = upload(agentId, target, file, (loaded, total) => {
        bar.max = Math.max(total, 1);
        bar.value = loaded;
        setText(text, `${formatBytes(loaded)} / ${formatBytes(total)}`);
      });
      abort = u.abort;
      try {
        await u.promise;
        item.className = 'upload upload-done';
        bar.value = bar.max;
        setText(text, `Uploaded ${formatBytes(file.size)}`);
        setText(cancel, 'Dismiss');
        cancel.setAttribute('aria-label', `Dismiss ${file.name}`);
        uploaded(dir);
        setTimeout(() => item.classList.contains('upload-done') && dismiss(), DONE_ROW_MS);
      } catch (err) {
        item.className = 'upload upload-failed';
        setText(text, errorMessage(err));
        text.setAttribute('role', 'alert');
        setText(cancel, 'Dismiss');
        cancel.setAttribute('aria-label', `Dismiss ${file.name}`);
      }
    });
  };

  return {
    el,
    enqueue(files, dir) {
      for (const file of files) enqueueOne(file, dir);
      pump();
    },
  };
}
