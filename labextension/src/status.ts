/**
 * Pure helpers for the fault-tolerance status indicator.
 */

/** Glyph shown in front of the status counts. */
export const STATUS_GLYPH = '●';

/**
 * Format the fault-tolerance status shown in the JupyterLab UI.
 *
 * @param healthy - number of healthy workers/checkpoints
 * @param total - total number of workers/checkpoints
 * @returns e.g. `"FT ● 3/3"`
 */
export function formatStatus(healthy: number, total: number): string {
  if (!Number.isInteger(healthy) || !Number.isInteger(total)) {
    throw new RangeError('healthy and total must be integers');
  }
  if (healthy < 0 || total < 0 || healthy > total) {
    throw new RangeError(`invalid status counts: ${healthy}/${total}`);
  }
  return `FT ${STATUS_GLYPH} ${healthy}/${total}`;
}
