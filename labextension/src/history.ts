/**
 * From a run's or a service's history (the server's fold, `runs/RUN/history` and
 * `services/SERVICE/history`) to the plots the panel and the docked dashboards draw:
 * a run's loss on a log axis and its samples/s by step, with a mark where a worker was
 * lost or hung and where the run recovered; a service's requests/s, p99 latency and
 * tier over time.
 */
import type {
  Health,
  RunHistoryModel,
  RunPointModel,
  ServiceHistoryModel
} from './models';
import { IMark, IPlotSpec, renderPlot } from './plot';

/** The y value of each tier on a service's tier plot. */
export const TIER_LEVELS: Record<Health, number> = {
  LOST: 0,
  FALLBACK: 0,
  DEGRADED: 1,
  HEALTHY: 2
};

/** The step a run had reached at time `time` (epoch s), from its points. */
export function stepAt(points: RunPointModel[], time: number): number | null {
  let step: number | null = points.length > 0 ? points[0].step : null;
  for (const point of points) {
    if (point.time > time) {
      break;
    }
    step = point.step;
  }
  return step;
}

/** A mark per loss or hang noticed, per recovery, and one where the run failed. */
export function runMarks(history: RunHistoryModel): IMark[] {
  const { points, run } = history;
  const marks: IMark[] = [];
  for (const r of run.recoveries) {
    const lostAt = stepAt(points, r.detected_at);
    if (lostAt !== null) {
      const kind = /hung|hang/i.test(r.cause) ? 'hang' : 'failure';
      marks.push({ x: lostAt, kind, title: `${r.cause} (step ${lostAt})` });
    }
    const back = r.step > 0 ? r.step : stepAt(points, r.time);
    if (back !== null) {
      marks.push({
        x: back,
        kind: 'recovery',
        title: `recovered in ${r.rto_s.toFixed(2)} s, ${r.workers_before} → ${r.workers_after} workers, ${r.steps_lost} step(s) lost`
      });
    }
  }
  if (run.state === 'FAILED' && points.length > 0) {
    const last = points[points.length - 1].step;
    marks.push({ x: last, kind: 'failure', title: `run failed: ${history.reason || 'no reason told'}` });
  }
  return marks;
}

/** Loss (log axis) and samples/s by step, as plot specs. */
export function runPlotSpecs(history: RunHistoryModel, compact = false): IPlotSpec[] {
  const marks = runMarks(history);
  const points = history.points;
  return [
    {
      key: 'loss',
      xLabel: 'step',
      yLabel: 'loss (log scale)',
      logY: true,
      compact,
      marks,
      series: [{ key: 'loss', label: 'loss', color: '#1565c0', points: points.map(p => [p.step, p.loss]) }]
    },
    {
      key: 'throughput',
      xLabel: 'step',
      yLabel: 'samples/s',
      compact,
      marks,
      series: [
        {
          key: 'samples_per_s',
          label: 'samples/s',
          color: '#6a1b9a',
          points: points.map(p => [p.step, p.samples_per_s])
        }
      ]
    }
  ];
}

/** `14:03:07` for a time in epoch seconds (the browser's time zone). */
export function clockTime(seconds: number): string {
  return new Date(seconds * 1000).toLocaleTimeString([], { hour12: false });
}

/** Requests/s, p99 latency (ms) and tier over time, as plot specs; `nowS` ends the tier line. */
export function servicePlotSpecs(
  history: ServiceHistoryModel,
  nowS: number,
  compact = false
): IPlotSpec[] {
  const traffic = history.traffic;
  const tiers: Array<[number, number | null]> = history.tiers.map(t => [t.time, TIER_LEVELS[t.tier]]);
  if (tiers.length > 0) {
    tiers.push([Math.max(nowS, tiers[tiers.length - 1][0]), tiers[tiers.length - 1][1]]);
  }
  const marks: IMark[] = history.tiers
    .filter(t => t.tier !== 'HEALTHY')
    .map(t => ({ x: t.time, kind: 'failure', title: `${t.tier}: ${t.reason}` }));
  const specs: IPlotSpec[] = [
    {
      key: 'requests',
      xLabel: 'time',
      yLabel: 'requests/s',
      xFormat: clockTime,
      compact,
      series: [
        { key: 'requests_per_s', label: 'requests/s (all callers)', color: '#1565c0', points: traffic.map(p => [p.time, p.requests_per_s]) }
      ]
    },
    {
      key: 'latency',
      xLabel: 'time',
      yLabel: 'p99 latency (ms)',
      xFormat: clockTime,
      compact,
      series: [{ key: 'p99_ms', label: 'p99 (ms, slowest caller)', color: '#6a1b9a', points: traffic.map(p => [p.time, p.p99_ms]) }]
    },
    {
      key: 'tier',
      xLabel: 'time',
      yLabel: 'tier',
      xFormat: clockTime,
      compact,
      marks,
      yTicks: [
        [0, 'FALLBACK'],
        [1, 'DEGRADED'],
        [2, 'HEALTHY']
      ],
      series: [{ key: 'tier', label: 'tier', color: '#2e7d32', points: tiers, step: true }]
    }
  ];
  return specs;
}

/** Every plot of `specs`, rendered. */
export function renderPlots(specs: IPlotSpec[]): SVGSVGElement[] {
  return specs.map(renderPlot);
}
