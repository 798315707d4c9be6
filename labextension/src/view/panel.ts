/**
 * The whole panel content as a pure function of the view state: the same state always
 * gives the same DOM, so tests render it without JupyterLab.
 *
 * The panel is never empty: before data, without the server extension, after an error
 * and when nothing runs it shows a `.jp-ft-message` whose `data-kind` says which.
 */
import type { ApiError } from '../api';
import { type IViewState, servicesOf } from '../state';
import { IClusterActions, renderCluster, renderClusters } from './clusters';
import { h } from './dom';
import { IRunDismissal, renderRuns } from './runs';
import { renderServices } from './services';
import { ISnapshotActions, renderSnapshots } from './snapshots';

/** `data-kind` of the panel's message. */
export type MessageKind = 'loading' | 'no-server' | 'empty' | 'error';

/** What the panel's buttons do. */
export interface IPanelActions extends ISnapshotActions {
  openDashboard(run: string): void;
  /** Open a run's or a service's dashboard in a main-area tab. */
  openRunDashboard?(run: string): void;
  openServiceDashboard?(cluster: string, service: string): void;
  /** Start, scale and stop clusters; without them the clusters only show. */
  clusters?: IClusterActions;
  /** Finished runs the user dismissed; without it every run shows. */
  runs?: IRunDismissal;
}

/** The text users see when no cluster and no run is there. */
export const EMPTY_MESSAGE =
  'No cluster or run is running. Start one in a notebook: `ft.cluster()` starts a ' +
  'cluster, `ft.fit(...)` a fault-tolerant training run.';

/** The panel's children for `view` at time `nowMs`. */
export function renderPanel(view: IViewState, nowMs: number, actions: IPanelActions): HTMLElement {
  const root = h('div', { class: 'jp-ft-content' });
  if (view.error?.kind === 'server-extension-missing') {
    root.append(renderMessage('no-server', view.error.message));
    return root;
  }
  if (view.error !== null) {
    root.append(renderMessage('error', errorText(view.error, view.retryInMs)));
  }
  const data = view.data;
  if (data === null) {
    if (view.error === null) {
      root.append(renderMessage('loading', 'Loading clusters and runs…'));
    }
    return root;
  }
  if (data.clusters.length === 0 && data.runs.length === 0) {
    root.append(renderMessage('empty', EMPTY_MESSAGE));
  }
  if (actions.clusters) {
    // always there: it is where a cluster starts
    root.append(renderClusters(data.clusters, actions.clusters));
  } else if (data.clusters.length > 0) {
    root.append(
      h(
        'div',
        { class: 'jp-ft-clusters' },
        h('div', { class: 'jp-ft-section-title' }, 'Clusters'),
        ...data.clusters.map(view => renderCluster(view))
      )
    );
  }
  const services = servicesOf(data.clusters);
  if (services.length > 0) {
    root.append(
      renderServices(services, {
        histories: data.serviceHistories,
        openDocked: actions.openServiceDashboard?.bind(actions),
        nowMs
      })
    );
  }
  if (data.runs.length > 0) {
    root.append(
      renderRuns(
        data.runs,
        nowMs,
        actions.openDashboard,
        {
          histories: data.runHistories,
          openDocked: actions.openRunDashboard?.bind(actions)
        },
        actions.runs ?? null
      )
    );
  }
  root.append(renderSnapshots(data.snapshots, nowMs, actions));
  return root;
}

/** A `.jp-ft-message` of `kind`. */
export function renderMessage(kind: MessageKind, text: string): HTMLElement {
  return h('div', { class: 'jp-ft-message', 'data-kind': kind, role: 'status' }, text);
}

function errorText(error: ApiError, retryInMs: number): string {
  const retry = retryInMs > 0 ? ` Retrying in ${Math.round(retryInMs / 1000)} s.` : '';
  return `Could not fetch the fault-tolerance status: ${error.message}${retry}`;
}
