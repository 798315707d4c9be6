/**
 * Pure text formatting shared by the panel, the status bar and the commands: ages,
 * sizes, recovery times, and run names as Python string literals.
 */

/**
 * A duration in words short enough for a tile: `12 s`, `3 min`, `2 h`, `4 d`.
 * Negative durations (a clock slightly ahead of ours) read as `0 s`.
 */
export function formatAge(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  if (s < 3600) {
    return `${Math.floor(s / 60)} min`;
  }
  if (s < 86400) {
    return `${Math.floor(s / 3600)} h`;
  }
  return `${Math.floor(s / 86400)} d`;
}

/** Seconds since `epochSeconds` (a server timestamp) at `nowMs` (a browser clock). */
export function secondsSince(epochSeconds: number, nowMs: number): number {
  return nowMs / 1000 - epochSeconds;
}

/** Bytes in the units the `%ft` magics print: `512 B`, `1.5 KB`, `2.0 GB`. */
export function formatBytes(n: number): string {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${Math.round(value)} B` : `${value.toFixed(1)} ${units[unit]}`;
}

/** A recovery time objective: `RTO 0.06 s`, `RTO 12.3 s`. */
export function formatRto(seconds: number): string {
  return `RTO ${seconds < 10 ? seconds.toFixed(2) : seconds.toFixed(1)} s`;
}

/** A loss with four significant digits, or `–` when there is none yet. */
export function formatLoss(loss: number | null): string {
  return loss === null ? '–' : loss.toPrecision(4);
}

/**
 * `text` as a Python string literal that evaluates back to `text`, whatever it holds.
 *
 * Quotes and backslashes are escaped; every control character, and the Unicode line
 * and paragraph separators that editors may show as line breaks, become `\xNN` /
 * `\uNNNN` escapes, so the literal always stays on one line of the cell.
 */
export function pythonString(text: string): string {
  let out = '"';
  for (const ch of text) {
    const code = ch.codePointAt(0) as number;
    if (ch === '\\' || ch === '"') {
      out += `\\${ch}`;
    } else if (ch === '\n') {
      out += '\\n';
    } else if (ch === '\r') {
      out += '\\r';
    } else if (ch === '\t') {
      out += '\\t';
    } else if (code < 0x20 || code === 0x7f || (code >= 0x80 && code < 0xa0)) {
      out += `\\x${code.toString(16).padStart(2, '0')}`;
    } else if (code === 0x2028 || code === 0x2029 || (code >= 0xd800 && code <= 0xdfff)) {
      // separators and lone surrogates (which `for … of` yields alone)
      out += `\\u${code.toString(16).padStart(4, '0')}`;
    } else {
      out += ch;
    }
  }
  return `${out}"`;
}
