/**
 * The "Resilience" sidebar panel: renders the poller's newest state with the pure
 * `renderPanel`, and refreshes checkpoint ages every second while visible, between
 * polls, without asking the server.
 */
import { Message } from '@lumino/messaging';

import { resilienceIcon } from './icons';
import { PollConsumer } from './consumer';
import type { Poller } from './polling';
import { IResilience, viewStateOf } from './state';
import { updateAges } from './view/runs';
import { IPanelActions, renderPanel } from './view/panel';

/** The panel's widget id (and its layout-restorer key). */
export const PANEL_ID = 'ft-notebook-panel';

export namespace ResiliencePanel {
  export interface IOptions {
    poller: Poller<IResilience>;
    /** What the buttons do; `disabledReason` is asked again at every render. */
    actions: Omit<IPanelActions, 'disabledReason'>;
    /** Why snapshot/restore cannot run now (no notebook or kernel), or null. */
    snapshotDisabledReason: () => string | null;
    now?: () => number;
  }
}

export class ResiliencePanel extends PollConsumer {
  constructor(private readonly options: ResiliencePanel.IOptions) {
    super(options.poller, 'panel');
    this.id = PANEL_ID;
    this.addClass('jp-ft-panel');
    this.title.icon = resilienceIcon;
    this.title.caption = 'Resilience';
    this._now = options.now ?? Date.now;
    options.poller.changed.connect(() => this.update(), this);
    this.update();
  }

  protected onUpdateRequest(msg: Message): void {
    super.onUpdateRequest(msg);
    const actions = {
      ...this.options.actions,
      disabledReason: this.options.snapshotDisabledReason()
    };
    const content = renderPanel(viewStateOf(this.options.poller.result), this._now(), actions);
    // a re-render every poll must not close what the user opened
    const opened = new Set(
      Array.from(this.node.querySelectorAll('details[open]')).map(d => d.className)
    );
    content.querySelectorAll('details').forEach(d => {
      d.open = opened.has(d.className);
    });
    this.node.replaceChildren(content);
  }

  protected onTick(): void {
    updateAges(this.node, this._now());
  }

  private readonly _now: () => number;
}
