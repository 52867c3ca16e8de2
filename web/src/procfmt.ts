// How a background process reads on the page: its name, command line, how it ended, how long it ran.
import type { Process } from './api';
import { formatDuration } from './dom';

/** The tag when it has one, else the id. */
export const procName = (p: Process): string => p.tag ?? p.id;

const PLAIN = /^[A-Za-z0-9_@%+=:,./-]+$/;

/** The command as a shell would read it back: arguments with spaces or quotes go in '…'. */
export function commandLine(argv: string[]): string {
  return argv.map((arg) => (PLAIN.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`)).join(' ');
}

/** The exit column: the code, or the signal that ended it; empty while it runs. */
export function exitText(p: Process): string {
  switch (p.state) {
    case 'running':
      return '';
    case 'exited':
      return p.exitCode == null ? '—' : String(p.exitCode);
    case 'killed':
      return `${p.signal ? `signal ${p.signal}` : 'killed'}${p.timedOut ? ' (timed out)' : ''}`;
    case 'lost':
      return '—';
  }
}

/** How long it ran, or has run so far. */
export function runTime(p: Process, now = Date.now()): number {
  const start = new Date(p.startedAt).getTime();
  const end = p.endedAt ? new Date(p.endedAt).getTime() : now;
  return end - start;
}

/** One sentence on how it ended, for the end of its output. */
export function endNote(p: Process): string {
  const after = p.endedAt ? ` after ${formatDuration(runTime(p))}` : '';
  switch (p.state) {
    case 'running':
      return 'still running';
    case 'exited':
      return `exited with code ${p.exitCode ?? '?'}${after}`;
    case 'killed':
      return `${p.timedOut ? 'timed out, ' : ''}killed by ${p.signal ? `signal ${p.signal}` : 'a signal'}${after}`;
    case 'lost':
      return 'lost: its sandbox stopped while it ran (the agent slept or was stopped)';
  }
}
