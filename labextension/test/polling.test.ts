import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

import { IPageVisibility, Poller } from '../src/polling';

/** Page visibility the test flips, calling the poller's listener like the browser. */
class FakePage implements IPageVisibility {
  isHidden = false;
  listeners = new Set<() => void>();
  hidden(): boolean {
    return this.isHidden;
  }
  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
  set(hidden: boolean): void {
    this.isHidden = hidden;
    this.listeners.forEach(l => l());
  }
}

/** A fetch that records when it was called and fails while `failing` is true. */
function recorder() {
  const calls: number[] = [];
  const state = { failing: false };
  const fetch = vi.fn(async () => {
    calls.push(Date.now());
    if (state.failing) {
      throw new Error('server down');
    }
    return calls.length;
  });
  return { calls, state, fetch };
}

describe('Poller', () => {
  let page: FakePage;
  const start = 1_000_000;

  beforeEach(() => {
    vi.useFakeTimers();
    vi.setSystemTime(start);
    // lumino's backoff draws each wait between `interval` and twice the last: take the
    // longest, so the waits are the bounds the module promises
    vi.spyOn(Math, 'random').mockReturnValue(0.999999);
    page = new FakePage();
  });

  afterEach(() => {
    vi.restoreAllMocks();
    vi.useRealTimers();
  });

  it('does not fetch until a consumer is visible', async () => {
    const { fetch } = recorder();
    const poller = new Poller({ fetch, visibility: page });
    await vi.advanceTimersByTimeAsync(10_000);
    expect(fetch).not.toHaveBeenCalled();
    poller.setConsumerVisible('panel', true);
    await vi.advanceTimersByTimeAsync(0);
    expect(fetch).toHaveBeenCalledTimes(1);
    poller.dispose();
  });

  it('fetches every 2 s while it succeeds and emits each result', async () => {
    const { calls, fetch } = recorder();
    const poller = new Poller({ fetch, visibility: page });
    const values: Array<number | null> = [];
    poller.changed.connect((_, result) => values.push(result.value));
    poller.setConsumerVisible('panel', true);
    await vi.advanceTimersByTimeAsync(6_500);
    expect(calls.map(t => t - start)).toEqual([0, 2000, 4000, 6000]);
    expect(values).toEqual([1, 2, 3, 4]);
    expect(poller.delay).toBe(2000);
    poller.dispose();
  });

  it('keeps a refresh asked for during a fetch for right after it', async () => {
    const calls: number[] = [];
    let finish: () => void = () => undefined;
    const fetch = vi.fn(() => {
      calls.push(Date.now());
      return new Promise<number>(resolve => {
        finish = () => resolve(calls.length);
      });
    });
    const poller = new Poller({ fetch, visibility: page });
    poller.setConsumerVisible('panel', true);
    await vi.advanceTimersByTimeAsync(1_000); // the first fetch is still in flight
    poller.refresh();
    await vi.advanceTimersByTimeAsync(1_500);
    finish(); // ends at 2.5 s: 2 s after its start has passed
    await vi.advanceTimersByTimeAsync(0);
    expect(calls.map(t => t - start)).toEqual([0, 2500]); // not at 4.5 s
    finish();
    poller.dispose();
  });

  it('backs off 4, 8, 16, 30, 30 s on errors and keeps the last good value', async () => {
    const { calls, state, fetch } = recorder();
    const poller = new Poller({ fetch, visibility: page });
    poller.setConsumerVisible('panel', true);
    await vi.advanceTimersByTimeAsync(0);
    expect(poller.result?.value).toBe(1);
    state.failing = true;
    await vi.advanceTimersByTimeAsync(2000 + 4000 + 8000 + 16000 + 30000 + 30000 + 1);
    const gaps = calls.slice(1).map((t, i) => t - calls[i]);
    expect(gaps).toEqual([2000, 4000, 8000, 16000, 30000, 30000]);
    expect(poller.result?.error).toBeInstanceOf(Error);
    expect(poller.result?.value).toBe(1);
    expect(poller.result?.nextDelay).toBe(30000);
    poller.dispose();
  });

  it('returns to 2 s after one success', async () => {
    const { calls, state, fetch } = recorder();
    const poller = new Poller({ fetch, visibility: page });
    state.failing = true;
    poller.setConsumerVisible('panel', true);
    await vi.advanceTimersByTimeAsync(4000 + 8000 + 1); // calls at 0, 4 s, 12 s
    expect(calls).toHaveLength(3);
    state.failing = false;
    await vi.advanceTimersByTimeAsync(16000); // the 16 s backoff, then success
    expect(poller.result?.error).toBeNull();
    expect(poller.delay).toBe(2000);
    const before = calls.length;
    await vi.advanceTimersByTimeAsync(2000);
    expect(calls).toHaveLength(before + 1);
    expect(calls[calls.length - 1] - calls[calls.length - 2]).toBe(2000);
    poller.dispose();
  });

  it('pauses while the page is hidden and fetches at once when it shows again', async () => {
    const { calls, fetch } = recorder();
    const poller = new Poller({ fetch, visibility: page });
    poller.setConsumerVisible('panel', true);
    await vi.advanceTimersByTimeAsync(2500); // calls at 0 and 2 s
    page.set(true);
    expect(poller.active).toBe(false);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(calls).toHaveLength(2);
    page.set(false);
    await vi.advanceTimersByTimeAsync(0);
    expect(calls).toHaveLength(3);
    expect(calls[2] - start).toBe(62_500);
    poller.dispose();
  });

  it('pauses when the last consumer hides; the status bar alone keeps it polling', async () => {
    const { calls, fetch } = recorder();
    const poller = new Poller({ fetch, visibility: page });
    poller.setConsumerVisible('panel', true);
    poller.setConsumerVisible('status-bar', true);
    await vi.advanceTimersByTimeAsync(100);
    poller.setConsumerVisible('panel', false);
    await vi.advanceTimersByTimeAsync(4000);
    expect(calls).toHaveLength(3); // still polling for the status bar
    poller.setConsumerVisible('status-bar', false);
    await vi.advanceTimersByTimeAsync(20_000);
    expect(calls).toHaveLength(3);
    poller.setConsumerVisible('panel', true);
    await vi.advanceTimersByTimeAsync(0);
    expect(calls).toHaveLength(4);
    poller.dispose();
  });

  it('never fetches twice within the interval, even when shown again right away', async () => {
    const { calls, fetch } = recorder();
    const poller = new Poller({ fetch, visibility: page });
    poller.setConsumerVisible('panel', true);
    await vi.advanceTimersByTimeAsync(500);
    poller.setConsumerVisible('panel', false);
    poller.setConsumerVisible('panel', true);
    poller.refresh();
    await vi.advanceTimersByTimeAsync(1000);
    expect(calls).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(500);
    expect(calls.map(t => t - start)).toEqual([0, 2000]);
    poller.dispose();
  });

  it('keeps one fetch in flight at a time and stops after dispose', async () => {
    let resolve: (v: number) => void = () => undefined;
    const fetch = vi.fn(() => new Promise<number>(r => (resolve = r)));
    const poller = new Poller({ fetch, visibility: page });
    poller.setConsumerVisible('panel', true);
    await vi.advanceTimersByTimeAsync(10_000);
    poller.refresh();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(fetch).toHaveBeenCalledTimes(1);
    resolve(1);
    await vi.advanceTimersByTimeAsync(2000);
    expect(fetch).toHaveBeenCalledTimes(2);
    poller.dispose();
    resolve(2);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(fetch).toHaveBeenCalledTimes(2);
    expect(page.listeners.size).toBe(0);
  });
});
