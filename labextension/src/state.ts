/**
 * What the UI shows, fetched in one go: clusters with their workers, runs, and the
 * snapshots of the active notebook.
 *
 * Failures are kept where they happen: a cluster whose scheduler does not answer
 * carries its own error (the other clusters still show), and so do the snapshots. Only
 * when `clusters` or `runs` fail does the whole fetch fail, which makes the poller back
 * off.
 */
import { ApiError, FtApi } from './api';
import type {
  ClusterModel,
  KernelUsageModel,
  RunHistoryModel,
  RunModel,
  ServiceHistoryModel,
  ServiceModel,
  SnapshotModel,
  WorkerStatus
} from './models';
import type { IPollResult } from './polling';

/** One cluster, its workers and services, or why its workers could not be listed. */
export interface IClusterView {
  cluster: ClusterModel;
  /** Null when the `workers` call failed; see `error`. */
  workers: WorkerStatus[] | null;
  error: ApiError | null;
  /** The cluster's services; empty when it has none or they could not be listed. */
  services: ServiceModel[];
}

/** The snapshots of the active notebook, or why they could not be listed. */
export interface ISnapshotsView {
  /** The notebook's API path, e.g. `work/analysis.ipynb`. */
  path: string;
  snapshots: SnapshotModel[] | null;
  error: ApiError | null;
}

/** Everything one poll fetched. */
export interface IResilience {
  clusters: IClusterView[];
  runs: RunModel[];
  /** Null when no notebook is open. */
  snapshots: ISnapshotsView | null;
  /** The memory of the active notebook's kernel; null without one, or unread. */
  kernel?: KernelUsageModel | null;
  /** The plotted runs' histories, by run name (see `plottedRuns`); one that failed is absent. */
  runHistories?: Record<string, RunHistoryModel>;
  /** Every service's history, by `cluster/service`; one that failed is absent. */
  serviceHistories?: Record<string, ServiceHistoryModel>;
}

/** Finished runs plotted in the panel, beside every active one (the newest first). */
export const PLOTTED_FINISHED_RUNS = 3;

/** The runs whose history the panel plots: the unfinished, and the newest finished. */
export function plottedRuns(runs: RunModel[]): RunModel[] {
  const unfinished = (run: RunModel) =>
    !run.cluster_gone && run.state !== null && !['COMPLETED', 'FAILED', 'CANCELLED'].includes(run.state);
  const newestFirst = [...runs].sort((a, b) => b.updated - a.updated);
  const finished = newestFirst.filter(run => !unfinished(run)).slice(0, PLOTTED_FINISHED_RUNS);
  return [...newestFirst.filter(unfinished), ...finished];
}

/** The histories of the plotted runs and of every service, those that answered. */
async function fetchHistories(
  api: FtApi,
  runs: RunModel[],
  clusters: IClusterView[]
): Promise<Pick<IResilience, 'runHistories' | 'serviceHistories'>> {
  const none = () => null;
  const [runHistories, serviceHistories] = await Promise.all([
    Promise.all(plottedRuns(runs).map(run => api.runHistory(run.name).catch(none))),
    Promise.all(
      servicesOf(clusters).map(svc => api.serviceHistory(svc.cluster, svc.name).catch(none))
    )
  ]);
  const byRun: Record<string, RunHistoryModel> = {};
  for (const history of runHistories) {
    if (history !== null) {
      byRun[history.run.name] = history;
    }
  }
  const byService: Record<string, ServiceHistoryModel> = {};
  for (const history of serviceHistories) {
    if (history !== null) {
      byService[`${history.service.cluster}/${history.service.name}`] = history;
    }
  }
  return { runHistories: byRun, serviceHistories: byService };
}

/** What the renderers get: the newest data and the newest error, if any. */
export interface IViewState {
  /** The newest data fetched; null before the first success. */
  data: IResilience | null;
  /** The error of the newest poll, or null when it succeeded. */
  error: ApiError | null;
  /** Wait before the next poll (ms), to tell the user when it retries. */
  retryInMs: number;
}

/** Every service of every cluster, in the clusters' order. */
export function servicesOf(clusters: IClusterView[]): ServiceModel[] {
  const all: ServiceModel[] = [];
  for (const view of clusters) {
    all.push(...view.services);
  }
  return all;
}

/** The view state before anything was fetched. */
export const LOADING: IViewState = { data: null, error: null, retryInMs: 0 };

/**
 * Fetch clusters, their workers, runs and the active notebook's snapshots.
 *
 * @param notebookPath - API path of the active notebook, or null when there is none
 * @param kernelId - the id of the active notebook's kernel, or null when it has none
 * @throws ApiError when `clusters` or `runs` fail
 */
export async function fetchResilience(
  api: FtApi,
  notebookPath: string | null,
  kernelId: string | null = null
): Promise<IResilience> {
  const [clusters, runs, snapshots, kernel] = await Promise.all([
    api.clusters(),
    api.runs(),
    notebookPath === null ? null : fetchSnapshots(api, notebookPath),
    // a kernel shut down between two polls, or a server without the route, costs
    // the status bar its kernel memory, not the poll
    kernelId === null ? null : api.kernelUsage(kernelId).catch(() => null)
  ]);
  const views = await Promise.all(clusters.map(cluster => fetchCluster(api, cluster)));
  // a plot that could not be fetched costs the panel that plot, not the poll
  const histories = await fetchHistories(api, runs, views);
  return { clusters: views, runs, snapshots, kernel, ...histories };
}

async function fetchCluster(api: FtApi, cluster: ClusterModel): Promise<IClusterView> {
  // a server without the services route, or a service table that failed, costs the
  // panel its Services section, not the cluster's workers
  const services = api.services(cluster.name).catch((): ServiceModel[] => []);
  try {
    const workers = await api.workers(cluster.name);
    return { cluster, workers, error: null, services: await services };
  } catch (error) {
    return { cluster, workers: null, error: asApiError(error), services: await services };
  }
}

async function fetchSnapshots(api: FtApi, path: string): Promise<ISnapshotsView> {
  try {
    return { path, snapshots: await api.snapshots(path), error: null };
  } catch (error) {
    return { path, snapshots: null, error: asApiError(error) };
  }
}

/** Any thrown value as an `ApiError`, so the UI has one shape to show. */
export function asApiError(error: unknown): ApiError {
  if (error instanceof ApiError) {
    return error;
  }
  const message = error instanceof Error ? error.message : String(error);
  return new ApiError('http', `${message}. See the browser console for details.`);
}

/** The view state for a poll result (or for none yet). */
export function viewStateOf(result: IPollResult<IResilience> | null): IViewState {
  if (result === null) {
    return LOADING;
  }
  return {
    data: result.value,
    error: result.error === null ? null : asApiError(result.error),
    retryInMs: result.nextDelay
  };
}
