import { describe, expect, it, vi } from 'vitest';

import { DISMISSED_RUNS_KEY, MAX_DISMISSED, RunDismissals } from '../src/dismissals';
import type { IResilience, IViewState } from '../src/state';
import { summarizeMemory } from '../src/status';
import { dashboardUrl, IClusterActions, renderClusters } from '../src/view/clusters';
import { IPanelActions, renderPanel } from '../src/view/panel';
import { IRunDismissal, renderRuns } from '../src/view/runs';
import { renderSnapshot, variablesText } from '../src/view/snapshots';
import { cluster, NOW_MS, run, snapshot, worker } from './fixtures';

function clusterActions(overrides: Partial<IClusterActions> = {}): IClusterActions {
  return {
    baseUrl: '/user/ada/',
    start: vi.fn(),
    scale: vi.fn(),
    stop: vi.fn(),
    busy: () => null,
    starting: () => null,
    ...overrides
  };
}

const view = (overrides = {}, workers = [worker()]) => ({
  cluster: cluster(overrides),
  workers,
  error: null,
  services: []
});

const click = (root: ParentNode, selector: string) =>
  root.querySelector<HTMLButtonElement>(selector)!.click();

describe('the proxied dashboard link', () => {
  it('goes through the Jupyter server for a dashboard on loopback', () => {
    expect(dashboardUrl('http://127.0.0.1:8787/status', '/')).toBe('/proxy/8787/status');
    expect(dashboardUrl('http://localhost:40123/status', '/user/ada/')).toBe(
      '/user/ada/proxy/40123/status'
    );
  });

  it('leaves another host as it is, and drops what is not a web URL', () => {
    expect(dashboardUrl('http://10.0.0.5:8787/status', '/')).toBe('http://10.0.0.5:8787/status');
    expect(dashboardUrl('javascript:alert(1)', '/')).toBeNull();
    expect(dashboardUrl(null, '/')).toBeNull();
  });

  it('is what the cluster header links to', () => {
    const root = renderClusters(
      [view({ dashboard: 'http://127.0.0.1:8787/status' })],
      clusterActions()
    );
    const link = root.querySelector<HTMLAnchorElement>('.jp-ft-cluster-dashboard');
    expect(link?.getAttribute('href')).toBe('/user/ada/proxy/8787/status');
  });
});

describe('cluster controls', () => {
  it('the section offers a start even with no cluster, and the panel shows it', () => {
    const acts = clusterActions();
    const root = renderClusters([], acts);
    click(root, '.jp-ft-cluster-start');
    expect(acts.start).toHaveBeenCalledOnce();
    const panelActions: IPanelActions = {
      openDashboard: vi.fn(),
      snapshot: vi.fn(),
      restore: vi.fn(),
      disabledReason: null,
      clusters: acts
    };
    const data: IResilience = { clusters: [], runs: [], snapshots: null };
    const state: IViewState = { data, error: null, retryInMs: 0 };
    const panel = renderPanel(state, NOW_MS, panelActions);
    expect(panel.querySelector('.jp-ft-cluster-start')).not.toBeNull();
  });

  it('− and + ask for one worker less or more; Stop stops that cluster', () => {
    const acts = clusterActions();
    const root = renderClusters([view({ name: 'lab', workers: { cpu0: 1, cpu1: 2 } })], acts);
    expect(root.querySelector('.jp-ft-cluster-count')?.textContent).toBe('2 workers');
    click(root, '.jp-ft-cluster-scale-up');
    click(root, '.jp-ft-cluster-scale-down');
    click(root, '.jp-ft-cluster-stop');
    expect(acts.scale).toHaveBeenNthCalledWith(1, 'lab', 3);
    expect(acts.scale).toHaveBeenNthCalledWith(2, 'lab', 1);
    expect(acts.stop).toHaveBeenCalledWith('lab');
  });

  it('a cluster keeps one worker, and a GPU cluster does not scale', () => {
    const one = renderClusters([view({ workers: { cpu0: 1 } })], clusterActions());
    const down = one.querySelector<HTMLButtonElement>('.jp-ft-cluster-scale-down')!;
    expect(down.disabled).toBe(true);
    expect(down.title).toContain('at least one worker');
    const gpu = renderClusters([view({ gpus: ['GPU-1'] })], clusterActions());
    expect(gpu.querySelector<HTMLButtonElement>('.jp-ft-cluster-scale-up')!.disabled).toBe(true);
    expect(gpu.querySelector<HTMLButtonElement>('.jp-ft-cluster-stop')!.disabled).toBe(false);
  });

  it('while an action is under way the buttons wait and say which', () => {
    const acts = clusterActions({
      busy: name => (name === 'c1' ? 'Stopping…' : null),
      starting: () => 'Starting lab…'
    });
    const root = renderClusters([view()], acts);
    const stop = root.querySelector<HTMLButtonElement>('.jp-ft-cluster-stop')!;
    expect([stop.disabled, stop.textContent]).toEqual([true, 'Stopping…']);
    const start = root.querySelector<HTMLButtonElement>('.jp-ft-cluster-start')!;
    expect([start.disabled, start.textContent]).toEqual([true, 'Starting lab…']);
  });
});

class MemoryStorage {
  items = new Map<string, string>();
  getItem(key: string): string | null {
    return this.items.get(key) ?? null;
  }
  setItem(key: string, value: string): void {
    this.items.set(key, value);
  }
}

describe('finished runs', () => {
  const runs = [
    run({ name: 'live' }),
    run({ name: 'done', state: 'COMPLETED', updated: 1_700_000_100 }),
    run({ name: 'broke', state: 'FAILED', updated: 1_700_000_050 })
  ];

  it('collapse to one closed line each; active runs stay open rows', () => {
    const root = renderRuns(runs, NOW_MS, vi.fn());
    const lines = root.querySelectorAll<HTMLDetailsElement>('details.jp-ft-run-finished');
    expect(Array.from(lines, d => [d.dataset.run, d.dataset.state, d.open])).toEqual([
      ['done', 'COMPLETED', false],
      ['broke', 'FAILED', false]
    ]);
    expect(lines[0].querySelector('summary')?.textContent).toContain('step 120/1000');
    expect(root.querySelector('[data-run="live"]')?.closest('details')).toBeNull();
    expect(root.querySelector('.jp-ft-run-dismiss')).toBeNull(); // no dismissal, no ×
  });

  it('the line is the run\'s own row: one .jp-ft-run with its data, header in the summary', () => {
    const open = vi.fn();
    const root = renderRuns(runs, NOW_MS, open);
    const done = root.querySelectorAll<HTMLElement>('.jp-ft-run[data-run="done"]');
    expect(done).toHaveLength(1);
    expect(done[0].tagName).toBe('DETAILS');
    expect([done[0].dataset.state, done[0].dataset.health]).toEqual(['COMPLETED', 'HEALTHY']);
    const summary = done[0].querySelector('summary')!;
    expect(summary.querySelector('.jp-ft-run-state')?.textContent).toBe('COMPLETED');
    expect(done[0].querySelectorAll('.jp-ft-run-header')).toHaveLength(0);
    summary.querySelector<HTMLButtonElement>('button.jp-ft-dashboard')!.click();
    expect(open).toHaveBeenCalledWith('done');
    expect(done[0].querySelector('.jp-ft-run-stats')).not.toBeNull(); // the rest, below
  });

  it('× dismisses one, which stays hidden after a reload; a restore brings them back', () => {
    const storage = new MemoryStorage();
    const changed = vi.fn();
    const dismissals = new RunDismissals(storage, changed);
    let root = renderRuns(runs, NOW_MS, vi.fn(), {}, dismissals);
    root.querySelector<HTMLButtonElement>('[data-run="done"] .jp-ft-run-dismiss')!.click();
    expect(changed).toHaveBeenCalledOnce();

    const reloaded = new RunDismissals(storage);
    root = renderRuns(runs, NOW_MS, vi.fn(), {}, reloaded);
    expect(root.querySelector('[data-run="done"]')).toBeNull();
    expect(root.querySelector('[data-run="broke"]')).not.toBeNull();
    const undo = root.querySelector<HTMLButtonElement>('.jp-ft-runs-undismiss')!;
    expect(undo.textContent).toBe('Show 1 dismissed run');
    undo.click();
    root = renderRuns(runs, NOW_MS, vi.fn(), {}, new RunDismissals(storage));
    expect(root.querySelector('[data-run="done"]')).not.toBeNull();
  });

  it('a run of the same name that ended later is another run and shows', () => {
    const dismissals: IRunDismissal = new RunDismissals(new MemoryStorage());
    dismissals.dismiss(runs[1]);
    const again = { ...runs[1], updated: runs[1].updated + 600 };
    expect(dismissals.isDismissed(runs[1])).toBe(true);
    expect(dismissals.isDismissed(again)).toBe(false);
  });

  it('damaged storage starts afresh, and dismissals are bounded', () => {
    const storage = new MemoryStorage();
    storage.setItem(DISMISSED_RUNS_KEY, '{not json');
    const dismissals = new RunDismissals(storage);
    expect(dismissals.isDismissed(runs[1])).toBe(false);
    for (let i = 0; i < MAX_DISMISSED + 5; i++) {
      dismissals.dismiss(run({ name: `r${i}`, state: 'COMPLETED' }));
    }
    expect(JSON.parse(storage.getItem(DISMISSED_RUNS_KEY)!)).toHaveLength(MAX_DISMISSED);
    expect(dismissals.isDismissed(run({ name: `r${MAX_DISMISSED + 4}` }))).toBe(true);
    expect(dismissals.isDismissed(run({ name: 'r0' }))).toBe(false);
  });
});

describe('kernel memory beside the cluster\'s', () => {
  const data = (overrides: Partial<IResilience>): IViewState => ({
    data: { clusters: [], runs: [], snapshots: null, ...overrides },
    error: null,
    retryInMs: 0
  });
  const MB = 1024 * 1024;

  it('shows both: kernel RSS and the workers\' total', () => {
    const summary = summarizeMemory(
      data({
        kernel: { kernel_id: 'k', pid: 7, rss: 412 * MB },
        clusters: [view({}, [worker({ rss: 1024 * MB }), worker({ rss: 512 * MB }), worker({ rss: 64 * MB })])]
      })
    );
    expect(summary?.text).toBe('kernel 412.0 MB · cluster 3 workers 1.6 GB');
    expect(summary?.title).toContain('pid 7');
  });

  it('a kernel alone, a cluster alone, or nothing at all', () => {
    expect(summarizeMemory(data({ kernel: { kernel_id: 'k', pid: 7, rss: 100 * MB } }))?.text).toBe(
      'kernel 100.0 MB'
    );
    expect(summarizeMemory(data({ clusters: [view({}, [worker({ rss: MB })])] }))?.text).toBe(
      'cluster 1 worker 1.0 MB'
    );
    expect(summarizeMemory(data({}))).toBeNull();
    expect(summarizeMemory({ data: null, error: null, retryInMs: 0 })).toBeNull();
  });
});

describe('snapshot variables', () => {
  it('names the first ones, then how many more; the tooltip lists all', () => {
    const names = ['model', 'optimizer', 'df', 'step', 'losses', 'config'];
    expect(variablesText(names)).toBe('model, optimizer, df, step +2 more');
    expect(variablesText(['x'])).toBe('x');
    expect(variablesText([])).toBe('no variables');
    const row = renderSnapshot(snapshot({ variables: names }), NOW_MS, {
      snapshot: vi.fn(),
      restore: vi.fn(),
      disabledReason: null
    });
    const shown = row.querySelector<HTMLElement>('.jp-ft-snapshot-variables')!;
    expect(shown.textContent).toBe('model, optimizer, df, step +2 more');
    expect(shown.title).toBe(names.join(', '));
  });
});
