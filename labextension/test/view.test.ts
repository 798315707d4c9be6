import { describe, expect, it, vi } from 'vitest';

import { ApiError, SERVER_EXTENSION_MISSING_MESSAGE } from '../src/api';
import type { IResilience, IViewState } from '../src/state';
import { isWebUrl, renderCluster, renderTile } from '../src/view/clusters';
import { EMPTY_MESSAGE, IPanelActions, renderPanel } from '../src/view/panel';
import { RECENT_FINISHED_RUNS, renderRun, renderRuns, updateAges } from '../src/view/runs';
import { renderServices } from '../src/view/services';
import { cluster, NOW_MS, recovery, replica, run, service, snapshot, worker } from './fixtures';

function actions(overrides: Partial<IPanelActions> = {}): IPanelActions {
  return {
    openDashboard: vi.fn(),
    snapshot: vi.fn(),
    restore: vi.fn(),
    disabledReason: null,
    ...overrides
  };
}

function state(data: Partial<IResilience> | null, error: ApiError | null = null): IViewState {
  const full = data === null ? null : { clusters: [], runs: [], snapshots: null, ...data };
  return { data: full, error, retryInMs: 4000 };
}

const text = (root: ParentNode, selector: string) =>
  root.querySelector(selector)?.textContent ?? null;

describe('worker tiles', () => {
  it.each([
    ['running', 'jp-ft-mod-running'],
    ['lost', 'jp-ft-mod-lost'],
    ['hung', 'jp-ft-mod-hung']
  ])('a %s worker gets data-state and class %s', (workerState, cls) => {
    const tile = renderTile(worker({ name: 'w3', state: workerState }));
    expect(tile.dataset.worker).toBe('w3');
    expect(tile.dataset.state).toBe(workerState);
    expect(tile.classList.contains('jp-ft-tile')).toBe(true);
    expect(tile.classList.contains(cls)).toBe(true);
    expect(text(tile, '.jp-ft-tile-state')).toBe(workerState);
  });

  it('shows heartbeat age and memory against its limit', () => {
    const tile = renderTile(worker({ heartbeat_age_s: 12.7 }));
    expect(text(tile, '.jp-ft-tile-name')).toBe('w0');
    expect(text(tile, '.jp-ft-tile-heartbeat')).toBe('heartbeat 12 s ago');
    expect(text(tile, '.jp-ft-tile-memory')).toBe('mem 512.0 MB / 4.0 GB');
    expect(tile.querySelector('.jp-ft-tile-gpu')).toBeNull();
  });

  it('shows GPU memory and utilisation when the worker has a GPU', () => {
    const gb = 1024 ** 3;
    const tile = renderTile(
      worker({ gpu: '0', gpu_memory_used: 3 * gb, gpu_memory_total: 80 * gb, gpu_utilization: 45 })
    );
    expect(text(tile, '.jp-ft-tile-gpu')).toBe('GPU 3.0 GB / 80.0 GB · 45 %');
  });

  it('shows why a lost worker is lost, and leaves out readings it does not have', () => {
    const tile = renderTile(
      worker({ state: 'lost', cause: 'process exited (SIGKILL)', heartbeat_age_s: null, rss: null })
    );
    expect(text(tile, '.jp-ft-tile-cause')).toBe('process exited (SIGKILL)');
    expect(tile.querySelector('.jp-ft-tile-heartbeat')).toBeNull();
    expect(tile.querySelector('.jp-ft-tile-memory')).toBeNull();
  });

  it('shows how often a worker was restarted, once it was', () => {
    expect(renderTile(worker({ restarts: 0 })).querySelector('.jp-ft-tile-restarts')).toBeNull();
    expect(text(renderTile(worker({ restarts: 2 })), '.jp-ft-tile-restarts')).toBe('restarted 2×');
  });

  it('keeps names with markup as text', () => {
    const tile = renderTile(worker({ name: '<b>x</b>' }));
    expect(tile.querySelector('b')).toBeNull();
    expect(text(tile, '.jp-ft-tile-name')).toBe('<b>x</b>');
  });
});

describe('dashboard links', () => {
  it('take only http and https URLs', () => {
    expect(isWebUrl('http://127.0.0.1:8787/status')).toBe(true);
    expect(isWebUrl('https://lab.example.org/proxy/8787/status')).toBe(true);
    expect(isWebUrl('javascript:alert(1)')).toBe(false);
    expect(isWebUrl('file:///etc/passwd')).toBe(false);
    expect(isWebUrl(null)).toBe(false);
    expect(isWebUrl('not a url')).toBe(false);
  });
});

describe('clusters', () => {
  it('renders one tile per worker under data-cluster', () => {
    const el = renderCluster({
      cluster: cluster({ name: 'gpu-box' }),
      workers: [worker({ name: 'w0' }), worker({ name: 'w1', state: 'hung' })],
      error: null,
      services: []
    });
    expect(el.dataset.cluster).toBe('gpu-box');
    expect(text(el, '.jp-ft-cluster-name')).toBe('gpu-box');
    const tiles = Array.from(el.querySelectorAll<HTMLElement>('.jp-ft-tile'));
    expect(tiles.map(t => [t.dataset.worker, t.dataset.state])).toEqual([
      ['w0', 'running'],
      ['w1', 'hung']
    ]);
  });

  it('shows a failed workers call in place of the tiles', () => {
    const el = renderCluster({
      cluster: cluster(),
      workers: null,
      error: new ApiError('unreachable', 'The scheduler at tcp://x:1 does not answer.', 503),
      services: []
    });
    expect(el.querySelector('.jp-ft-tile')).toBeNull();
    const error = el.querySelector<HTMLElement>('.jp-ft-cluster-error');
    expect(error?.dataset.kind).toBe('unreachable');
    expect(error?.textContent).toBe('The scheduler at tcp://x:1 does not answer.');
  });
});

describe('runs', () => {
  it('shows state, health, progress, world size, loss and checkpoint age', () => {
    const el = renderRun(run(), NOW_MS, vi.fn());
    expect(el.dataset.run).toBe('mnist');
    expect(el.dataset.state).toBe('RUNNING');
    expect(el.dataset.health).toBe('HEALTHY');
    expect(text(el, '.jp-ft-run-state')).toBe('RUNNING');
    expect(text(el, '.jp-ft-run-health')).toBe('HEALTHY');
    expect(text(el, '.jp-ft-run-progress')).toBe('step 120/1000');
    expect(text(el, '.jp-ft-run-world')).toBe('4 worker(s)');
    expect(text(el, '.jp-ft-run-loss')).toBe('loss 0.1235');
    expect(text(el, '.jp-ft-ckpt-age')).toBe('ckpt 12 s ago (step 100)');
  });

  it('lists recoveries with cause, RTO and steps lost', () => {
    const el = renderRun(
      run({
        health: 'DEGRADED',
        recoveries: [recovery(), recovery({ cause: 'worker-hung', rto_s: 12.34, steps_lost: 1 })]
      }),
      NOW_MS,
      vi.fn()
    );
    expect(el.dataset.health).toBe('DEGRADED');
    const rows = Array.from(el.querySelectorAll<HTMLElement>('.jp-ft-recovery'));
    expect(rows.map(r => r.dataset.cause)).toEqual(['worker-lost', 'worker-hung']);
    expect(text(rows[0], '.jp-ft-recovery-rto')).toBe('RTO 0.06 s');
    expect(text(rows[0], '.jp-ft-recovery-lost')).toBe('3 steps lost');
    expect(text(rows[0], '.jp-ft-recovery-workers')).toBe('4 → 3 workers');
    expect(text(rows[1], '.jp-ft-recovery-rto')).toBe('RTO 12.3 s');
    expect(text(rows[1], '.jp-ft-recovery-lost')).toBe('1 step lost');
  });

  it('says when there is no checkpoint, and tolerates a run without state yet', () => {
    const el = renderRun(
      run({ state: null, health: null, step: null, checkpoint_time: null, loss: null }),
      NOW_MS,
      vi.fn()
    );
    expect(el.dataset.state).toBe('UNKNOWN');
    expect(el.dataset.health).toBe('UNKNOWN');
    expect(text(el, '.jp-ft-ckpt-age')).toBe('no checkpoint yet');
    expect(text(el, '.jp-ft-run-progress')).toBe('not started');
    expect(text(el, '.jp-ft-run-loss')).toBe('loss –');
  });

  it('shows a run whose cluster is gone as such, not as its last state', () => {
    // issue 33: after ft.down the run stayed RUNNING · DEGRADED in the panel
    const el = renderRun(run({ health: 'DEGRADED', cluster_gone: true }), NOW_MS, vi.fn());
    expect(el.dataset.state).toBe('CLUSTER GONE');
    expect(el.dataset.health).toBe('LOST');
    expect(text(el, '.jp-ft-run-state')).toBe('CLUSTER GONE');
    expect(el.querySelector('.jp-ft-run-state')?.classList).toContain('jp-ft-mod-cluster-gone');
    const list = renderRuns(
      [run({ name: 'gone', cluster_gone: true, updated: 2 }), run({ name: 'live', updated: 1 })],
      NOW_MS,
      vi.fn()
    );
    const names = Array.from(list.querySelectorAll<HTMLElement>('.jp-ft-run'));
    expect(names.map(r => r.dataset.run)).toEqual(['live', 'gone']); // the live one first
  });

  it('the Dashboard button opens that run', () => {
    const open = vi.fn();
    const el = renderRun(run({ name: "it's \"odd\"" }), NOW_MS, open);
    el.querySelector<HTMLButtonElement>('button.jp-ft-dashboard')?.click();
    expect(open).toHaveBeenCalledWith("it's \"odd\"");
  });

  it('lists active runs first, then the newest finished; older ones fold away', () => {
    const finished = Array.from({ length: RECENT_FINISHED_RUNS + 2 }, (_, i) =>
      run({ name: `done-${i}`, state: 'COMPLETED', updated: 100 + i })
    );
    const el = renderRuns([...finished, run({ name: 'live', updated: 1 })], NOW_MS, vi.fn());
    // finished runs are one-line <details> around their row
    const shown = Array.from(
      el.querySelectorAll<HTMLElement>(':scope > .jp-ft-run, :scope > .jp-ft-run-finished')
    );
    expect(shown.map(r => r.dataset.run)).toEqual(['live', 'done-4', 'done-3', 'done-2']);
    const older = el.querySelector<HTMLDetailsElement>('details.jp-ft-runs-older');
    expect(older?.open).toBe(false);
    expect(older?.querySelector('summary')?.textContent).toBe('2 older runs');
    const folded = Array.from(older?.querySelectorAll<HTMLElement>('.jp-ft-run') ?? []);
    expect(folded.map(r => r.dataset.run)).toEqual(['done-1', 'done-0']);
  });

  it('updateAges moves checkpoint ages on without a new render', () => {
    const root = document.createElement('div');
    root.append(renderRun(run(), NOW_MS, vi.fn()));
    updateAges(root, NOW_MS + 50_000);
    expect(text(root, '.jp-ft-ckpt-age')).toBe('ckpt 1 min ago (step 100)');
  });
});

describe('panel messages', () => {
  const message = (root: HTMLElement) => root.querySelector<HTMLElement>('.jp-ft-message');

  it('says how to enable the server extension, and nothing else', () => {
    const error = new ApiError('server-extension-missing', SERVER_EXTENSION_MISSING_MESSAGE, 404);
    const root = renderPanel(state(null, error), NOW_MS, actions());
    expect(message(root)?.dataset.kind).toBe('no-server');
    expect(message(root)?.textContent).toContain('jupyter server extension enable ft_notebook');
    expect(root.children).toHaveLength(1);
  });

  it('says how to start a cluster or a run when nothing runs', () => {
    const root = renderPanel(state({}), NOW_MS, actions());
    expect(message(root)?.dataset.kind).toBe('empty');
    expect(message(root)?.textContent).toBe(EMPTY_MESSAGE);
    expect(EMPTY_MESSAGE).toContain('ft.cluster()');
    expect(EMPTY_MESSAGE).toContain('ft.fit(...)');
  });

  it('shows an error with the retry time, above the last data', () => {
    const error = new ApiError('http', 'The journal is unreadable.', 500);
    const root = renderPanel(
      state({ clusters: [{ cluster: cluster(), workers: [worker()], error: null, services: [] }] }, error),
      NOW_MS,
      actions()
    );
    expect(message(root)?.dataset.kind).toBe('error');
    expect(message(root)?.textContent).toBe(
      'Could not fetch the fault-tolerance status: The journal is unreadable. Retrying in 4 s.'
    );
    expect(root.querySelectorAll('.jp-ft-tile')).toHaveLength(1);
  });

  it('shows a loading message before the first answer', () => {
    const root = renderPanel(state(null), NOW_MS, actions());
    expect(message(root)?.dataset.kind).toBe('loading');
  });

  it('has no message when there is something to show', () => {
    const root = renderPanel(state({ runs: [run()] }), NOW_MS, actions());
    expect(message(root)).toBeNull();
    expect(root.querySelectorAll('.jp-ft-run')).toHaveLength(1);
  });
});

describe('snapshots', () => {
  it('lists the active notebook\'s snapshots and wires the buttons', () => {
    const acts = actions();
    const root = renderPanel(
      state({
        snapshots: {
          path: 'work/a.ipynb',
          snapshots: [snapshot(), snapshot({ name: 'before-fit', variables: ['x'] })],
          error: null
        }
      }),
      NOW_MS,
      acts
    );
    const section = root.querySelector<HTMLElement>('.jp-ft-snapshots');
    expect(section?.dataset.path).toBe('work/a.ipynb');
    expect(text(root, '.jp-ft-snapshots .jp-ft-section-title')).toBe('Snapshots of a.ipynb');
    const rows = Array.from(root.querySelectorAll<HTMLElement>('.jp-ft-snapshot'));
    expect(rows.map(r => r.dataset.snapshot)).toEqual(['latest', 'before-fit']);
    expect(text(rows[0], '.jp-ft-snapshot-meta')).toBe('1 min ago · cell 7 · 2 variables · 2.0 KB');
    root.querySelector<HTMLButtonElement>('.jp-ft-snapshot-now')?.click();
    root.querySelector<HTMLButtonElement>('.jp-ft-restore')?.click();
    rows[1].querySelector<HTMLButtonElement>('.jp-ft-snapshot-restore')?.click();
    expect(acts.snapshot).toHaveBeenCalledTimes(1);
    expect(acts.restore).toHaveBeenNthCalledWith(1);
    expect(acts.restore).toHaveBeenNthCalledWith(2, 'before-fit');
  });

  it('says when the snapshots were taken before the notebook was renamed', () => {
    const own = renderPanel(
      state({ snapshots: { path: 'a.ipynb', snapshots: [snapshot()], error: null } }),
      NOW_MS,
      actions()
    );
    expect(own.querySelector('.jp-ft-snapshots-renamed')).toBeNull();
    const acts = actions();
    const root = renderPanel(
      state({
        snapshots: {
          path: 'final.ipynb',
          snapshots: [snapshot({ renamed_from: 'draft-ee180348' })],
          error: null
        }
      }),
      NOW_MS,
      acts
    );
    const note = root.querySelector<HTMLElement>('.jp-ft-snapshots-renamed');
    expect(note?.dataset.renamedFrom).toBe('draft-ee180348');
    expect(note?.textContent).toContain('before this notebook was renamed (as draft-ee180348)');
    root.querySelector<HTMLButtonElement>('.jp-ft-snapshot-restore')?.click();
    expect(acts.restore).toHaveBeenCalledWith('latest');
  });

  it('disables the buttons with the reason when there is no kernel', () => {
    const root = renderPanel(
      state({ snapshots: { path: 'a.ipynb', snapshots: [], error: null } }),
      NOW_MS,
      actions({ disabledReason: 'Start the notebook\'s kernel first.' })
    );
    const now = root.querySelector<HTMLButtonElement>('.jp-ft-snapshot-now');
    expect(now?.disabled).toBe(true);
    expect(now?.title).toBe('Start the notebook\'s kernel first.');
    expect(root.querySelector('.jp-ft-snapshots-empty')?.textContent).toContain('No snapshots yet');
  });

  it('shows why the snapshots could not be listed', () => {
    const root = renderPanel(
      state({
        snapshots: {
          path: 'a.ipynb',
          snapshots: null,
          error: new ApiError('http', 'The store is not writable.', 500)
        }
      }),
      NOW_MS,
      actions()
    );
    expect(text(root, '.jp-ft-snapshots-error')).toBe('The store is not writable.');
  });
});

describe('services', () => {
  it('renders each service with its tier, ready count and a chip per replica', () => {
    const degraded = service({
      health: 'DEGRADED',
      reason: '1 of 2 replicas ready: replica ranker/1 lost (worker 1 lost)',
      ready: 1,
      replicas: [
        replica(),
        replica({ replica: 'ranker/1', worker: '', state: 'lost', cause: 'worker 1 lost' })
      ]
    });
    const el = renderServices([degraded, service({ name: 'echo', cluster: 'gpu' })]);
    const rows = Array.from(el.querySelectorAll<HTMLElement>('.jp-ft-service'));
    expect(rows.map(r => [r.dataset.service, r.dataset.health])).toEqual([
      ['ranker', 'DEGRADED'],
      ['echo', 'HEALTHY']
    ]);
    expect(text(rows[0], '.jp-ft-service-ready')).toBe('1/2 replicas · default');
    expect(text(rows[0], '.jp-ft-service-reason')).toContain('replica ranker/1 lost');
    const chips = Array.from(rows[0].querySelectorAll<HTMLElement>('.jp-ft-replica'));
    expect(chips.map(c => [c.dataset.replica, c.dataset.state, c.textContent])).toEqual([
      ['ranker/0', 'ready', '0 ready'],
      ['ranker/1', 'lost', '1 lost']
    ]);
    expect(chips[1].title).toBe('ranker/1 lost on no worker: worker 1 lost');
  });

  it('shows the Services section in the panel only when a cluster has services', () => {
    const withService: IResilience = {
      clusters: [{ cluster: cluster(), workers: [worker()], error: null, services: [service()] }],
      runs: [],
      snapshots: null
    };
    const shown = renderPanel({ data: withService, error: null, retryInMs: 0 }, NOW_MS, actions());
    expect(shown.querySelector('.jp-ft-services .jp-ft-service')).not.toBeNull();
    const none = { ...withService, clusters: [{ ...withService.clusters[0], services: [] }] };
    const hidden = renderPanel({ data: none, error: null, retryInMs: 0 }, NOW_MS, actions());
    expect(hidden.querySelector('.jp-ft-services')).toBeNull();
  });

  it('keeps service names as text, never as markup', () => {
    const el = renderServices([service({ name: '<img src=x onerror=alert(1)>' })]);
    expect(el.querySelector('img')).toBeNull();
  });
});
