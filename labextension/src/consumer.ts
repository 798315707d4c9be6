/**
 * A widget that tells the poller whether it is visible, so polling stops when the
 * panel is collapsed and the status bar is hidden, and resumes when either shows.
 * While visible it also ticks every second (`onTick`), for texts like "ckpt 12 s ago"
 * that age between polls.
 */
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

/** What a consumer needs of the poller. */
export interface IVisibilitySink {
  setConsumerVisible(id: string, visible: boolean): void;
}

/** How often visible consumers refresh their relative times (ms). */
export const TICK_MS = 1000;

export abstract class PollConsumer extends Widget {
  constructor(
    private readonly sink: IVisibilitySink,
    private readonly consumerId: string
  ) {
    super();
  }

  /** Called every `TICK_MS` while visible, without fetching anything. */
  protected abstract onTick(): void;

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this.report(this.isVisible);
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.update();
    this.report(this.isVisible);
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this.report(false);
  }

  protected onBeforeDetach(msg: Message): void {
    this.report(false);
    super.onBeforeDetach(msg);
  }

  dispose(): void {
    this.report(false);
    super.dispose();
  }

  private report(visible: boolean): void {
    this.sink.setConsumerVisible(this.consumerId, visible);
    if (visible && this._ticker === null) {
      this._ticker = window.setInterval(() => this.onTick(), TICK_MS);
    } else if (!visible && this._ticker !== null) {
      window.clearInterval(this._ticker);
      this._ticker = null;
    }
  }

  private _ticker: number | null = null;
}
