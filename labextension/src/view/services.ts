/**
 * Services as rows: the tier badge (HEALTHY, DEGRADED, FALLBACK) with its reason, how
 * many replicas are ready of how many wanted, and a chip per replica with its state
 * and worker (and why, when it is not ready).
 */
import { renderPlots, servicePlotSpecs } from '../history';
import type { ReplicaModel, ServiceHistoryModel, ServiceModel } from '../models';
import { button, h, modClass } from './dom';

/** The services' histories, by `cluster/service`, and what docks a dashboard. */
export interface IServicePlots {
  histories?: Record<string, ServiceHistoryModel>;
  /** Open the service's dashboard in a main-area tab; no button without it. */
  openDocked?: (cluster: string, service: string) => void;
  /** Now, in ms since the epoch: where the tier line ends. */
  nowMs?: number;
}

/** The `.jp-ft-services` section for every service of every cluster. */
export function renderServices(services: ServiceModel[], plots: IServicePlots = {}): HTMLElement {
  return h(
    'div',
    { class: 'jp-ft-services' },
    h('div', { class: 'jp-ft-section-title' }, 'Services'),
    ...services.map(service => renderService(service, plots))
  );
}

/** One `.jp-ft-service`; with a history, requests/s and its tier over time below it. */
export function renderService(service: ServiceModel, plots: IServicePlots = {}): HTMLElement {
  const history = plots.histories?.[`${service.cluster}/${service.name}`];
  const openDocked = plots.openDocked;
  const specs =
    history === undefined
      ? []
      : servicePlotSpecs(history, (plots.nowMs ?? Date.now()) / 1000, true).filter(
          spec => spec.key !== 'latency'
        );
  return h(
    'section',
    {
      class: `jp-ft-service ${modClass(service.health)}`,
      'data-service': service.name,
      'data-health': service.health
    },
    h(
      'div',
      { class: 'jp-ft-service-head' },
      h('span', { class: 'jp-ft-service-name' }, service.name),
      h(
        'span',
        { class: `jp-ft-badge ${modClass(service.health)}`, title: service.reason },
        service.health
      ),
      h(
        'span',
        { class: 'jp-ft-service-ready' },
        `${service.ready}/${service.wanted} replicas · ${service.cluster}`
      ),
      openDocked !== undefined &&
        button('Open plots', 'jp-ft-open-service-dashboard', () =>
          openDocked(service.cluster, service.name)
        )
    ),
    h('div', { class: 'jp-ft-service-reason' }, service.reason),
    h('div', { class: 'jp-ft-replicas' }, ...service.replicas.map(renderReplica)),
    specs.length > 0 && h('div', { class: 'jp-ft-service-plots' }, ...renderPlots(specs))
  );
}

function renderReplica(replica: ReplicaModel): HTMLElement {
  const where = replica.worker === '' ? 'no worker' : `worker ${replica.worker}`;
  const why = replica.state !== 'ready' && replica.cause !== '' ? `: ${replica.cause}` : '';
  return h(
    'span',
    {
      class: `jp-ft-replica ${modClass(replica.state)}`,
      'data-replica': replica.replica,
      'data-state': replica.state,
      title: `${replica.replica} ${replica.state} on ${where}${why}`
    },
    `${replica.replica.split('/').pop() ?? replica.replica} ${replica.state}`
  );
}
