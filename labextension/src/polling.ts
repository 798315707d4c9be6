/**
 * One poll for everything the UI shows, so the panel and the status bar never ask the
 * server twice for the same thing: a thin wrapper over lumino's `Poll`, which does
 * the timing (one tick at a time, backoff, standby); this adds who is looking.
 *
 * - every 2 s (`interval`) while fetches succeed; after n failures in a row the wait
 *   is `interval * 2^n`, at most `maxInterval` (4 s, 8 s, 16 s, 30 s, 30 s …); one
 *   success brings it back to `interval`. A failure resolves lumino's tick with the
 *   longer wait set as the poll's frequency: lumino's own backoff grows from the
 *   previous tick's interval, which is 0 after a refresh, so a failure right after
 *   one would be retried at once;
 * - it stands by (no fetch) while the page is hidden or no consumer is visible; when
 *   a consumer shows again it fetches at once, unless it fetched less than `interval`
 *   ago, so a reopened panel never shows old data for long;
 * - `refresh()` fetches as soon as `interval` has passed since the newest fetch
 *   started; asked for while a fetch is in flight, right after it.
 */
import { IDisposable } from '@lumino/disposable';
import { IPoll, Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

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
  /** When the newest fetch ended (ms since the epoch). */
  at: number;
  /** How long the poll waits before the next fetch (ms), backoff included. */
  nextDelay: number;
}

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
    visibility?: IPageVisibility;
    /** The poll's name, for lumino's messages. */
    name?: string;
  }
}

/** Polls `fetch` while someone looks; see the module comment for the timing rules. */
export class Poller<T> implements IDisposable {
  constructor(options: Poller.IOptions<T>) {
    this._fetch = options.fetch;
    this._interval = options.interval ?? 2000;
    this._maxInterval = options.maxInterval ?? 30000;
    this._visibility = options.visibility ?? documentVisibility;
    this._poll = new Poll<void, unknown, 'standby'>({
      auto: false,
      name: options.name ?? 'ft-notebook',
      factory: () => this._once(),
      frequency: { interval: this._interval, backoff: false, max: this._maxInterval },
      linger: 0,
      standby: () => !this.active
    });
    this._poll.ticked.connect(this._onTicked, this);
    this._stopListening = this._visibility.onChange(() => this._shown());
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
    return this._result?.nextDelay ?? this._interval;
  }

  /** Whether it polls now (page visible and a consumer visible). */
  get active(): boolean {
    return !this._poll.isDisposed && !this._visibility.hidden() && this._visible.size > 0;
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /** Say whether consumer `id` (the panel, the status bar item) is visible. */
  setConsumerVisible(id: string, visible: boolean): void {
    const before = this._visible.size;
    if (visible) {
      this._visible.add(id);
    } else {
      this._visible.delete(id);
    }
    if (before === 0 && this._visible.size > 0) {
      this._shown();
    }
  }

  /** Fetch now, e.g. after the active notebook changed (after the one in flight). */
  refresh(): void {
    if (this._inFlight) {
      this._refreshAfter = true;
      return;
    }
    if (!this.active) {
      return;
    }
    const wait = this._lastStart + this._interval - Date.now();
    if (wait <= 0) {
      void this._poll.refresh();
    } else if (this._poll.state.interval > wait) {
      void this._poll.schedule({ interval: wait, phase: 'refreshed' });
    }
  }

  dispose(): void {
    if (this._poll.isDisposed) {
      return;
    }
    this._stopListening();
    this._poll.dispose();
    Signal.clearData(this);
  }

  /** A consumer or the page showed: fetch unless the newest fetch is fresh. */
  private _shown(): void {
    if (!this.active) {
      return;
    }
    if (this._poll.state.phase === 'constructed') {
      void this._poll.start();
    } else if (!this._inFlight && Date.now() - this._lastStart >= this._interval) {
      void this._poll.refresh();
    }
  }

  /** One fetch; it always resolves, a failure with the next wait set (see above). */
  private async _once(): Promise<void> {
    this._inFlight = true;
    this._lastStart = Date.now();
    let wait = this._interval;
    try {
      this._value = await this._fetch();
      this._error = null;
    } catch (error) {
      this._error = error ?? new Error('the fetch failed without a reason');
      wait = Math.min(this._poll.frequency.interval * 2, this._maxInterval);
    } finally {
      this._inFlight = false;
    }
    if (wait !== this._poll.frequency.interval) {
      this._poll.frequency = { interval: wait, backoff: false, max: this._maxInterval };
    }
  }

  private _onTicked(_: unknown, state: IPoll.State<void, unknown, 'standby'>): void {
    if (!['resolved', 'reconnected', 'rejected'].includes(state.phase)) {
      return;
    }
    this._result = {
      value: this._value,
      error: this._error,
      at: state.timestamp,
      nextDelay: state.interval
    };
    this._changed.emit(this._result);
    if (this._refreshAfter) {
      this._refreshAfter = false;
      // once lumino has scheduled this tick's successor, which the refresh replaces
      void Promise.resolve().then(() => this.refresh());
    }
  }

  private readonly _fetch: () => Promise<T>;
  private readonly _interval: number;
  private readonly _maxInterval: number;
  private readonly _visibility: IPageVisibility;
  private readonly _poll: Poll<void, unknown, 'standby'>;
  private readonly _stopListening: () => void;
  private readonly _visible = new Set<string>();
  private readonly _changed = new Signal<this, IPollResult<T>>(this);
  private _result: IPollResult<T> | null = null;
  private _value: T | null = null;
  private _error: unknown = null;
  private _lastStart = -Infinity;
  private _inFlight = false;
  private _refreshAfter = false;
}
