// The file browser: any folder of the sandbox by its absolute path (the home, /home/agent, first),
// a path bar, downloads, folders, drag and drop; the upload queue is uploads.ts, the text editor
// editor.ts, path handling paths.ts. Outside the home the server serves what the sandbox's account
// may reach; what it refuses is shown with the server's words.
import { api, errorMessage, type FsEntry } from './api';
import { confirmDialog, dataTable, formatBytes, formatTime, h, replace, setText, toast } from './dom';
import { EDIT_LIMIT, fileEditor } from './editor';
import { HOME, inHome, join, parent, resolvePath } from './paths';
import { uploadQueue } from './uploads';

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
  const table = dataTable(
    { class: 'files-table', 'data-testid': 'files-table' },
    [
      ['col-name', 'Name'],
      ['col-size', 'Size'],
      ['col-time', 'Modified'],
      ['col-mode', 'Mode'],
      ['col-actions', null],
    ],
    tbody,
  );
  const dropHint = h('div', { class: 'drop-hint', 'aria-hidden': 'true' }, 'Drop files to upload them here');
  const listing = h('div', { class: 'files-listing' }, table, message);

  const uploads = uploadQueue(agentId, (dir) => {
    if (cwd === dir) void load();
  });
  const editor = fileEditor(
    agentId,
    () => (listing.hidden = true),
    () => {
      listing.hidden = false;
      void load();
    },
  );

  const el = h('div', { class: 'files', 'data-testid': 'files', 'data-state': 'unavailable' }, pathForm, toolbar, scopeNote, uploads.el, listing, editor.el, dropHint);

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
        edit.addEventListener('click', () => void editor.open(path));
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
      setMessage(`Cannot open “${cwd}”: ${errorMessage(e)}`, 'error');
      el.dataset.state = 'error';
    } finally {
      if (seq === loadSeq) el.classList.remove('loading');
    }
  };

  const go = (path: string) => {
    if (editor.isOpen() && !editor.close()) return;
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
      toast(`Delete ${e.name}: ${errorMessage(err)}`);
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
        await editor.open(path);
      }
    } catch (err) {
      toast(`${nameMode === 'folder' ? 'New folder' : 'New file'} “${name}”: ${errorMessage(err)}`);
    } finally {
      nameOk.disabled = false;
    }
  });

  // Uploads
  const enqueue = (files: File[]) => {
    if (!available) {
      toast('Uploads need a running agent. Start it first.');
      return;
    }
    uploads.enqueue(files, cwd);
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
