/**
 * Services as rows: the tier badge (HEALTHY, DEGRADED, FALLBACK) with its reason, how
 * many replicas are ready of how many wanted, and a chip per replica with its state
 * and worker (and why, when it is not ready).
 */
import type { ReplicaModel, ServiceModel } from '../models';
import { h, modClass } from './dom';

/** The `.jp-ft-services` section for every service of every cluster. */
export function renderServices(services: ServiceModel[]): HTMLElement {
  return h(
    'div',
    { class: 'jp-ft-services' },
    h('div', { class: 'jp-ft-section-title' }, 'Services'),
    ...services.map(renderService)
  );
}

/** One `.jp-ft-service`. */
export function renderService(service: ServiceModel): HTMLElement {
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
      )
    ),
    h('div', { class: 'jp-ft-service-reason' }, service.reason),
    h('div', { class: 'jp-ft-replicas' }, ...service.replicas.map(renderReplica))
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
