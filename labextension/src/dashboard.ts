/**
 * Dashboards of one run or one service, docked in the main area like any tab: the
 * plots over time, larger, with the state (or tier) and its reason. Each polls its own
 * history route (`runs/RUN/history`, `services/SERVICE/history`) with lumino's `Poll`,
 * only while it is visible.
 */
import { Message } from '@lumino/messaging';

import type { ApiError } from './api';
import { PollConsumer } from './consumer';
import { formatLoss, formatRto } from './format';
import { renderPlots, runPlotSpecs, servicePlotSpecs } from './history';
import type { RunHistoryModel, ServiceHistoryModel } from './models';
import { Poller } from './polling';
import { asApiError } from './state';
import { h, modClass } from './view/dom';
import { progressText, shownState } from './view/runs';

/** What the dashboard shows: the newest history, and the newest error if any. */
abstract class HistoryDashboard<T> extends PollConsumer {
  constructor(
    protected readonly poller: Poller<T>,
    kind: string
  ) {
    super(poller, 'dashboard');
    this.addClass('jp-ft-dashboard-view');
    this.addClass(`jp-ft-${kind}-dashboard`);
    poller.changed.connect(() => this.update(), this);
  }

  protected abstract render(history: T): HTMLElement[];

  protected onUpdateRequest(msg: Message): void {
    super.onUpdateRequest(msg);
    const result = this.poller.result;
    const error: ApiError | null = result?.error ? asApiError(result.error) : null;
    const children: HTMLElement[] = [];
    if (error !== null) {
      children.push(h('div', { class: 'jp-ft-message', 'data-kind': 'error', role: 'status' }, error.message));
    }
    if (result?.value) {
      children.push(...this.render(result.value));
    } else if (error === null) {
      children.push(h('div', { class: 'jp-ft-message', 'data-kind': 'loading' }, 'Loading…'));
    }
    this.node.replaceChildren(...children);
  }

  protected onTick(): void {
    // the plots move when the poll brings new points, not with the clock
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    super.dispose();
    this.poller.dispose();
  }
}

/** A training run: state and reason, loss (log axis) and samples/s by step, recoveries. */
export class RunDashboard extends HistoryDashboard<RunHistoryModel> {
  constructor(readonly run: string, fetch: () => Promise<RunHistoryModel>) {
    super(new Poller({ fetch, name: `ft-notebook-run-${run}` }), 'run');
    this.update();
  }

  protected render(history: RunHistoryModel): HTMLElement[] {
    const { run } = history;
    const state = shownState(run);
    const last = history.points[history.points.length - 1];
    return [
      h(
        'div',
        { class: 'jp-ft-dashboard-head', 'data-run': run.name, 'data-state': state },
        h('span', { class: 'jp-ft-dashboard-name' }, run.name),
        h('span', { class: `jp-ft-badge jp-ft-run-state ${modClass(state)}` }, state),
        run.health !== null &&
          h('span', { class: `jp-ft-badge jp-ft-run-health ${modClass(run.health)}` }, run.health),
        h('span', { class: 'jp-ft-dashboard-reason' }, history.reason || 'no reason told')
      ),
      h(
        'div',
        { class: 'jp-ft-dashboard-stats' },
        h('span', {}, progressText(run)),
        h('span', {}, `loss ${formatLoss(run.loss)}`),
        last !== undefined && last.samples_per_s !== null && h('span', {}, `${last.samples_per_s.toFixed(0)} samples/s`),
        run.world_size !== null && h('span', {}, `${run.world_size} worker(s)`),
        h('span', {}, `${run.recoveries.length} recover${run.recoveries.length === 1 ? 'y' : 'ies'}`)
      ),
      h('div', { class: 'jp-ft-dashboard-plots' }, ...renderPlots(runPlotSpecs(history))),
      run.recoveries.length > 0
        ? h(
            'ul',
            { class: 'jp-ft-recoveries' },
            ...run.recoveries.map(r =>
              h('li', { class: 'jp-ft-recovery' }, `${r.cause} · ${formatRto(r.rto_s)} · ${r.steps_lost} step(s) lost · ${r.workers_before} → ${r.workers_after} workers`)
            )
          )
        : h('div', { class: 'jp-ft-dashboard-none' }, 'No recovery yet.')
    ];
  }
}

/** A service: tier and reason, requests/s, p99 latency and tier over time, replicas. */
export class ServiceDashboard extends HistoryDashboard<ServiceHistoryModel> {
  constructor(
    readonly cluster: string,
    readonly service: string,
    fetch: () => Promise<ServiceHistoryModel>,
    private readonly now: () => number = Date.now
  ) {
    super(new Poller({ fetch, name: `ft-notebook-service-${service}` }), 'service');
    this.update();
  }

  protected render(history: ServiceHistoryModel): HTMLElement[] {
    const { service } = history;
    return [
      h(
        'div',
        { class: 'jp-ft-dashboard-head', 'data-service': service.name, 'data-health': service.health },
        h('span', { class: 'jp-ft-dashboard-name' }, `${service.name} · ${service.cluster}`),
        h('span', { class: `jp-ft-badge ${modClass(service.health)}` }, service.health),
        h('span', { class: 'jp-ft-dashboard-reason' }, service.reason)
      ),
      h(
        'div',
        { class: 'jp-ft-dashboard-stats' },
        h('span', {}, `${service.ready}/${service.wanted} replicas ready`),
        ...service.replicas.map(r =>
          h('span', { class: `jp-ft-replica ${modClass(r.state)}` }, `${r.replica} ${r.state}${r.worker ? ` on ${r.worker}` : ''}`)
        )
      ),
      h(
        'div',
        { class: 'jp-ft-dashboard-plots' },
        ...renderPlots(servicePlotSpecs(history, this.now() / 1000))
      )
    ];
  }
}
