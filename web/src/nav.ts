// Client-side navigation (history API; the server answers every non-API path with index.html).
let renderFn: () => void = () => {};

export function setRenderer(fn: () => void): void {
  renderFn = fn;
}

export function navigate(path: string, replaceState = false): void {
  if (replaceState) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  renderFn();
}

/** A link that navigates in-page but still works with middle-click / ctrl-click. */
export function linkHandler(path: string): (e: Event) => void {
  return (e: Event) => {
    const me = e as MouseEvent;
    if (me.button !== 0 || me.metaKey || me.ctrlKey || me.shiftKey || me.altKey) return;
    e.preventDefault();
    navigate(path);
  };
}

/** A mounted page; `unmount` releases sockets, listeners and timers. */
export interface Page {
  el: HTMLElement;
  unmount?: () => void;
}
