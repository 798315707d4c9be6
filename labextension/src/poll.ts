/**
 * One poller for everything the UI shows, so the panel and the status bar never ask
 * the server twice for the same thing.
 *
 * Guarantees:
 * - at most one fetch in flight; the next one starts `interval` ms after the previous
 *   one ended (2 s by default), or, asked for by `refresh()` or a consumer that shows
 *   again, as soon as `interval` has passed since the previous one started (a refresh
 *   asked for while a fetch is in flight is kept for after it);
 * - after n failures in a row the wait is `interval * 2^n`, at most `maxInterval`
 *   (4 s, 8 s, 16 s, 30 s, 30 s …); one success brings it back to `interval`;
 * - nothing is fetched while the page is hidden or no consumer is visible; when one
 *   becomes visible again the poller fetches at once (unless it fetched less than
 *   `interval` ago), so a reopened panel never shows old data for long.
 *
 * Time and page visibility are injected so tests drive them (vitest fake timers patch
 * the default clock too).
 */
import type { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

/** Where the poller reads the time and sets its timer. */
export interface IClock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** Whether the browser page is visible, and a way to hear when that changes. */
export interface IPageVisibility {
  hidden(): boolean;
  /** Call `listener` on every change; returns a function that stops it. */
  onChange(listener: () => void): () => void;
}

/** What one fetch gave: its value, or the error (and the last good value kept). */
export interface IPollResult<T> {
  /** The value of the newest successful fetch, kept across failures; null before one. */
  value: T | null;
  /** What the newest fetch threw, or null when it succeeded. */
  error: unknown;
  /** When the newest fetch ended (clock ms). */
  at: number;
  /** How long the poller waits before the next fetch (ms), backoff included. */
  nextDelay: number;
}

/** Reads the real clock at call time, so vitest's fake timers take effect. */
export const systemClock: IClock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => globalThis.setTimeout(fn, ms),
  clearTimeout: handle => globalThis.clearTimeout(handle as ReturnType<typeof setTimeout>)
};

/** The page's `document.visibilityState`. */
export const documentVisibility: IPageVisibility = {
  hidden: () => typeof document !== 'undefined' && document.visibilityState === 'hidden',
  onChange: listener => {
    if (typeof document === 'undefined') {
      return () => undefined;
    }
    document.addEventListener('visibilitychange', listener);
    return () => document.removeEventListener('visibilitychange', listener);
  }
};

export namespace Poller {
  export interface IOptions<T> {
    /** Fetch everything once; reject to count a failure. */
    fetch: () => Promise<T>;
    /** Wait between fetches while they succeed (ms). Default 2000. */
    interval?: number;
    /** Longest wait while they fail (ms). Default 30000. */
    maxInterval?: number;
    clock?: IClock;
    visibility?: IPageVisibility;
  }
}

/** Polls `fetch` while someone looks; see the module comment for the timing rules. */
export class Poller<T> implements IDisposable {
  constructor(options: Poller.IOptions<T>) {
    this._fetch = options.fetch;
    this._interval = options.interval ?? 2000;
    this._maxInterval = options.maxInterval ?? 30000;
    this._clock = options.clock ?? systemClock;
    this._visibility = options.visibility ?? documentVisibility;
    this._delay = this._interval;
    this._stopListening = this._visibility.onChange(() => this._update(true));
  }

  /** Emitted after every fetch, successful or not. */
  get changed(): ISignal<this, IPollResult<T>> {
    return this._changed;
  }

  /** The newest result, or null before the first fetch ended. */
  get result(): IPollResult<T> | null {
    return this._result;
  }

  /** The wait after the newest fetch (ms): `interval`, or more while failing. */
  get delay(): number {
    return this._delay;
  }

  /** Whether the poller is polling now (page visible and a consumer visible). */
  get active(): boolean {
    return !this._disposed && !this._visibility.hidden() && this._visible.size > 0;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /**
   * Say whether consumer `id` (the panel, the status bar item) is visible. The
   * poller polls while at least one is.
   */
  setConsumerVisible(id: string, visible: boolean): void {
    const before = this._visible.size;
    if (visible) {
      this._visible.add(id);
    } else {
      this._visible.delete(id);
    }
    this._update(before === 0 && this._visible.size > 0);
  }

  /** Fetch as soon as the interval allows, e.g. after the active notebook changed. */
  refresh(): void {
    if (this._inFlight) {
      this._refreshAfter = true; // its end would overwrite the due time set now
      return;
    }
    this._update(true);
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._stopListening();
    this._clearTimer();
    Signal.clearData(this);
  }

  /**
   * Set or clear the timer for the state we are in now. `soon` moves the next fetch
   * to now, or to `interval` after the last one started if that is later.
   */
  private _update(soon = false): void {
    if (!this.active) {
      this._clearTimer();
      return;
    }
    const now = this._clock.now();
    if (soon) {
      const earliest = this._lastStart === null ? now : this._lastStart + this._interval;
      this._due = Math.min(this._due, Math.max(now, earliest));
      this._clearTimer();
    }
    if (this._inFlight || this._timer !== null) {
      return;
    }
    this._timer = this._clock.setTimeout(
      () => {
        this._timer = null;
        void this._tick();
      },
      Math.max(0, this._due - now)
    );
  }

  private async _tick(): Promise<void> {
    this._inFlight = true;
    this._lastStart = this._clock.now();
    let value: T | null = this._result?.value ?? null;
    let error: unknown = null;
    try {
      value = await this._fetch();
      this._delay = this._interval;
    } catch (e) {
      error = e ?? new Error('the fetch failed without a reason');
      this._delay = Math.min(this._delay * 2, this._maxInterval);
    }
    this._inFlight = false;
    if (this._disposed) {
      return;
    }
    const at = this._clock.now();
    this._due = at + this._delay;
    this._result = { value, error, at, nextDelay: this._delay };
    this._changed.emit(this._result);
    const soon = this._refreshAfter;
    this._refreshAfter = false;
    this._update(soon);
  }

  private _clearTimer(): void {
    if (this._timer !== null) {
      this._clock.clearTimeout(this._timer);
      this._timer = null;
    }
  }

  private readonly _fetch: () => Promise<T>;
  private readonly _interval: number;
  private readonly _maxInterval: number;
  private readonly _clock: IClock;
  private readonly _visibility: IPageVisibility;
  private readonly _stopListening: () => void;
  private readonly _visible = new Set<string>();
  private readonly _changed = new Signal<this, IPollResult<T>>(this);
  private _result: IPollResult<T> | null = null;
  private _delay: number;
  /** When the next fetch is due (clock ms); 0 before the first one: at once. */
  private _due = 0;
  private _lastStart: number | null = null;
  private _timer: unknown = null;
  private _inFlight = false;
  private _refreshAfter = false;
  private _disposed = false;
}
