/**
 * The snapshots of the active notebook, with "Snapshot now" and "Restore" buttons that
 * run `%ft save` / `%ft restore` in its kernel.
 */
import { formatAge, formatBytes, secondsSince } from '../format';
import type { SnapshotModel } from '../models';
import type { ISnapshotsView } from '../state';
import { button, h } from './dom';

/** What the snapshot buttons do, and whether they can (a notebook with a kernel). */
export interface ISnapshotActions {
  snapshot(): void;
  /** Restore `name`, or the newest (`latest`) when not given. */
  restore(name?: string): void;
  /** Why the buttons are disabled (no kernel), or null when they work. */
  disabledReason: string | null;
}

/** The `.jp-ft-snapshots` section, or a hint to open a notebook when none is. */
export function renderSnapshots(
  view: ISnapshotsView | null,
  nowMs: number,
  actions: ISnapshotActions
): HTMLElement {
  if (view === null) {
    return h(
      'section',
      { class: 'jp-ft-snapshots' },
      h('div', { class: 'jp-ft-section-title' }, 'Snapshots'),
      h('div', { class: 'jp-ft-snapshots-empty' }, 'Open a notebook to see its snapshots.')
    );
  }
  const name = view.path.split('/').pop() ?? view.path;
  let body: HTMLElement;
  if (view.snapshots === null) {
    body = h(
      'div',
      { class: 'jp-ft-snapshots-error', 'data-kind': view.error?.kind ?? 'http' },
      view.error?.message ?? 'The snapshots could not be listed.'
    );
  } else if (view.snapshots.length === 0) {
    body = h(
      'div',
      { class: 'jp-ft-snapshots-empty' },
      'No snapshots yet. "Snapshot now" takes one; `%ft auto on` takes one after every cell.'
    );
  } else {
    const list = h(
      'ul',
      { class: 'jp-ft-snapshot-list' },
      ...view.snapshots.map(s => renderSnapshot(s, nowMs, actions))
    );
    // renamed in Jupyter: a kernel started under the new name restores these too
    const renamed = view.snapshots.find(s => s.renamed_from)?.renamed_from;
    body = renamed
      ? h(
          'div',
          {},
          h(
            'div',
            { class: 'jp-ft-snapshots-renamed', 'data-renamed-from': renamed },
            `Taken before this notebook was renamed (as ${renamed}); Restore brings them back.`
          ),
          list
        )
      : list;
  }
  return h(
    'section',
    { class: 'jp-ft-snapshots', 'data-path': view.path },
    h('div', { class: 'jp-ft-section-title' }, `Snapshots of ${name}`),
    h(
      'div',
      { class: 'jp-ft-snapshot-actions' },
      button('Snapshot now', 'jp-ft-snapshot-now', () => actions.snapshot(), actions.disabledReason),
      button('Restore', 'jp-ft-restore', () => actions.restore(), actions.disabledReason)
    ),
    body
  );
}

/** Variable names a snapshot row spells out before `+N more`. */
export const SHOWN_VARIABLES = 4;

/** `model, opt, df, step +3 more`: the first names of a snapshot, then how many more. */
export function variablesText(variables: string[], shown: number = SHOWN_VARIABLES): string {
  if (variables.length === 0) {
    return 'no variables';
  }
  const more = variables.length - shown;
  return variables.slice(0, shown).join(', ') + (more > 0 ? ` +${more} more` : '');
}

/** One `.jp-ft-snapshot`: name, when, after which cell, size, variables. */
export function renderSnapshot(
  snapshot: SnapshotModel,
  nowMs: number,
  actions: ISnapshotActions
): HTMLElement {
  const variables = snapshot.variables.length;
  return h(
    'li',
    {
      class: 'jp-ft-snapshot',
      'data-snapshot': snapshot.name,
      'data-pinned': snapshot.pinned,
      title: snapshot.variables.join(', ')
    },
    h('span', { class: 'jp-ft-snapshot-name' }, snapshot.name),
    h(
      'span',
      { class: 'jp-ft-snapshot-meta' },
      `${formatAge(secondsSince(snapshot.time, nowMs))} ago · cell ${snapshot.cell} · ` +
        `${variables} variable${variables === 1 ? '' : 's'} · ${formatBytes(snapshot.size)}`
    ),
    // the names, cut short (and ellipsised by CSS); the tooltip lists them all
    h(
      'span',
      {
        class: 'jp-ft-snapshot-variables',
        title: snapshot.variables.join(', ') || 'no variables',
        'data-count': variables
      },
      variablesText(snapshot.variables)
    ),
    button(
      'Restore',
      'jp-ft-snapshot-restore',
      () => actions.restore(snapshot.name),
      actions.disabledReason
    )
  );
}
