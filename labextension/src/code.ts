/**
 * The Python code the commands run: `%ft` magic lines and the dashboard cell. Values
 * from the UI (run and snapshot names) only ever enter code as escaped literals.
 */
import { pythonString } from './format';

/** A value the UI cannot put into code; the message says what to do instead. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/**
 * Python code that loads the extension (a no-op when it already is) and runs
 * `%ft <line>`. The magic is called directly: `run_line_magic` would expand `{...}`
 * and `$name` in the line first.
 */
export function ftMagicCode(line: string): string {
  return (
    'get_ipython().extension_manager.load_extension("ft_notebook")\n' +
    `get_ipython().find_line_magic("ft")(${pythonString(line)})`
  );
}

/** Snapshot names the `%ft restore NAME` line takes as they are, without quoting. */
const PLAIN_NAME = /^[A-Za-z0-9_.-]+$/;

/** The `%ft` line that restores `name`, or the newest snapshot without one. */
export function restoreLine(name?: string): string {
  if (name === undefined) {
    return 'restore';
  }
  if (!PLAIN_NAME.test(name)) {
    throw new UsageError(
      `The snapshot name ${JSON.stringify(name)} has characters a magic line cannot ` +
        'take; run `%ft restore` in a cell with the name quoted.'
    );
  }
  return `restore ${name}`;
}

/** The code cell `ft-notebook:open-dashboard` inserts for `run`. */
export function dashboardCode(run: string): string {
  return `import ft_notebook as ft\nft.attach(${pythonString(run)}).dashboard()`;
}
