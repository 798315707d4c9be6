/**
 * Line plots over time as SVG, small enough to need no chart library: axes with ticks,
 * their labels with units, a log or linear y axis, vertical marks (failures, hangs,
 * recoveries) and a legend naming every line and every kind of mark shown.
 *
 * `renderPlot` is a pure function of its spec (the same spec gives the same SVG), so
 * tests render it without JupyterLab; numbers are data attributes for tests to read.
 */

const SVG_NS = 'http://www.w3.org/2000/svg';

/** One line: its points `[x, y]`, oldest first; y null where unknown (a gap). */
export interface ISeries {
  /** `data-series` of its path, e.g. `loss`. */
  key: string;
  /** What the legend says, with the unit, e.g. `loss`, `samples/s`. */
  label: string;
  color: string;
  points: Array<[number, number | null]>;
  /** Draw as steps (a value holds until the next): tiers. */
  step?: boolean;
}

/** What a mark says happened. */
export type MarkKind = 'failure' | 'hang' | 'recovery';

/** A vertical line at `x`, with a tooltip. */
export interface IMark {
  x: number;
  kind: MarkKind;
  title: string;
}

/** The colour and legend text of each kind of mark. */
export const MARK_STYLES: Record<MarkKind, { color: string; label: string }> = {
  failure: { color: '#c62828', label: 'worker lost' },
  hang: { color: '#ef6c00', label: 'worker hung' },
  recovery: { color: '#2e7d32', label: 'recovered' }
};

export interface IPlotSpec {
  /** `data-plot` of the SVG, e.g. `loss`. */
  key: string;
  series: ISeries[];
  marks?: IMark[];
  /** Axis titles with units, e.g. `step`, `loss (log scale)`. */
  xLabel: string;
  yLabel: string;
  logY?: boolean;
  /** Named y ticks (a categorical axis, e.g. tiers) instead of numbers. */
  yTicks?: Array<[number, string]>;
  xFormat?: (x: number) => string;
  width?: number;
  height?: number;
  /** A sidebar thumbnail: fewer ticks, smaller margins; still axes and a legend. */
  compact?: boolean;
}

/** Round numbers spanning [min, max], about `count` of them. */
export function niceTicks(min: number, max: number, count = 5): number[] {
  if (!Number.isFinite(min) || !Number.isFinite(max)) {
    return [];
  }
  if (min === max) {
    return [min];
  }
  const raw = (max - min) / Math.max(1, count);
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map(m => m * power).find(s => s >= raw) ?? 10 * power;
  const ticks: number[] = [];
  for (let t = Math.ceil(min / step) * step; t <= max + step * 1e-9; t += step) {
    ticks.push(Number(t.toPrecision(12)));
  }
  return ticks;
}

/** The powers of ten in [min, max] (both > 0); the ends when none falls inside. */
export function logTicks(min: number, max: number): number[] {
  const ticks: number[] = [];
  for (let e = Math.ceil(Math.log10(min)); e <= Math.floor(Math.log10(max)); e++) {
    ticks.push(10 ** e);
  }
  return ticks.length > 0 ? ticks : [min, max];
}

/** A short number for a tick: `0.001`, `1e-5`, `2.5k`, `120`. */
export function formatTick(value: number): string {
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) {
    return value.toExponential(0);
  }
  if (abs >= 1e3) {
    return `${Number((value / 1e3).toPrecision(3))}k`;
  }
  return String(Number(value.toPrecision(3)));
}

/** The y range of the series: for a log axis, over positive values only. */
function yDomain(series: ISeries[], logY: boolean): [number, number] | null {
  const ys: number[] = [];
  for (const s of series) {
    for (const [, y] of s.points) {
      if (y !== null && Number.isFinite(y) && (!logY || y > 0)) {
        ys.push(y);
      }
    }
  }
  if (ys.length === 0) {
    return null;
  }
  let [lo, hi] = [Math.min(...ys), Math.max(...ys)];
  if (logY) {
    return lo === hi ? [lo / 2, hi * 2] : [lo, hi];
  }
  if (lo === hi) {
    [lo, hi] = [lo - 1, hi + 1];
  }
  return [Math.min(lo, 0), hi];
}

function el(tag: string, attrs: Record<string, string | number>, text?: string): SVGElement {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    node.setAttribute(name, String(value));
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/** The plot as an `<svg class="jp-ft-plot" data-plot=KEY>`. */
export function renderPlot(spec: IPlotSpec): SVGSVGElement {
  const compact = spec.compact ?? false;
  const width = spec.width ?? (compact ? 240 : 640);
  const height = spec.height ?? (compact ? 110 : 260);
  const logY = spec.logY ?? false;
  const m = compact
    ? { left: 38, right: 6, top: 16, bottom: 26 }
    : { left: 64, right: 16, top: 26, bottom: 44 };
  const svg = el('svg', {
    class: `jp-ft-plot${compact ? ' jp-ft-plot-compact' : ''}`,
    'data-plot': spec.key,
    viewBox: `0 0 ${width} ${height}`,
    width,
    height,
    role: 'img'
  }) as SVGSVGElement;
  svg.append(el('title', {}, `${spec.yLabel} by ${spec.xLabel}`));
  const xs = (spec.marks ?? []).map(k => k.x);
  for (const s of spec.series) {
    xs.push(...s.points.filter(p => p[1] !== null).map(p => p[0]));
  }
  const domain = yDomain(spec.series, logY);
  if (xs.length === 0 || domain === null) {
    svg.append(el('text', { class: 'jp-ft-plot-empty', x: width / 2, y: height / 2, 'text-anchor': 'middle' }, 'no data yet'));
    return svg;
  }
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  const [y0, y1] = domain;
  const plotW = width - m.left - m.right;
  const plotH = height - m.top - m.bottom;
  const sx = (x: number) => m.left + (x1 === x0 ? plotW / 2 : ((x - x0) / (x1 - x0)) * plotW);
  const ty = logY ? Math.log10 : (v: number) => v;
  const sy = (y: number) => m.top + plotH - ((ty(y) - ty(y0)) / (ty(y1) - ty(y0) || 1)) * plotH;

  const xAxis = el('g', { class: 'jp-ft-plot-axis jp-ft-plot-axis-x' });
  xAxis.append(el('line', { x1: m.left, x2: m.left + plotW, y1: m.top + plotH, y2: m.top + plotH }));
  const xFormat = spec.xFormat ?? formatTick;
  for (const t of niceTicks(x0, x1, compact ? 3 : 6)) {
    xAxis.append(el('line', { class: 'jp-ft-plot-tick', x1: sx(t), x2: sx(t), y1: m.top + plotH, y2: m.top + plotH + 4 }));
    xAxis.append(el('text', { x: sx(t), y: m.top + plotH + 14, 'text-anchor': 'middle' }, xFormat(t)));
  }
  xAxis.append(el('text', { class: 'jp-ft-plot-label', x: m.left + plotW / 2, y: height - 3, 'text-anchor': 'middle' }, spec.xLabel));

  const yAxis = el('g', { class: 'jp-ft-plot-axis jp-ft-plot-axis-y' });
  yAxis.append(el('line', { x1: m.left, x2: m.left, y1: m.top, y2: m.top + plotH }));
  const yTicks: Array<[number, string]> =
    spec.yTicks ?? (logY ? logTicks(y0, y1) : niceTicks(y0, y1, compact ? 2 : 5)).map(t => [t, formatTick(t)]);
  for (const [t, text] of yTicks) {
    yAxis.append(el('line', { class: 'jp-ft-plot-grid', x1: m.left, x2: m.left + plotW, y1: sy(t), y2: sy(t) }));
    yAxis.append(el('text', { x: m.left - 4, y: sy(t) + 3, 'text-anchor': 'end' }, text));
  }
  const yLabelAt = `translate(${compact ? 9 : 14},${m.top + plotH / 2}) rotate(-90)`;
  yAxis.append(el('text', { class: 'jp-ft-plot-label', transform: yLabelAt, 'text-anchor': 'middle' }, spec.yLabel));
  svg.append(xAxis, yAxis);

  for (const mark of spec.marks ?? []) {
    const line = el('line', {
      class: `jp-ft-plot-mark jp-ft-plot-mark-${mark.kind}`,
      'data-kind': mark.kind,
      x1: sx(mark.x),
      x2: sx(mark.x),
      y1: m.top,
      y2: m.top + plotH,
      stroke: MARK_STYLES[mark.kind].color
    });
    line.append(el('title', {}, mark.title));
    svg.append(line);
  }
  for (const series of spec.series) {
    svg.append(seriesPath(series, sx, sy, logY));
  }
  svg.append(legend(spec, m.left, compact));
  return svg;
}

function seriesPath(
  series: ISeries,
  sx: (x: number) => number,
  sy: (y: number) => number,
  logY: boolean
): SVGElement {
  let d = '';
  let pen = 'M';
  let shown = 0;
  let last: number | null = null;
  for (const [x, y] of series.points) {
    if (y === null || !Number.isFinite(y) || (logY && y <= 0)) {
      pen = 'M'; // a gap
      continue;
    }
    if (series.step && last !== null && pen === 'L') {
      d += `L${sx(x).toFixed(1)},${last.toFixed(1)}`;
    }
    last = sy(y);
    d += `${pen}${sx(x).toFixed(1)},${last.toFixed(1)}`;
    pen = 'L';
    shown++;
  }
  return el('path', {
    class: 'jp-ft-plot-line',
    'data-series': series.key,
    'data-points': shown,
    d,
    fill: 'none',
    stroke: series.color
  });
}

/** One entry per line, then one per kind of mark present. */
function legend(spec: IPlotSpec, left: number, compact: boolean): SVGElement {
  const group = el('g', { class: 'jp-ft-plot-legend' });
  const kinds = [...new Set((spec.marks ?? []).map(mark => mark.kind))];
  const items: Array<[string, string, string]> = [
    ...spec.series.map((s): [string, string, string] => [s.key, s.label, s.color]),
    ...kinds.map((k): [string, string, string] => [k, MARK_STYLES[k].label, MARK_STYLES[k].color])
  ];
  let x = left;
  for (const [key, label, color] of items) {
    const item = el('g', { class: 'jp-ft-plot-legend-item', 'data-key': key });
    item.append(el('rect', { x, y: compact ? 4 : 8, width: 10, height: 10, fill: color }));
    item.append(el('text', { x: x + 13, y: compact ? 13 : 17 }, label));
    group.append(item);
    x += 22 + label.length * (compact ? 5.5 : 6.5);
  }
  return group;
}
