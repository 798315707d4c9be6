/**
 * Training runs as rows: state and health badges, progress, loss, the age of the
 * newest checkpoint (kept current every second by `updateAges`, without refetching)
 * and every recovery with its cause, RTO and steps lost.
 */
import { formatAge, formatLoss, formatRto, secondsSince } from '../format';
import { renderPlots, runPlotSpecs } from '../history';
import type { RecoveryModel, RunHistoryModel, RunModel } from '../models';
import { isActiveRun } from '../status';
import { button, h, modClass } from './dom';

/** Finished runs shown before the rest fold into "N older runs". */
export const RECENT_FINISHED_RUNS = 3;

/** Which finished runs the user dismissed from the panel (they stay in their journals). */
export interface IRunDismissal {
  isDismissed(run: RunModel): boolean;
  dismiss(run: RunModel): void;
  /** Show every dismissed run again. */
  restoreAll(): void;
}

/**
 * The `.jp-ft-runs` section: active runs first, then the newest finished ones, each
 * collapsed to one line (`<details class="jp-ft-run-finished">`) with a dismiss ×;
 * older finished runs fold into a closed `<details class="jp-ft-runs-older">`, and
 * dismissed ones are left out, so journals full of past runs do not push the live
 * ones and the snapshots out of sight.
 */
export function renderRuns(
  runs: RunModel[],
  nowMs: number,
  openDashboard: (run: string) => void,
  plots: IRunPlots = {},
  dismissal: IRunDismissal | null = null
): HTMLElement {
  const newestFirst = [...runs].sort((a, b) => b.updated - a.updated);
  const active = newestFirst.filter(isActiveRun);
  const ended = newestFirst.filter(run => !isActiveRun(run));
  const finished = ended.filter(run => !dismissal?.isDismissed(run));
  const dismissed = ended.length - finished.length;
  const row = (run: RunModel) => renderRun(run, nowMs, openDashboard, plots);
  const line = (run: RunModel) => renderFinishedRun(run, row(run), dismissal);
  const older = finished.slice(RECENT_FINISHED_RUNS);
  return h(
    'div',
    { class: 'jp-ft-runs' },
    h('div', { class: 'jp-ft-section-title' }, 'Runs'),
    ...active.map(row),
    ...finished.slice(0, RECENT_FINISHED_RUNS).map(line),
    older.length > 0 &&
      h(
        'details',
        { class: 'jp-ft-runs-older' },
        h('summary', {}, `${older.length} older run${older.length === 1 ? '' : 's'}`),
        ...older.map(line)
      ),
    dismissal !== null &&
      dismissed > 0 &&
      button(
        `Show ${dismissed} dismissed run${dismissed === 1 ? '' : 's'}`,
        'jp-ft-runs-undismiss',
        () => dismissal.restoreAll()
      )
  );
}

/**
 * A finished, failed or cancelled run as one line that opens to the rest of its row:
 * the row's own header (name, badges, buttons) with its progress and a dismiss × is
 * the `<summary>`. The `<details>` is the run's `.jp-ft-run`, with its `data-*`, and its
 * class names the run, so that the panel keeps it open across polls.
 */
export function renderFinishedRun(
  run: RunModel,
  full: HTMLElement,
  dismissal: IRunDismissal | null
): HTMLElement {
  const dismiss = dismissal && button('×', 'jp-ft-run-dismiss', () => dismissal.dismiss(run));
  if (dismiss) {
    dismiss.title = 'Dismiss: hide this finished run from the panel (its journal stays).';
    dismiss.setAttribute('aria-label', `Dismiss run ${run.name}`);
  }
  const key = run.name.toLowerCase().replace(/[^a-z0-9-]/g, '-');
  const details = h('details', {});
  for (const attribute of Array.from(full.attributes)) {
    details.setAttribute(attribute.name, attribute.value);
  }
  details.className = `${full.className} jp-ft-run-finished jp-ft-run-finished--${key}`;
  const header = full.querySelector(':scope > .jp-ft-run-header');
  header?.remove();
  const summary = h(
    'summary',
    { class: 'jp-ft-run-line' },
    ...Array.from(header?.childNodes ?? []),
    h('span', { class: 'jp-ft-run-line-progress' }, progressText(run)),
    dismiss
  );
  // a click on a button of the line (Dashboard, ×) does not open or close it
  summary.addEventListener('click', event => {
    if ((event.target as Element | null)?.closest('button')) {
      event.preventDefault();
    }
  });
  details.append(summary, ...Array.from(full.childNodes));
  return details;
}

/** `data-state` / `data-health` of a run the journals gave no value for yet. */
export const UNKNOWN = 'UNKNOWN';

/**
 * The state badge of a run whose cluster stopped before the run said it ended: its
 * last state (RUNNING, say) is no longer true, and nothing trains or checkpoints.
 */
export const CLUSTER_GONE = 'CLUSTER GONE';

/** What the state badge shows: the run's state, or that its cluster is gone. */
export function shownState(run: RunModel): string {
  if (run.cluster_gone) {
    return CLUSTER_GONE;
  }
  return run.state ?? UNKNOWN;
}

/** The plots of the runs that have a history, and what docks a run's dashboard. */
export interface IRunPlots {
  histories?: Record<string, RunHistoryModel>;
  /** Open the run's dashboard in a main-area tab; no button without it. */
  openDocked?: (run: string) => void;
}

/**
 * One `.jp-ft-run`; its Dashboard button calls `openDashboard(run.name)` (a notebook
 * cell), its Open plots button `plots.openDocked(run.name)` (a main-area tab); with a
 * history, loss and samples/s by step below it.
 */
export function renderRun(
  run: RunModel,
  nowMs: number,
  openDashboard: (run: string) => void,
  plots: IRunPlots = {}
): HTMLElement {
  const history = plots.histories?.[run.name];
  const openDocked = plots.openDocked;
  const state = shownState(run);
  const health = run.cluster_gone ? 'LOST' : (run.health ?? UNKNOWN);
  return h(
    'section',
    {
      class: `jp-ft-run ${modClass(state)}`,
      'data-run': run.name,
      'data-state': state,
      'data-health': health
    },
    h(
      'div',
      { class: 'jp-ft-run-header' },
      h('span', { class: 'jp-ft-run-name' }, run.name),
      h('span', { class: `jp-ft-badge jp-ft-run-state ${modClass(state)}` }, state),
      h('span', { class: `jp-ft-badge jp-ft-run-health ${modClass(health)}` }, health),
      button('Dashboard', 'jp-ft-dashboard', () => openDashboard(run.name)),
      openDocked !== undefined &&
        button('Open plots', 'jp-ft-open-run-dashboard', () => openDocked(run.name))
    ),
    h(
      'div',
      { class: 'jp-ft-run-stats' },
      h('span', { class: 'jp-ft-run-progress' }, progressText(run)),
      run.world_size !== null &&
        h('span', { class: 'jp-ft-run-world' }, `${run.world_size} worker(s)`),
      h('span', { class: 'jp-ft-run-loss' }, `loss ${formatLoss(run.loss)}`),
      renderCheckpointAge(run, nowMs)
    ),
    progressBar(run),
    history !== undefined &&
      h('div', { class: 'jp-ft-run-plots' }, ...renderPlots(runPlotSpecs(history, true))),
    run.recoveries.length > 0 &&
      h('ul', { class: 'jp-ft-recoveries' }, ...run.recoveries.map(renderRecovery))
  );
}

/** `step 120/1000`, `step 120` without a total, `not started` before the first step. */
export function progressText(run: RunModel): string {
  if (run.step === null) {
    return 'not started';
  }
  return run.total_steps === null ? `step ${run.step}` : `step ${run.step}/${run.total_steps}`;
}

function progressBar(run: RunModel): HTMLElement | null {
  if (run.step === null || !run.total_steps) {
    return null;
  }
  const bar = h('progress', {
    class: 'jp-ft-run-bar',
    max: run.total_steps,
    value: Math.min(run.step, run.total_steps)
  });
  return bar;
}

/**
 * `.jp-ft-ckpt-age` with the checkpoint's time in `data-time` (epoch seconds) so
 * `updateAges` can refresh its text every second.
 */
export function renderCheckpointAge(run: RunModel, nowMs: number): HTMLElement {
  return h(
    'span',
    {
      class: 'jp-ft-ckpt-age',
      'data-time': run.checkpoint_time,
      'data-step': run.checkpoint_step
    },
    checkpointText(run.checkpoint_time, run.checkpoint_step, nowMs)
  );
}

/** `ckpt 12 s ago (step 100)`, or `no checkpoint yet`. */
export function checkpointText(
  time: number | null,
  step: number | null,
  nowMs: number
): string {
  if (time === null) {
    return 'no checkpoint yet';
  }
  const at = step === null ? '' : ` (step ${step})`;
  return `ckpt ${formatAge(secondsSince(time, nowMs))} ago${at}`;
}

/** Refresh every checkpoint age under `root` for time `nowMs`. */
export function updateAges(root: ParentNode, nowMs: number): void {
  root.querySelectorAll<HTMLElement>('.jp-ft-ckpt-age[data-time]').forEach(element => {
    const step = element.dataset.step;
    element.textContent = checkpointText(
      Number(element.dataset.time),
      step === undefined ? null : Number(step),
      nowMs
    );
  });
}

/** One `.jp-ft-recovery`: `worker-lost: … · RTO 0.06 s · 3 steps lost · 4 → 3 workers`. */
export function renderRecovery(recovery: RecoveryModel): HTMLElement {
  return h(
    'li',
    { class: 'jp-ft-recovery', 'data-cause': recovery.cause },
    h('span', { class: 'jp-ft-recovery-cause' }, recovery.cause),
    h('span', { class: 'jp-ft-recovery-rto' }, formatRto(recovery.rto_s)),
    h(
      'span',
      { class: 'jp-ft-recovery-lost' },
      `${recovery.steps_lost} step${recovery.steps_lost === 1 ? '' : 's'} lost`
    ),
    h(
      'span',
      { class: 'jp-ft-recovery-workers' },
      `${recovery.workers_before} → ${recovery.workers_after} workers`
    )
  );
}
