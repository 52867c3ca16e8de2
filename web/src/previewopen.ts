// Opening a preview from the UI: the port's preview (made now, or the one it has already) opened in
// a new tab through `/api/v1/previews/{pid}/open` on this origin, which signs the tab in to the
// preview's host (docs/api.md, "Ports and previews").
import { api, ApiError, type Preview, type PreviewAccess } from './api';
import { previewOf } from './previewfmt';

/** The port's preview: `created` when made now (a `token` one then carries its token, once). */
export interface Ensured {
  preview: Preview;
  created: boolean;
}

/**
 * Makes a preview of `port` with `access`, or finds the one the port has: the server answers
 * 409 naming it, and the list has it. Any other refusal is thrown as it came.
 */
export async function ensurePreview(agentId: string, port: number, access: PreviewAccess): Promise<Ensured> {
  try {
    return { preview: await api.createPreview(agentId, { port, access }), created: true };
  } catch (e) {
    if (!(e instanceof ApiError) || e.status !== 409) throw e;
    // 409 is also "too many previews" and "being destroyed": then the port has none.
    const existing = previewOf(await api.previews(agentId), port);
    if (!existing) throw e;
    return { preview: existing, created: false };
  }
}

/**
 * Opens a tab at once (a tab opened after an await may be blocked as a pop-up), then sends it to
 * the preview that `make` yields; closes it if `make` fails. The new tab gets no handle on this
 * one (`opener` is cut before it leaves this origin).
 */
export async function openInNewTab<T extends { preview: Preview }>(make: () => Promise<T>): Promise<T> {
  const tab = window.open('about:blank', '_blank');
  if (tab) tab.opener = null;
  try {
    const made = await make();
    const url = new URL(api.previewOpenUrl(made.preview.id), location.href).href;
    if (tab && !tab.closed) tab.location.replace(url);
    else window.open(url, '_blank', 'noopener');
    return made;
  } catch (e) {
    tab?.close();
    throw e;
  }
}
