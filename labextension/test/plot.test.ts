import { describe, expect, it } from 'vitest';

import { clockTime, runMarks, runPlotSpecs, servicePlotSpecs, stepAt } from '../src/history';
import type { RunHistoryModel, RunPointModel, ServiceHistoryModel } from '../src/models';
import { formatTick, logTicks, niceTicks, renderPlot } from '../src/plot';
import { recovery, run, service } from './fixtures';

function points(n: number): RunPointModel[] {
  return Array.from({ length: n }, (_, i) => ({
    time: 1000 + i,
    step: i * 10,
    loss: 2 / (i + 1),
    samples_per_s: 100 + i
  }));
}

function runHistory(overrides: Partial<RunHistoryModel> = {}): RunHistoryModel {
  return { run: run(), reason: '', points: points(20), ...overrides };
}

describe('ticks', () => {
  it('are round numbers spanning the range', () => {
    expect(niceTicks(0, 100, 5)).toEqual([0, 20, 40, 60, 80, 100]);
    expect(niceTicks(0.13, 0.91, 4)).toEqual([0.2, 0.4, 0.6, 0.8]);
    expect(niceTicks(3, 3)).toEqual([3]);
  });

  it('are powers of ten on a log axis', () => {
    expect(logTicks(0.004, 2.5)).toEqual([0.01, 0.1, 1]);
    expect(logTicks(0.2, 0.8)).toEqual([0.2, 0.8]); // no power inside: the ends
    expect(formatTick(0.001)).toBe('0.001');
    expect(formatTick(0.00001)).toBe('1e-5');
    expect(formatTick(2500)).toBe('2.5k');
  });
});

describe('renderPlot', () => {
  const spec = runPlotSpecs(runHistory())[0];

  it('draws every point, both axes with their labels and a legend', () => {
    const svg = renderPlot(spec);
    const line = svg.querySelector('.jp-ft-plot-line[data-series="loss"]')!;
    expect(line.getAttribute('data-points')).toBe('20');
    expect(line.getAttribute('d')!.match(/[ML]/g)).toHaveLength(20);
    const labels = Array.from(svg.querySelectorAll('.jp-ft-plot-label')).map(t => t.textContent);
    expect(labels).toEqual(['step', 'loss (log scale)']);
    const yTicks = Array.from(svg.querySelectorAll('.jp-ft-plot-axis-y text:not(.jp-ft-plot-label)')).map(t => t.textContent);
    expect(yTicks).toEqual(['0.1', '1']); // loss 2/(i + 1) runs from 2 down to 0.1
    const legend = Array.from(svg.querySelectorAll('.jp-ft-plot-legend-item')).map(i => i.textContent);
    expect(legend).toEqual(['loss']);
  });

  it('puts a lower loss lower on the log axis, halving evenly', () => {
    const svg = renderPlot({
      key: 'l',
      xLabel: 'step',
      yLabel: 'loss',
      logY: true,
      series: [{ key: 'l', label: 'loss', color: 'red', points: [[0, 1], [1, 0.1], [2, 0.01]] }]
    });
    const ys = svg.querySelector('path')!.getAttribute('d')!.split(/[ML]/).slice(1).map(p => Number(p.split(',')[1]));
    expect(ys[0]).toBeLessThan(ys[1]);
    expect(ys[1] - ys[0]).toBeCloseTo(ys[2] - ys[1], 0); // equal ratios, equal steps
  });

  it('leaves gaps where a value is unknown or not positive on a log axis', () => {
    const svg = renderPlot({
      key: 'l',
      xLabel: 'step',
      yLabel: 'loss',
      logY: true,
      series: [{ key: 'l', label: 'loss', color: 'red', points: [[0, 1], [1, null], [2, 0], [3, 0.5], [4, 0.4]] }]
    });
    const d = svg.querySelector('path')!.getAttribute('d')!;
    expect(d.match(/M/g)).toHaveLength(2);
    expect(svg.querySelector('path')!.getAttribute('data-points')).toBe('3');
  });

  it('says so when there is nothing to draw', () => {
    const svg = renderPlot({ ...spec, series: [{ ...spec.series[0], points: [] }], marks: [] });
    expect(svg.querySelector('.jp-ft-plot-empty')?.textContent).toBe('no data yet');
  });
});

describe('run plots', () => {
  it('mark the loss, the hang and the recovery, each named in the legend', () => {
    const history = runHistory({
      run: run({
        recoveries: [
          recovery({ cause: 'cpu1: worker lost', detected_at: 1005.5, time: 1006.2, step: 60 }),
          recovery({ cause: 'cpu2: worker hung', detected_at: 1012, time: 1013, step: 0 })
        ]
      })
    });
    expect(stepAt(history.points, 1005.5)).toBe(50);
    const marks = runMarks(history);
    expect(marks.map(m => [m.kind, m.x])).toEqual([
      ['failure', 50],
      ['recovery', 60],
      ['hang', 120],
      ['recovery', 130] // no step told: the step at its time
    ]);
    const svg = renderPlot(runPlotSpecs(history)[0]);
    expect(svg.querySelectorAll('.jp-ft-plot-mark')).toHaveLength(4);
    const legend = Array.from(svg.querySelectorAll('.jp-ft-plot-legend-item')).map(i => i.getAttribute('data-key'));
    expect(legend).toEqual(['loss', 'failure', 'recovery', 'hang']);
  });

  it('mark where a failed run stopped, with its reason', () => {
    const marks = runMarks(runHistory({ run: run({ state: 'FAILED' }), reason: 'retries spent' }));
    expect(marks).toEqual([{ x: 190, kind: 'failure', title: 'run failed: retries spent' }]);
  });

  it('plot samples/s by step on a linear axis', () => {
    const [, throughput] = runPlotSpecs(runHistory());
    expect(throughput.logY).toBeFalsy();
    expect(throughput.yLabel).toBe('samples/s');
    expect(throughput.series[0].points[3]).toEqual([30, 103]);
  });
});

describe('service plots', () => {
  it('plot requests/s, p99 and the tier held until now', () => {
    const history: ServiceHistoryModel = {
      service: service(),
      tiers: [
        { time: 100, tier: 'HEALTHY', reason: '3 of 3 ready' },
        { time: 110, tier: 'DEGRADED', reason: '2 of 3 ready' }
      ],
      traffic: [
        { time: 100, requests_per_s: 0, p99_ms: null },
        { time: 102, requests_per_s: 40, p99_ms: 12.5 }
      ]
    };
    const [requests, latency, tier] = servicePlotSpecs(history, 130);
    expect(requests.series[0].points).toEqual([[100, 0], [102, 40]]);
    expect(latency.yLabel).toBe('p99 latency (ms)');
    expect(tier.series[0].points).toEqual([[100, 2], [110, 1], [130, 1]]);
    expect(tier.marks).toEqual([{ x: 110, kind: 'failure', title: 'DEGRADED: 2 of 3 ready' }]);
    const svg = renderPlot(tier);
    const names = Array.from(svg.querySelectorAll('.jp-ft-plot-axis-y text:not(.jp-ft-plot-label)')).map(t => t.textContent);
    expect(names).toEqual(['FALLBACK', 'DEGRADED', 'HEALTHY']);
    expect(clockTime(0)).toMatch(/^\d\d:\d\d:\d\d$/);
  });
});
