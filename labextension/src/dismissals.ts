/**
 * Finished runs the user dismissed from the panel, kept in the browser's
 * `localStorage` so that a reload keeps them hidden. A run is remembered by its name
 * and the time of its newest event: the same name run again (and finished again) is
 * another run and shows.
 */
import type { RunModel } from './models';
import type { IRunDismissal } from './view/runs';

/** The `localStorage` key of the dismissed runs. */
export const DISMISSED_RUNS_KEY = 'ft-notebook:dismissed-runs';

/** The most dismissals kept; the oldest go first. */
export const MAX_DISMISSED = 500;

/** The key a run is dismissed under. */
export function dismissalKey(run: RunModel): string {
  return `${run.name}@${run.updated}`;
}

export class RunDismissals implements IRunDismissal {
  /**
   * @param storage - where dismissals are kept (`window.localStorage`); null keeps
   *   them for this page only
   * @param changed - called after a dismissal or a restore, to re-render
   */
  constructor(
    private readonly storage: Pick<Storage, 'getItem' | 'setItem'> | null,
    private readonly changed: () => void = () => undefined
  ) {
    this._keys = this.load();
  }

  isDismissed(run: RunModel): boolean {
    return this._keys.includes(dismissalKey(run));
  }

  dismiss(run: RunModel): void {
    const key = dismissalKey(run);
    if (!this._keys.includes(key)) {
      this._keys = [...this._keys, key].slice(-MAX_DISMISSED);
      this.save();
    }
    this.changed();
  }

  restoreAll(): void {
    this._keys = [];
    this.save();
    this.changed();
  }

  private load(): string[] {
    try {
      const parsed: unknown = JSON.parse(this.storage?.getItem(DISMISSED_RUNS_KEY) ?? '[]');
      return Array.isArray(parsed) ? parsed.filter((k): k is string => typeof k === 'string') : [];
    } catch {
      return []; // not ours, or damaged: start afresh
    }
  }

  private save(): void {
    try {
      this.storage?.setItem(DISMISSED_RUNS_KEY, JSON.stringify(this._keys));
    } catch {
      // storage full or refused (private mode): the dismissal holds for this page
    }
  }

  private _keys: string[];
}
