// The file browser's text editor: one UTF-8 file up to EDIT_LIMIT, saved with `PUT …/fs/write`
// (Save or Ctrl+S); closing with unsaved changes asks first.
import { api, errorMessage } from './api';
import { formatBytes, h, setText, toast } from './dom';

/** The largest file the editor opens (larger ones are downloaded). */
export const EDIT_LIMIT = 1024 * 1024;

export interface FileEditor {
  el: HTMLElement;
  /** Whether a file is open. */
  isOpen(): boolean;
  /** Open `path` (closing the file open, if the person agrees). */
  open(path: string): Promise<void>;
  /** Close the file; false when the person chose to keep editing. */
  close(): boolean;
}

/** `opened` is called when a file is shown, `closed` when the editor is closed. */
export function fileEditor(agentId: string, opened: () => void, closed: () => void): FileEditor {
  let editing: { path: string; original: string } | null = null;
  const title = h('h3', { class: 'editor-title mono' });
  const status = h('span', { class: 'editor-status muted', role: 'status', 'data-testid': 'editor-status' });
  const textarea = h('textarea', { class: 'editor-text mono', spellcheck: 'false', 'aria-label': 'File contents', 'data-testid': 'editor' });
  const saveBtn = h('button', { type: 'button', class: 'btn btn-small btn-primary', 'data-testid': 'editor-save' }, 'Save');
  const closeBtn = h('button', { type: 'button', class: 'btn btn-small', 'data-testid': 'editor-close' }, 'Close');
  const el = h(
    'div',
    { class: 'editor', hidden: true, 'data-testid': 'editor-panel' },
    h('div', { class: 'editor-head' }, title, status, h('span', { class: 'spacer' }), saveBtn, closeBtn),
    textarea,
  );

  const dirty = () => !!editing && textarea.value !== editing.original;
  const open = async (path: string) => {
    if (editing && !close()) return;
    try {
      const buf = await api.readText(agentId, path);
      if (buf.byteLength > EDIT_LIMIT) throw new Error(`The file is larger than ${formatBytes(EDIT_LIMIT)}; download it instead.`);
      let text: string;
      try {
        text = new TextDecoder('utf-8', { fatal: true }).decode(buf);
      } catch {
        throw new Error('This file is not UTF-8 text; download it instead.');
      }
      editing = { path, original: text };
      textarea.value = text;
      setText(title, path);
      setText(status, '');
      opened();
      el.hidden = false;
      textarea.focus();
    } catch (err) {
      toast(`Open ${path}: ${errorMessage(err)}`);
    }
  };
  const save = async () => {
    if (!editing) return;
    const cur = editing;
    const text = textarea.value;
    saveBtn.disabled = true;
    setText(status, 'Saving…');
    try {
      await api.writeText(agentId, cur.path, text);
      if (editing === cur) cur.original = text;
      setText(status, `Saved at ${new Date().toLocaleTimeString()}`);
    } catch (err) {
      setText(status, `Not saved: ${errorMessage(err)}`);
    } finally {
      saveBtn.disabled = false;
    }
  };
  function close(): boolean {
    if (dirty() && !window.confirm('Discard the unsaved changes?')) return false;
    editing = null;
    textarea.value = '';
    el.hidden = true;
    closed();
    return true;
  }
  saveBtn.addEventListener('click', () => void save());
  closeBtn.addEventListener('click', () => close());
  textarea.addEventListener('input', () => setText(status, dirty() ? 'Unsaved changes' : ''));
  textarea.addEventListener('keydown', (e) => {
    if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === 's') {
      e.preventDefault();
      void save();
    }
  });

  return { el, isOpen: () => editing !== null, open, close };
}
