/**
 * Clusters as a grid of worker tiles: one tile per worker, its state as `data-state`
 * and as a `jp-ft-mod-<state>` class, so lost and hung workers stand out.
 */
import { formatAge, formatBytes } from '../format';
import type { WorkerStatus } from '../models';
import type { IClusterView } from '../state';
import { h, modClass } from './dom';

/** One `.jp-ft-cluster` with its tiles, or with the error its `workers` call gave. */
export function renderCluster(view: IClusterView): HTMLElement {
  const { cluster } = view;
  const header = h(
    'div',
    { class: 'jp-ft-cluster-header' },
    h('span', { class: 'jp-ft-cluster-name' }, cluster.name),
    h('span', { class: 'jp-ft-cluster-address' }, cluster.address),
    isWebUrl(cluster.dashboard) &&
      h(
        'a',
        {
          class: 'jp-ft-cluster-dashboard',
          href: cluster.dashboard as string,
          target: '_blank',
          rel: 'noopener noreferrer'
        },
        'Dask dashboard'
      )
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
