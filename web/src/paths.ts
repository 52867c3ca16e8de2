// Paths in the sandbox as the file browser handles them: always absolute, `/`-separated.

/** The agent's home, where the file browser opens. */
export const HOME = '/home/agent';

/** `name` in folder `dir`. */
export const join = (dir: string, name: string): string => (dir === '/' ? `/${name}` : `${dir}/${name}`);

/** The folder holding `p` (`/` for `/` and its children). */
export const parent = (p: string): string => (p.lastIndexOf('/') <= 0 ? '/' : p.slice(0, p.lastIndexOf('/')));

/** Whether `p` is the home or below it. */
export const inHome = (p: string): boolean => p === HOME || p.startsWith(`${HOME}/`);

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
