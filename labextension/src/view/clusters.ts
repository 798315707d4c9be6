/**
 * Clusters as a grid of worker tiles: one tile per worker, its state as `data-state`
 * and as a `jp-ft-mod-<state>` class, so lost and hung workers stand out. The section
 * starts a cluster, and each cluster scales (− / +) and stops; its Dask dashboard link
 * goes through the Jupyter server (jupyter-server-proxy), behind Jupyter's login.
 */
import { URLExt } from '@jupyterlab/coreutils';

import { formatAge, formatBytes } from '../format';
import type { WorkerStatus } from '../models';
import type { IClusterView } from '../state';
import { button, h, modClass } from './dom';

/** What the cluster buttons do (they ask first where it matters). */
export interface IClusterActions {
  /** The Jupyter server's base URL, e.g. `/` or `/user/ada/`. */
  baseUrl: string;
  /** Ask for a name and a number of workers, then start that cluster. */
  start(): void;
  scale(name: string, workers: number): void;
  /** Ask for confirmation, then stop the cluster. */
  stop(name: string): void;
  /** What is under way for the cluster `name` (e.g. `Stopping…`), or null. */
  busy(name: string): string | null;
  /** `Starting NAME…` while a start is under way, else null. */
  starting(): string | null;
}

/** The `.jp-ft-clusters` section: a "Start cluster" button, then every cluster. */
export function renderClusters(views: IClusterView[], actions: IClusterActions): HTMLElement {
  const starting = actions.starting();
  return h(
    'div',
    { class: 'jp-ft-clusters' },
    h(
      'div',
      { class: 'jp-ft-section-title jp-ft-clusters-title' },
      'Clusters',
      button(starting ?? 'Start cluster…', 'jp-ft-cluster-start', () => actions.start(), starting)
    ),
    ...views.map(view => renderCluster(view, actions))
  );
}

/** One `.jp-ft-cluster` with its tiles, or with the error its `workers` call gave. */
export function renderCluster(view: IClusterView, actions: IClusterActions | null = null): HTMLElement {
  const { cluster } = view;
  const dashboard = dashboardUrl(cluster.dashboard, actions?.baseUrl ?? null);
  const header = h(
    'div',
    { class: 'jp-ft-cluster-header' },
    h('span', { class: 'jp-ft-cluster-name' }, cluster.name),
    h('span', { class: 'jp-ft-cluster-address' }, cluster.address),
    dashboard !== null &&
      h(
        'a',
        {
          class: 'jp-ft-cluster-dashboard',
          href: dashboard,
          target: '_blank',
          rel: 'noopener noreferrer'
        },
        'Dask dashboard'
      ),
    actions !== null && renderControls(view, actions)
  );
  let body: HTMLElement;
  if (view.workers === null) {
    body = h(
      'div',
      { class: 'jp-ft-cluster-error', 'data-kind': view.error?.kind ?? 'http' },
      view.error?.message ?? 'The workers of this cluster could not be listed.'
    );
  } else if (view.workers.length === 0) {
    body = h(
      'div',
      { class: 'jp-ft-cluster-empty' },
      'No workers yet: they register within a few seconds of starting.'
    );
  } else {
    body = h('div', { class: 'jp-ft-tiles' }, ...view.workers.map(renderTile));
  }
  return h('section', { class: 'jp-ft-cluster', 'data-cluster': cluster.name }, header, body);
}

/** One `.jp-ft-tile` for a worker: name, state, heartbeat, memory, GPU. */
export function renderTile(worker: WorkerStatus): HTMLElement {
  const details = [
    `address ${worker.address}`,
    worker.pid !== null ? `pid ${worker.pid}` : null,
    `${worker.tasks} task(s)`,
    `${worker.restarts} restart(s)`,
    worker.gpu_temperature !== null ? `GPU ${worker.gpu_temperature} °C` : null,
    worker.gpu_ecc_uncorrected ? `${worker.gpu_ecc_uncorrected} uncorrected ECC errors` : null
  ].filter(Boolean);
  return h(
    'div',
    {
      class: `jp-ft-tile ${modClass(worker.state)}`,
      'data-worker': worker.name,
      'data-state': worker.state,
      title: details.join(' · ')
    },
    h('div', { class: 'jp-ft-tile-name' }, worker.name),
    h('div', { class: 'jp-ft-tile-state' }, worker.state),
    worker.heartbeat_age_s !== null &&
      h('div', { class: 'jp-ft-tile-heartbeat' }, `heartbeat ${formatAge(worker.heartbeat_age_s)} ago`),
    memoryText(worker) !== null && h('div', { class: 'jp-ft-tile-memory' }, memoryText(worker)),
    gpuText(worker) !== null && h('div', { class: 'jp-ft-tile-gpu' }, gpuText(worker)),
    // a restart can fall between two polls: the count says it happened all the same
    worker.restarts > 0 &&
      h('div', { class: 'jp-ft-tile-restarts' }, `restarted ${worker.restarts}×`),
    worker.cause && h('div', { class: 'jp-ft-tile-cause' }, worker.cause)
  );
}

/** `mem 1.2 GB / 8.0 GB`, `mem 1.2 GB` without a limit, or null without a reading. */
export function memoryText(worker: WorkerStatus): string | null {
  if (worker.rss === null) {
    return null;
  }
  const limit = worker.memory_limit ? ` / ${formatBytes(worker.memory_limit)}` : '';
  return `mem ${formatBytes(worker.rss)}${limit}`;
}

/** `GPU 3.0 GB / 80.0 GB · 45 %`, the parts there are, or null without a GPU reading. */
export function gpuText(worker: WorkerStatus): string | null {
  const parts: string[] = [];
  if (worker.gpu_memory_used !== null) {
    const total = worker.gpu_memory_total ? ` / ${formatBytes(worker.gpu_memory_total)}` : '';
    parts.push(`${formatBytes(worker.gpu_memory_used)}${total}`);
  }
  if (worker.gpu_utilization !== null) {
    parts.push(`${worker.gpu_utilization} %`);
  }
  return parts.length === 0 ? null : `GPU ${parts.join(' · ')}`;
}

/** Only http(s) links from the registry: never `javascript:` or other schemes. */
export function isWebUrl(url: string | null): boolean {
  if (!url) {
    return false;
  }
  try {
    return ['http:', 'https:'].includes(new URL(url).protocol);
  } catch {
    return false;
  }
}

/**
 * `− N workers +` and Stop for one cluster. A GPU cluster has one worker per GPU, so
 * it only stops; while an action is under way its buttons wait, saying which.
 */
export function renderControls(view: IClusterView, actions: IClusterActions): HTMLElement {
  const { cluster } = view;
  const count = Object.keys(cluster.workers).length;
  const busy = actions.busy(cluster.name);
  const gpu = cluster.gpus.length > 0 ? 'A GPU cluster runs one worker per GPU.' : null;
  return h(
    'span',
    { class: 'jp-ft-cluster-controls', 'data-busy': busy },
    button('−', 'jp-ft-cluster-scale-down', () => actions.scale(cluster.name, count - 1),
      busy ?? gpu ?? (count <= 1 ? 'A cluster keeps at least one worker; Stop ends it.' : null)),
    h('span', { class: 'jp-ft-cluster-count', 'data-workers': count }, `${count} worker${count === 1 ? '' : 's'}`),
    button('+', 'jp-ft-cluster-scale-up', () => actions.scale(cluster.name, count + 1), busy ?? gpu),
    button(busy ?? 'Stop', 'jp-ft-cluster-stop', () => actions.stop(cluster.name), busy)
  );
}

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]']);

/**
 * Where the dashboard link points: a dashboard on this machine's loopback through the
 * Jupyter server (`<baseUrl>proxy/<port>/status`, behind its login), any other web
 * URL as it is, and nothing for a missing one or another scheme (`javascript:`).
 */
export function dashboardUrl(url: string | null, baseUrl: string | null): string | null {
  if (!isWebUrl(url)) {
    return null;
  }
  const parsed = new URL(url as string);
  if (baseUrl === null || !LOOPBACK.has(parsed.hostname) || !parsed.port) {
    return url;
  }
  return URLExt.join(baseUrl, 'proxy', parsed.port, parsed.pathname) + parsed.search;
}
