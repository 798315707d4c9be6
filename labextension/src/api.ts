/**
 * Client of the ft_notebook server extension's REST API (`<baseUrl>/ft-notebook/api/`).
 *
 * Every request goes through `ServerConnection.makeRequest`, which adds the token and
 * the XSRF header the server's `APIHandler` wants. Failures become an `ApiError` whose
 * `kind` tells the UI what to say: a 404 on `clusters` can only mean the server
 * extension is not there (the route never answers 404 itself), a 503 for a cluster
 * means its scheduler does not answer.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type {
  ClusterModel,
  ClusterStoppedModel,
  ErrorModel,
  KernelUsageModel,
  RunHistoryModel,
  RunModel,
  ServiceHistoryModel,
  ServiceModel,
  SnapshotModel,
  WorkerStatus
} from './models';

/** The path of every route, below the server's base URL. */
export const API_PATH = 'ft-notebook/api';

/** What the server told us to enable when the routes are missing. */
export const SERVER_EXTENSION_MISSING_MESSAGE =
  'The ft_notebook server extension is not enabled. Run ' +
  '`jupyter server extension enable ft_notebook` and restart JupyterLab.';

/**
 * Why a request failed, in the terms the UI needs:
 * - `server-extension-missing`: the routes are not registered (404 on `clusters`);
 * - `unreachable`: the cluster's scheduler does not answer (503);
 * - `network`: no HTTP answer at all (server down, connection refused);
 * - `http`: any other status, with the server's `ErrorModel` message.
 */
export type ApiErrorKind = 'server-extension-missing' | 'unreachable' | 'network' | 'http';

/** A failed API request. `message` is meant for the user as it is. */
export class ApiError extends Error {
  constructor(
    readonly kind: ApiErrorKind,
    message: string,
    readonly status: number | null = null,
    readonly reason: string = ''
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

/**
 * The `ApiError` for an HTTP error answer of `route`.
 *
 * @param route - the route asked, e.g. `clusters` or `workers`
 * @param status - the HTTP status code
 * @param body - the response body as text (an `ErrorModel` JSON from our handlers;
 *   an HTML page when the route does not exist)
 */
export function errorFromResponse(route: string, status: number, body: string): ApiError {
  const model = parseErrorModel(body);
  if (status === 404 && model === null) {
    // our handlers' 404s (no such cluster) carry an ErrorModel; a route the server
    // does not have at all answers with an HTML page
    return new ApiError('server-extension-missing', SERVER_EXTENSION_MISSING_MESSAGE, status);
  }
  const message =
    model?.message ||
    `The server answered ${status} to GET ${API_PATH}/${route}; see the JupyterLab ` +
      'server log for the reason.';
  return new ApiError(status === 503 ? 'unreachable' : 'http', message, status, model?.reason ?? '');
}

function parseErrorModel(body: string): ErrorModel | null {
  try {
    const parsed: unknown = JSON.parse(body);
    if (parsed && typeof parsed === 'object' && typeof (parsed as ErrorModel).message === 'string') {
      return parsed as ErrorModel;
    }
  } catch {
    // not JSON: a proxy's or tornado's HTML error page
  }
  return null;
}

/** Typed requests to the server extension's routes. */
export class FtApi {
  constructor(
    private readonly settings: ServerConnection.ISettings = ServerConnection.makeSettings()
  ) {}

  /** The user's running clusters. A 404 here means the server extension is missing. */
  clusters(): Promise<ClusterModel[]> {
    return this.get<ClusterModel[]>('clusters');
  }

  /** One cluster's workers and their health; `unreachable` when its scheduler is down. */
  workers(cluster: string): Promise<WorkerStatus[]> {
    return this.get<WorkerStatus[]>('workers', { cluster });
  }

  /** One cluster's services and their replicas. */
  services(cluster: string): Promise<ServiceModel[]> {
    return this.get<ServiceModel[]>('services', { cluster });
  }

  /** Training runs seen in the event journals, with their newest state. */
  runs(): Promise<RunModel[]> {
    return this.get<RunModel[]>('runs');
  }

  /** A run with why it is in its state and its progress over time (for plots). */
  runHistory(run: string): Promise<RunHistoryModel> {
    return this.get<RunHistoryModel>(`runs/${encodeURIComponent(run)}/history`);
  }

  /** A service with its tier and traffic over time (for plots). */
  serviceHistory(cluster: string, service: string): Promise<ServiceHistoryModel> {
    return this.get<ServiceHistoryModel>(`services/${encodeURIComponent(service)}/history`, {
      cluster
    });
  }

  /** The snapshots of the open notebook at API path `path` (e.g. `work/a.ipynb`). */
  snapshots(path: string): Promise<SnapshotModel[]> {
    return this.get<SnapshotModel[]>('snapshots', { path });
  }

  /** Start the private cluster `name` with `workers` workers (takes seconds). */
  startCluster(name: string, workers: number): Promise<ClusterModel> {
    return this.request<ClusterModel>('POST', 'clusters', {}, { name, workers });
  }

  /** Grow or shrink the running cluster `name` to `workers` workers, in place. */
  scaleCluster(name: string, workers: number): Promise<ClusterModel> {
    const route = `clusters/${encodeURIComponent(name)}/scale`;
    return this.request<ClusterModel>('POST', route, {}, { workers });
  }

  /** Stop the cluster `name`; its processes have exited when this resolves. */
  stopCluster(name: string): Promise<ClusterStoppedModel> {
    return this.request<ClusterStoppedModel>('POST', `clusters/${encodeURIComponent(name)}/stop`);
  }

  /** The resident memory of this server's kernel `kernelId`. */
  kernelUsage(kernelId: string): Promise<KernelUsageModel> {
    return this.get<KernelUsageModel>(`kernels/${encodeURIComponent(kernelId)}/usage`);
  }

  private get<T>(route: string, query: Record<string, string> = {}): Promise<T> {
    return this.request<T>('GET', route, query);
  }

  private async request<T>(
    method: 'GET' | 'POST',
    route: string,
    query: Record<string, string> = {},
    body?: unknown
  ): Promise<T> {
    const url =
      URLExt.join(this.settings.baseUrl, API_PATH, route) + URLExt.objectToQueryString(query);
    const init: RequestInit = { method };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
    }
    let response: Response;
    try {
      response = await ServerConnection.makeRequest(url, init, this.settings);
    } catch (error) {
      throw new ApiError(
        'network',
        `The Jupyter server did not answer (${String(error)}). Check that it is still ` +
          'running, then reload the page.'
      );
    }
    const text = await response.text();
    if (!response.ok) {
      throw errorFromResponse(route, response.status, text);
    }
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new ApiError(
        'http',
        `The server answered ${method} ${API_PATH}/${route} with something that is not JSON ` +
          '(a login page of a proxy?). Reload the page and log in again.'
      );
    }
  }
}
