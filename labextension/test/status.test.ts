import { describe, expect, it } from 'vitest';

import { ApiError } from '../src/api';
import type { IClusterView, IViewState } from '../src/state';
import { formatStatus, summarizeStatus } from '../src/status';
import type { ServiceModel } from '../src/models';
import { cluster, NOW_MS, run, service, worker } from './fixtures';

describe('formatStatus', () => {
  it('formats healthy/total counts', () => {
    expect(formatStatus(3, 3)).toBe('FT ● 3/3');
    expect(formatStatus(0, 2)).toBe('FT ● 0/2');
  });

  it('appends the newest checkpoint age', () => {
    expect(formatStatus(3, 3, 12.9)).toBe('FT ● 3/3 · ckpt 12 s ago');
    expect(formatStatus(2, 3, 125)).toBe('FT ● 2/3 · ckpt 2 min ago');
    expect(formatStatus(1, 1, null)).toBe('FT ● 1/1');
  });

  it('rejects impossible counts', () => {
    expect(() => formatStatus(4, 3)).toThrow(RangeError);
    expect(() => formatStatus(-1, 3)).toThrow(RangeError);
    expect(() => formatStatus(1.5, 3)).toThrow(RangeError);
  });
});

describe('summarizeStatus', () => {
  const view = (clusters: IClusterView[], runs = [run()]): IViewState => ({
    data: { clusters, runs, snapshots: null },
    error: null,
    retryInMs: 2000
  });
  const healthyCluster = (name: string, n: number): IClusterView => ({
    cluster: cluster({ name }),
    workers: Array.from({ length: n }, (_, i) => worker({ name: `w${i}` })),
    error: null,
    services: []
  });

  it('counts healthy workers over all clusters with the newest checkpoint age', () => {
    const s = summarizeStatus(view([healthyCluster('a', 2), healthyCluster('b', 1)]), NOW_MS);
    expect(s).toMatchObject({ kind: 'ok', healthy: 3, total: 3, text: 'FT ● 3/3 · ckpt 12 s ago' });
  });

  it('is degraded when a worker is lost or hung', () => {
    const c: IClusterView = {
      cluster: cluster(),
      workers: [worker(), worker({ name: 'w1', state: 'lost' }), worker({ name: 'w2', state: 'hung' })],
      error: null,
      services: []
    };
    const s = summarizeStatus(view([c], []), NOW_MS);
    expect(s).toMatchObject({ kind: 'degraded', healthy: 1, total: 3, text: 'FT ● 1/3' });
  });

  it('is degraded when a running run is not healthy, though all workers are', () => {
    const s = summarizeStatus(view([healthyCluster('a', 2)], [run({ health: 'DEGRADED' })]), NOW_MS);
    expect(s.kind).toBe('degraded');
  });

  it('adds the services, and is degraded while one is not healthy', () => {
    const withServices = (...services: ServiceModel[]): IClusterView => ({
      ...healthyCluster('a', 2),
      services
    });
    const ok = summarizeStatus(view([withServices(service(), service({ name: 'b' }))], []), NOW_MS);
    expect(ok).toMatchObject({ kind: 'ok', text: 'FT ● 2/2 · svc 2' });
    const one = summarizeStatus(
      view([withServices(service(), service({ name: 'b', health: 'DEGRADED' }))], []),
      NOW_MS
    );
    expect(one).toMatchObject({ kind: 'degraded', text: 'FT ● 2/2 · svc 1/2 DEGRADED' });
    expect(one.title).toContain('b DEGRADED');
    const worst = summarizeStatus(
      view([withServices(service({ health: 'FALLBACK' }), service({ name: 'b', health: 'DEGRADED' }))], []),
      NOW_MS
    );
    expect(worst.text).toBe('FT ● 2/2 · svc 0/2 FALLBACK');
  });

  it('counts the registered workers of an unreachable cluster as not healthy', () => {
    const down: IClusterView = {
      cluster: cluster({ workers: { w0: 1, w1: 2 } }),
      workers: null,
      error: new ApiError('unreachable', 'down', 503),
      services: []
    };
    const s = summarizeStatus(view([healthyCluster('a', 1), down], []), NOW_MS);
    expect(s).toMatchObject({ kind: 'degraded', healthy: 1, total: 3 });
  });

  it('takes the newest checkpoint over running runs only', () => {
    const runs = [
      run({ name: 'old', checkpoint_time: NOW_MS / 1000 - 300 }),
      run({ name: 'done', state: 'COMPLETED', checkpoint_time: NOW_MS / 1000 - 1 }),
      run({ name: 'new', checkpoint_time: NOW_MS / 1000 - 5 })
    ];
    const s = summarizeStatus(view([healthyCluster('a', 1)], runs), NOW_MS);
    expect(s.text).toBe('FT ● 1/1 · ckpt 5 s ago');
  });

  it('counts no checkpoint age of a run whose cluster is gone', () => {
    // issue 33: after ft.down the status bar went on counting the dead run's checkpoint
    const runs = [
      run({ name: 'gone', cluster_gone: true, checkpoint_time: NOW_MS / 1000 - 9 }),
      run({ name: 'elsewhere', health: 'DEGRADED', cluster_gone: true })
    ];
    const s = summarizeStatus(view([healthyCluster('a', 1)], runs), NOW_MS);
    expect(s).toMatchObject({ kind: 'ok', text: 'FT ● 1/1' });
    expect(summarizeStatus(view([], runs), NOW_MS)).toMatchObject({ kind: 'none', text: 'FT –' });
  });

  it('says FT – without clusters', () => {
    const s = summarizeStatus(view([], []), NOW_MS);
    expect(s).toMatchObject({ kind: 'none', healthy: 0, total: 0, text: 'FT –' });
  });

  it('shows an error state with the message as tooltip', () => {
    const error = new ApiError('server-extension-missing', 'enable it', 404);
    const s = summarizeStatus({ data: null, error, retryInMs: 4000 }, NOW_MS);
    expect(s).toMatchObject({ kind: 'error', text: 'FT ⚠', title: 'enable it' });
  });
});
