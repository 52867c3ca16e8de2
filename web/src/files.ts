// The file browser: any folder of the sandbox by its absolute path (the home, /home/agent, first),
// a path bar, uploads with progress, downloads, folders, a text editor. Outside the home the server
// serves what the sandbox's account may reach; what it refuses is shown with the server's words.
import { api, ApiError, upload, type FsEntry } from './api';
import { confirmDialog, formatBytes, formatTime, h, replace, setText, toast } from './dom';

const EDIT_LIMIT = 1024 * 1024;
const PARALLEL_UPLOADS = 2;

export const HOME = '/home/agent';
const join = (dir: string, name: string) => (dir === '/' ? `/${name}` : `${dir}/${name}`);
const parent = (p: string) => (p.lastIndexOf('/') <= 0 ? '/' : p.slice(0, p.lastIndexOf('/')));
const inHome = (p: string) => p === HOME || p.startsWith(`${HOME}/`);

/**
 * What was typed in the path bar as an absolute path: relative to the folder shown, `~` the home,
 * `.` and `..` resolved here (the API refuses `..`), repeated and trailing slashes dropped.
 */
export function resolvePath(typed: string, cwd: string): string {
  let t = typed.trim();
  if (t === '~' || t.startsWith('~/')) t = HOME + t.slice(1);
  const parts = t.startsWith('/') ? [] : cwd.split('/').filter(Boolean);
  for (const part of t.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') parts.pop();
    else parts.push(part);
  }
  return `/${parts.join('/')}`;
}
const errMsg = (e: unknown) => (e instanceof ApiError ? e.message : String(e));

function modeString(mode: number | string, type: FsEntry['type']): string {
  if (typeof mode === 'string') return mode;
  const t = type === 'dir' ? 'd' : type === 'symlink' ? 'l' : '-';
  const bits = 'rwxrwxrwx';
  let s = '';
  for (let i = 0; i < 9; i++) s += mode & (1 << (8 - i)) ? bits[i] : '-';
  return t + s;
}

export interface FilesView {
  el: HTMLElement;
  /** Load (or reload) the current folder. */
  load(): void;
  /** Called when the agent's running-ness changes. */
  setAvailable(available: boolean, why: string): void;
  dispose(): void;
}

export function filesView(agentId: string): FilesView {
  /** The folder shown: always an absolute path. */
  let cwd = HOME;
  let entries: FsEntry[] = [];
  let available = false;
  let loadedOnce = false;
  let loadSeq = 0;
  let editing: { path: string; original: string } | null = null;

  const crumbs = h('nav', { class: 'crumbs', 'aria-label': 'Folder', 'data-testid': 'breadcrumbs' });
  const pathInput = h('input', {
    type: 'text',
    class: 'path-input mono',
    'aria-label': 'Path',
    spellcheck: 'false',
    autocomplete: 'off',
    'data-testid': 'path-input',
    title: 'Type a folder (absolute, relative to this one, or ~) and press Enter',
  });
  const pathGo = h('button', { type: 'submit', class: 'btn btn-small' }, 'Go');
  const pathForm = h('form', { class: 'path-bar', 'data-testid': 'path-bar', role: 'search', 'aria-label': 'Go to a folder' }, pathInput, pathGo);
  const scopeNote = h('p', { class: 'files-scope muted', 'data-testid': 'files-scope', hidden: true });
  const fileInput = h('input', { type: 'file', multiple: true, class: 'visually-hidden', tabindex: '-1', 'data-testid': 'upload-input' });
  const uploadBtn = h('button', { type: 'button', class: 'btn btn-small btn-primary' }, 'Upload files');
  const newFolderBtn = h('button', { type: 'button', class: 'btn btn-small' }, 'New folder');
  const newFileBtn = h('button', { type: 'button', class: 'btn btn-small' }, 'New file');
  const limitHint = h('span', { class: 'muted upload-limit', 'data-testid': 'upload-limit' });
  void api.limits().then((l) => {
    if (l) setText(limitHint, `up to ${l.maxFileMb >= 1024 && l.maxFileMb % 1024 === 0 ? `${l.maxFileMb / 1024} GiB` : `${l.maxFileMb} MiB`} a file`);
  });
  const refreshBtn = h('button', { type: 'button', class: 'btn btn-small', title: 'Reload this folder' }, 'Refresh');
  const nameInput = h('input', { type: 'text', class: 'inline-input', 'aria-label': 'Name', spellcheck: 'false', autocomplete: 'off' });
  const nameOk = h('button', { type: 'submit', class: 'btn btn-small btn-primary' }, 'Create');
  const nameCancel = h('button', { type: 'button', class: 'btn btn-small' }, 'Cancel');
  const nameForm = h('form', { class: 'inline-form', hidden: true, 'data-testid': 'name-form' }, nameInput, nameOk, nameCancel);
  let nameMode: 'folder' | 'file' = 'folder';
  const toolbar = h(
    'div',
    { class: 'files-toolbar' },
    crumbs,
    h('span', { class: 'spacer' }),
    nameForm,
    newFolderBtn,
    newFileBtn,
    uploadBtn,
    limitHint,
    refreshBtn,
    fileInput,
  );
  const message = h('div', { class: 'files-message', role: 'status', 'data-testid': 'files-message' });
  const tbody = h('tbody');
  const table = h(
    'table',
    { class: 'files-table', 'data-testid': 'files-table' },
    h(
      'thead',
      null,
      h(
        'tr',
        null,
        h('th', { scope: 'col', class: 'col-name' }, 'Name'),
        h('th', { scope: 'col', class: 'col-size' }, 'Size'),
        h('th', { scope: 'col', class: 'col-time' }, 'Modified'),
        h('th', { scope: 'col', class: 'col-mode' }, 'Mode'),
        h('th', { scope: 'col', class: 'col-actions' }, h('span', { class: 'visually-hidden' }, 'Actions')),
      ),
    ),
    tbody,
  );
  const uploads = h('ul', { class: 'uploads', 'aria-label': 'Uploads', 'data-testid': 'uploads' });
  const dropHint = h('div', { class: 'drop-hint', 'aria-hidden': 'true' }, 'Drop files to upload them here');
  const listing = h('div', { class: 'files-listing' }, table, message);

  // Editor
  const editorTitle = h('h3', { class: 'editor-title mono' });
  const editorStatus = h('span', { class: 'editor-status muted', role: 'status', 'data-testid': 'editor-status' });
  const textarea = h('textarea', { class: 'editor-text mono', spellcheck: 'false', 'aria-label': 'File contents', 'data-testid': 'editor' });
  const saveBtn = h('button', { type: 'button', class: 'btn btn-small btn-primary', 'data-testid': 'editor-save' }, 'Save');
  const closeBtn = h('button', { type: 'button', class: 'btn btn-small', 'data-testid': 'editor-close' }, 'Close');
  const editor = h(
    'div',
    { class: 'editor', hidden: true, 'data-testid': 'editor-panel' },
    h('div', { class: 'editor-head' }, editorTitle, editorStatus, h('span', { class: 'spacer' }), saveBtn, closeBtn),
    textarea,
  );

  const el = h('div', { class: 'files', 'data-testid': 'files', 'data-state': 'unavailable' }, pathForm, toolbar, scopeNote, uploads, listing, editor, dropHint);

  /** `/` › `/home/agent` › sub › folder: the home is one crumb, so it is one click away. */
  const renderCrumbs = () => {
    const items: Node[] = [];
    const crumb = (label: string, path: string, extra: Record<string, unknown> = {}) => {
      const b = h('button', { type: 'button', class: 'crumb', 'aria-current': path === cwd ? 'location' : false, ...extra }, label);
      b.addEventListener('click', () => go(path));
      return b;
    };
    const sep = () => h('span', { class: 'crumb-sep', 'aria-hidden': 'true' }, '/');
    items.push(crumb('/', '/', { 'aria-label': 'Root folder', title: '/' }));
    let base = '/';
    let rest = cwd.split('/').filter(Boolean);
    if (inHome(cwd)) {
      items.push(sep(), crumb(HOME, HOME));
      base = HOME;
      rest = cwd.slice(HOME.length).split('/').filter(Boolean);
    }
    rest.forEach((p) => {
      base = join(base, p);
      if (items.length > 1) items.push(sep());
      items.push(crumb(p, base));
    });
    replace(crumbs, items);
    pathInput.value = cwd;
    scopeNote.hidden = inHome(cwd);
    setText(scopeNote, inHome(cwd) ? '' : `Outside the home: you see and change what the sandbox's account may; the server refuses the rest.`);
  };

  const setMessage = (text: string, kind: 'info' | 'error' = 'info') => {
    message.className = `files-message files-${kind}`;
    message.setAttribute('role', kind === 'error' ? 'alert' : 'status');
    setText(message, text);
  };

  const renderRows = () => {
    const rows: HTMLElement[] = [];
    if (cwd !== '/') {
      const up = h('button', { type: 'button', class: 'file-link' }, h('span', { class: 'file-icon', 'aria-hidden': 'true' }, '↰'), '..');
      up.setAttribute('aria-label', 'Parent folder');
      up.addEventListener('click', () => go(parent(cwd)));
      rows.push(h('tr', { class: 'file-row file-up' }, h('td', { class: 'col-name' }, up), h('td'), h('td'), h('td'), h('td')));
    }
    const sorted = [...entries].sort((a, b) => {
      const da = a.type === 'dir' ? 0 : 1;
      const db = b.type === 'dir' ? 0 : 1;
      return da - db || a.name.localeCompare(b.name);
    });
    for (const e of sorted) rows.push(fileRow(e));
    replace(tbody, rows);
    if (!available) return;
    if (entries.length === 0) setMessage('This folder is empty. Drop files here or use “Upload files”.');
    else setMessage('');
  };

  const fileRow = (e: FsEntry): HTMLElement => {
    const path = join(cwd, e.name);
    const icon = e.type === 'symlink' ? '↪' : '';
    let nameCell: HTMLElement;
    if (e.type === 'dir') {
      nameCell = h('button', { type: 'button', class: 'file-link' }, h('span', { class: 'file-icon icon-dir', 'aria-hidden': 'true' }), h('span', { class: 'file-name' }, e.name));
      nameCell.addEventListener('click', () => go(path));
    } else {
      nameCell = h('span', { class: 'file-plain' }, h('span', { class: `file-icon icon-${e.type}`, 'aria-hidden': 'true' }, icon), h('span', { class: 'file-name' }, e.name));
    }
    nameCell.title = e.name;
    const acts: HTMLElement[] = [];
    if (e.type === 'file' || e.type === 'symlink') {
      acts.push(
        h('a', { class: 'btn btn-small', href: api.readUrl(agentId, path), download: e.name, 'aria-label': `Download ${e.name}`, 'data-act': 'download' }, 'Download'),
      );
      if (e.type === 'file' && e.size <= EDIT_LIMIT) {
        const edit = h('button', { type: 'button', class: 'btn btn-small', 'aria-label': `Edit ${e.name}`, 'data-act': 'edit' }, 'Edit');
        edit.addEventListener('click', () => void openEditor(path));
        acts.push(edit);
      }
    }
    const del = h('button', { type: 'button', class: 'btn btn-small btn-danger-ghost', 'aria-label': `Delete ${e.name}`, 'data-act': 'delete' }, 'Delete');
    del.addEventListener('click', () => void remove(e, path));
    acts.push(del);
    return h(
      'tr',
      { class: `file-row file-${e.type}`, 'data-name': e.name },
      h('td', { class: 'col-name' }, nameCell),
      h('td', { class: 'col-size' }, e.type === 'dir' ? '—' : formatBytes(e.size)),
      h('td', { class: 'col-time' }, formatTime(e.mtime)),
      h('td', { class: 'col-mode mono' }, modeString(e.mode, e.type)),
      h('td', { class: 'col-actions' }, h('div', { class: 'file-actions' }, acts)),
    );
  };

  const load = async () => {
    renderCrumbs();
    if (!available) return;
    const seq = ++loadSeq;
    el.classList.add('loading');
    el.dataset.state = 'loading';
    try {
      const list = await api.list(agentId, cwd);
      if (seq !== loadSeq) return;
      entries = Array.isArray(list) ? list : [];
      loadedOnce = true;
      renderRows();
      el.dataset.state = 'ready';
    } catch (e) {
      if (seq !== loadSeq) return;
      entries = [];
      renderRows();
      setMessage(`Cannot open “${cwd}”: ${errMsg(e)}`, 'error');
      el.dataset.state = 'error';
    } finally {
      if (seq === loadSeq) el.classList.remove('loading');
    }
  };

  const go = (path: string) => {
    if (editing && !closeEditor()) return;
    cwd = path;
    entries = [];
    replace(tbody);
    setMessage('Loading…');
    void load();
  };

  const remove = async (e: FsEntry, path: string) => {
    const ok = await confirmDialog({
      title: `Delete “${e.name}”?`,
      body: [
        e.type === 'dir' ? 'The folder ' : 'The file ',
        h('strong', { class: 'mono' }, path),
        e.type === 'dir' ? ' and everything in it will be deleted.' : ' will be deleted.',
      ],
      confirmLabel: 'Delete',
      danger: true,
    });
    if (!ok) return;
    try {
      await api.remove(agentId, path);
      toast(`Deleted ${e.name}`, 'info');
    } catch (err) {
      toast(`Delete ${e.name}: ${errMsg(err)}`);
    }
    void load();
  };

  // New folder / new file
  const openNameForm = (mode: 'folder' | 'file') => {
    nameMode = mode;
    nameForm.hidden = false;
    nameOk.textContent = mode === 'folder' ? 'Create folder' : 'Create file';
    nameInput.placeholder = mode === 'folder' ? 'folder name' : 'file name';
    nameInput.value = '';
    nameInput.focus();
  };
  const closeNameForm = () => {
    nameForm.hidden = true;
  };
  newFolderBtn.addEventListener('click', () => openNameForm('folder'));
  newFileBtn.addEventListener('click', () => openNameForm('file'));
  nameCancel.addEventListener('click', closeNameForm);
  nameInput.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') closeNameForm();
  });
  nameForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    const name = nameInput.value.trim();
    if (!name) return;
    const path = join(cwd, name);
    nameOk.disabled = true;
    try {
      if (nameMode === 'folder') {
        await api.mkdir(agentId, path);
        closeNameForm();
        await load();
      } else {
        await api.writeText(agentId, path, '');
        closeNameForm();
        await load();
        await openEditor(path);
      }
    } catch (err) {
      toast(`${nameMode === 'folder' ? 'New folder' : 'New file'} “${name}”: ${errMsg(err)}`);
    } finally {
      nameOk.disabled = false;
    }
  });

  // Uploads
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
  const enqueue = (files: File[]) => {
    if (!available) {
      toast('Uploads need a running agent. Start it first.');
      return;
    }
    const dir = cwd;
    for (const file of files) {
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
      uploads.appendChild(item);
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
          if (cwd === dir) void load();
          setTimeout(() => item.classList.contains('upload-done') && dismiss(), 8000);
        } catch (err) {
          item.className = 'upload upload-failed';
          setText(text, errMsg(err));
          text.setAttribute('role', 'alert');
          setText(cancel, 'Dismiss');
          cancel.setAttribute('aria-label', `Dismiss ${file.name}`);
        }
      });
    }
    pump();
  };
  uploadBtn.addEventListener('click', () => fileInput.click());
  refreshBtn.addEventListener('click', () => void load());
  fileInput.addEventListener('change', () => {
    enqueue([...(fileInput.files ?? [])]);
    fileInput.value = '';
  });
  let dragDepth = 0;
  const hasFiles = (e: DragEvent) => !!e.dataTransfer && [...e.dataTransfer.types].includes('Files');
  el.addEventListener('dragenter', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    dragDepth++;
    el.classList.add('dragging');
  });
  el.addEventListener('dragover', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    e.dataTransfer!.dropEffect = 'copy';
  });
  el.addEventListener('dragleave', () => {
    dragDepth = Math.max(0, dragDepth - 1);
    if (dragDepth === 0) el.classList.remove('dragging');
  });
  el.addEventListener('drop', (e) => {
    e.preventDefault();
    dragDepth = 0;
    el.classList.remove('dragging');
    const files = [...(e.dataTransfer?.files ?? [])];
    if (files.length) enqueue(files);
  });

  // Editor
  const dirty = () => !!editing && textarea.value !== editing.original;
  const openEditor = async (path: string) => {
    if (editing && !closeEditor()) return;
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
      setText(editorTitle, path);
      setText(editorStatus, '');
      listing.hidden = true;
      editor.hidden = false;
      textarea.focus();
    } catch (err) {
      toast(`Open ${path}: ${errMsg(err)}`);
    }
  };
  const save = async () => {
    if (!editing) return;
    const cur = editing;
    const text = textarea.value;
    saveBtn.disabled = true;
    setText(editorStatus, 'Saving…');
    try {
      await api.writeText(agentId, cur.path, text);
      if (editing === cur) cur.original = text;
      setText(editorStatus, `Saved at ${new Date().toLocaleTimeString()}`);
    } catch (err) {
      setText(editorStatus, `Not saved: ${errMsg(err)}`);
    } finally {
      saveBtn.disabled = false;
    }
  };
  /** Returns false when the person chose to keep editing. */
  function closeEditor(): boolean {
    if (dirty() && !window.confirm('Discard the unsaved changes?')) return false;
    editing = null;
    textarea.value = '';
    editor.hidden = true;
    listing.hidden = false;
    void load();
    return true;
  }
  saveBtn.addEventListener('click', () => void save());
  closeBtn.addEventListener('click', () => closeEditor());
  textarea.addEventListener('input', () => setText(editorStatus, dirty() ? 'Unsaved changes' : ''));
  textarea.addEventListener('keydown', (e) => {
    if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === 's') {
      e.preventDefault();
      void save();
    }
  });

  pathForm.addEventListener('submit', (e) => {
    e.preventDefault();
    if (!pathInput.value.trim()) return;
    go(resolvePath(pathInput.value, cwd));
  });
  pathInput.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') pathInput.value = cwd;
  });

  renderCrumbs();

  return {
    el,
    load: () => void load(),
    setAvailable(ok, why) {
      const was = available;
      available = ok;
      for (const b of [uploadBtn, newFolderBtn, newFileBtn, refreshBtn]) b.disabled = !ok;
      if (!ok) {
        el.dataset.state = 'unavailable';
        if (!loadedOnce) replace(tbody);
        setMessage(why);
      } else if (!was) {
        if (!loadedOnce) setMessage('Loading…');
        void load();
      }
    },
    dispose() {
      loadSeq++;
    },
  };
}
