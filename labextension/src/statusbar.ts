/**
 * The status bar item `FT ● 3/3 · ckpt 12 s ago`: healthy workers over all workers, and
 * the newest checkpoint of a running run. It is a poll consumer too, so the poller keeps
 * running while the status bar shows even when the panel is collapsed. Clicking it
 * opens the panel. Beside it, `MemoryStatus`: the active kernel's memory and the
 * clusters' workers'.
 */
import { Message } from '@lumino/messaging';

import { PollConsumer } from './consumer';
import type { Poller } from './polling';
import { IResilience, viewStateOf } from './state';
import { summarizeMemory, summarizeStatus } from './status';

/** The id the item is registered under with `IStatusBar`. */
export const STATUS_ITEM_ID = 'ft-notebook:status';

/** The id the memory item is registered under with `IStatusBar`. */
export const MEMORY_ITEM_ID = 'ft-notebook:memory';

export namespace ResilienceStatus {
  export interface IOptions {
    poller: Poller<IResilience>;
    /** What a click does: reveal the sidebar panel. */
    onClick: () => void;
    now?: () => number;
  }
}

export class ResilienceStatus extends PollConsumer {
  constructor(private readonly options: ResilienceStatus.IOptions) {
    super(options.poller, 'status-bar');
    this.addClass('jp-ft-status');
    this.node.setAttribute('role', 'button');
    this.node.addEventListener('click', () => options.onClick());
    this._now = options.now ?? Date.now;
    options.poller.changed.connect(() => this.update(), this);
    this.update();
  }

  protected onUpdateRequest(msg: Message): void {
    super.onUpdateRequest(msg);
    const summary = summarizeStatus(viewStateOf(this.options.poller.result), this._now());
    this.node.textContent = summary.text;
    this.node.title = summary.title;
    this.node.dataset.state = summary.kind;
    this.node.dataset.healthy = String(summary.healthy);
    this.node.dataset.total = String(summary.total);
    for (const kind of ['ok', 'degraded', 'none', 'error']) {
      this.node.classList.toggle(`jp-ft-mod-${kind}`, kind === summary.kind);
    }
  }

  protected onTick(): void {
    this.update();
  }

  private readonly _now: () => number;
}

/**
 * The memory item `kernel 412.0 MB · cluster 3 workers 1.6 GB`: the active notebook's
 * kernel beside the workers of the user's clusters, from the same poll. Hidden when
 * there is neither.
 */
export class MemoryStatus extends PollConsumer {
  constructor(private readonly poller: Poller<IResilience>) {
    super(poller, 'memory-status');
    this.addClass('jp-ft-memory');
    poller.changed.connect(() => this.update(), this);
    this.update();
  }

  protected onUpdateRequest(msg: Message): void {
    super.onUpdateRequest(msg);
    const summary = summarizeMemory(viewStateOf(this.poller.result));
    this.node.textContent = summary?.text ?? '';
    this.node.title = summary?.title ?? '';
    this.node.dataset.kernelRss = String(summary?.kernelRss ?? '');
    this.node.dataset.workers = String(summary?.workers ?? 0);
    this.node.classList.toggle('jp-ft-mod-empty', summary === null);
  }

  protected onTick(): void {
    // nothing ages between polls
  }
}
