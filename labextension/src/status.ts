/**
 * Pure helpers for the status bar: from the fetched state to the fault-tolerance
 * counts, the kind (`ok`, `degraded`, `none`, `error`) and the text of the status item,
 * and to the memory item (`kernel 412.0 MB · cluster 3 workers 1.6 GB`).
 */
import { formatAge, formatBytes, secondsSince } from './format';
import type { RunModel, RunState, ServiceModel } from './models';
import { type IViewState, servicesOf } from './state';

/** Glyph shown in front of the status counts. */
export const STATUS_GLYPH = '●';

/** Shown instead of counts when there is no cluster. */
export const NO_CLUSTER_GLYPH = '–';

/** Shown when the server could not be asked. */
export const ERROR_GLYPH = '⚠';

/** Run states in which workers train and checkpoints are written. */
export const ACTIVE_RUN_STATES: ReadonlySet<RunState> = new Set<RunState>([
  'RUNNING',
  'RECOVERING',
  'STALLED'
]);

/** A worker counts as healthy in this state only (`lost` and `hung` do not). */
export const HEALTHY_WORKER_STATE = 'running';

/**
 * Format the fault-tolerance status shown in the JupyterLab UI.
 *
 * @param healthy - number of healthy workers
 * @param total - total number of workers
 * @param checkpointAgeS - seconds since the newest checkpoint of a running run, if any
 * @returns e.g. `"FT ● 3/3"` or `"FT ● 3/3 · ckpt 12 s ago"`
 */
export function formatStatus(
  healthy: number,
  total: number,
  checkpointAgeS: number | null = null
): string {
  if (!Number.isInteger(healthy) || !Number.isInteger(total)) {
    throw new RangeError('healthy and total must be integers');
  }
  if (healthy < 0 || total < 0 || healthy > total) {
    throw new RangeError(`invalid status counts: ${healthy}/${total}`);
  }
  return `FT ${STATUS_GLYPH} ${healthy}/${total}${checkpointSuffix(checkpointAgeS)}`;
}

function checkpointSuffix(checkpointAgeS: number | null): string {
  return checkpointAgeS === null ? '' : ` · ckpt ${formatAge(checkpointAgeS)} ago`;
}

/** What the status bar item shows. */
export interface IStatusSummary {
  kind: 'ok' | 'degraded' | 'none' | 'error';
  healthy: number;
  total: number;
  text: string;
  /** Tooltip: what the counts mean, or the error and what to do. */
  title: string;
}

/**
 * Summarise the view state for the status bar at time `nowMs`.
 *
 * Workers are counted over all clusters; a cluster whose workers could not be listed
 * counts its registered workers as not healthy. The checkpoint age is the newest
 * checkpoint over active runs.
 */
export function summarizeStatus(view: IViewState, nowMs: number): IStatusSummary {
  const data = view.data;
  if (view.error !== null || data === null) {
    const message = view.error?.message ?? 'Loading fault-tolerance status…';
    return {
      kind: view.error === null ? 'none' : 'error',
      healthy: 0,
      total: 0,
      text: view.error === null ? `FT ${NO_CLUSTER_GLYPH}` : `FT ${ERROR_GLYPH}`,
      title: message
    };
  }
  let healthy = 0;
  let total = 0;
  for (const view of data.clusters) {
    if (view.workers === null) {
      total += Object.keys(view.cluster.workers).length;
      continue;
    }
    total += view.workers.length;
    healthy += view.workers.filter(w => w.state === HEALTHY_WORKER_STATE).length;
  }
  const active = data.runs.filter(isActiveRun);
  const newest = newestCheckpointTime(active);
  const ageS = newest === null ? null : secondsSince(newest, nowMs);
  if (data.clusters.length === 0) {
    return {
      kind: active.length === 0 ? 'none' : runsKind(active),
      healthy,
      total,
      text: `FT ${NO_CLUSTER_GLYPH}${checkpointSuffix(ageS)}`,
      title:
        'No ft_notebook cluster is running. Start one in a notebook with ft.cluster() ' +
        'or ft.fit(...).'
    };
  }
  const services = servicesOf(data.clusters);
  const degraded = services.filter(service => service.health !== 'HEALTHY');
  const kind = healthy < total || degraded.length > 0 ? 'degraded' : runsKind(active);
  return {
    kind,
    healthy,
    total,
    text: formatStatus(healthy, total, ageS) + servicesSuffix(services.length, degraded),
    title:
      `${healthy} of ${total} workers healthy over ${data.clusters.length} ` +
      `cluster(s); ${active.length} run(s) active; ${services.length} service(s)` +
      degraded.map(service => `, ${service.name} ${service.health}`).join('') +
      '. Click for details.'
  };
}

/** ` · svc 2` with every service healthy, ` · svc 1/2 DEGRADED` (the worst) if not. */
export function servicesSuffix(count: number, unhealthy: ServiceModel[]): string {
  if (count === 0) {
    return '';
  }
  if (unhealthy.length === 0) {
    return ` · svc ${count}`;
  }
  const worst = unhealthy.some(s => s.health === 'FALLBACK') ? 'FALLBACK' : 'DEGRADED';
  return ` · svc ${count - unhealthy.length}/${count} ${worst}`;
}

/**
 * Whether a run is training now (its checkpoints age matters): its last word is an
 * active state and its cluster still runs.
 */
export function isActiveRun(run: RunModel): boolean {
  return run.state !== null && ACTIVE_RUN_STATES.has(run.state) && !run.cluster_gone;
}

function runsKind(active: RunModel[]): 'ok' | 'degraded' {
  const unhealthy = active.some(
    run => (run.health !== null && run.health !== 'HEALTHY') || run.state !== 'RUNNING'
  );
  return unhealthy ? 'degraded' : 'ok';
}

function newestCheckpointTime(runs: RunModel[]): number | null {
  const times = runs.map(r => r.checkpoint_time).filter((t): t is number => t !== null);
  return times.length === 0 ? null : Math.max(...times);
}

/** What the memory item shows; null hides it (no kernel and no cluster). */
export interface IMemorySummary {
  text: string;
  title: string;
  /** Bytes resident in the active notebook's kernel, or null without a reading. */
  kernelRss: number | null;
  /** Workers over all clusters, and the bytes resident in those that reported. */
  workers: number;
  clusterRss: number;
}

/**
 * The memory of the active notebook's kernel beside its clusters' workers', e.g.
 * `kernel 412.0 MB · cluster 3 workers 1.6 GB`; null when there is neither.
 */
export function summarizeMemory(view: IViewState): IMemorySummary | null {
  const data = view.data;
  if (data === null) {
    return null;
  }
  const kernelRss = data.kernel?.rss ?? null;
  let workers = 0;
  let clusterRss = 0;
  for (const cluster of data.clusters) {
    const listed = cluster.workers ?? [];
    workers += cluster.workers === null ? Object.keys(cluster.cluster.workers).length : listed.length;
    clusterRss += listed.reduce((sum, w) => sum + (w.rss ?? 0), 0);
  }
  if (kernelRss === null && data.clusters.length === 0) {
    return null;
  }
  const parts: string[] = [];
  const titles: string[] = [];
  if (kernelRss !== null) {
    parts.push(`kernel ${formatBytes(kernelRss)}`);
    titles.push(`The active notebook's kernel (pid ${data.kernel?.pid}) holds ${formatBytes(kernelRss)}.`);
  }
  if (data.clusters.length > 0) {
    parts.push(`cluster ${workers} worker${workers === 1 ? '' : 's'} ${formatBytes(clusterRss)}`);
    titles.push(
      `${workers} worker(s) over ${data.clusters.length} cluster(s) hold ${formatBytes(clusterRss)}.`
    );
  }
  return { text: parts.join(' · '), title: titles.join(' '), kernelRss, workers, clusterRss };
}
