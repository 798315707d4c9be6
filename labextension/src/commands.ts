/**
 * The extension's commands: snapshot and restore in the notebook's kernel, open a run's
 * dashboard in a new cell, reveal the panel. All are in the palette under "Fault
 * tolerance"; snapshot and restore are also notebook toolbar buttons.
 */
import type { JupyterFrontEnd } from '@jupyterlab/application';
import { ICommandPalette, Notification } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { CommandToolbarButton } from '@jupyterlab/ui-components';
import type { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import { dashboardCode, ftMagicCode, restoreLine } from './code';
import { runInKernel } from './kernel';

export namespace CommandIDs {
  export const snapshot = 'ft-notebook:snapshot';
  export const restore = 'ft-notebook:restore';
  export const openDashboard = 'ft-notebook:open-dashboard';
  export const openPanel = 'ft-notebook:open-panel';
}

/** The palette category of every command. */
export const CATEGORY = 'Fault tolerance';

export interface ICommandsOptions {
  /** Absent when the notebook plugin is disabled: the notebook commands then say so. */
  tracker: INotebookTracker | null;
  palette: ICommandPalette | null;
  /** The id of the sidebar panel `open-panel` reveals. */
  panelId: string;
  /** Called after a snapshot or restore, so the panel lists the new snapshot. */
  onSnapshotsChanged: () => void;
}

/** Register the commands, palette items and toolbar buttons. */
export function registerCommands(app: JupyterFrontEnd, options: ICommandsOptions): void {
  const { commands } = app;
  const { tracker } = options;

  /** The notebook `args.notebook` names (a toolbar button's own), else the current one. */
  const notebookOf = (args: ReadonlyPartialJSONObject): NotebookPanel | null => {
    const id = typeof args.notebook === 'string' ? args.notebook : null;
    const found = id === null ? null : tracker?.find(panel => panel.id === id);
    return found ?? tracker?.currentWidget ?? null;
  };
  const hasKernel = (args: ReadonlyPartialJSONObject): boolean =>
    !!notebookOf(args)?.sessionContext.session?.kernel;

  const runMagic = (args: ReadonlyPartialJSONObject, line: string, pending: string) => {
    const kernel = notebookOf(args)?.sessionContext.session?.kernel;
    if (!kernel) {
      Notification.warning('Open a notebook with a running kernel first.', { autoClose: 5000 });
      return Promise.resolve();
    }
    const run = runInKernel(kernel, ftMagicCode(line));
    Notification.promise(run, {
      pending: { message: pending, options: { autoClose: false } },
      success: { message: result => String(result || 'Done.'), options: { autoClose: 6000 } },
      error: { message: reason => errorMessage(reason), options: { autoClose: false } }
    });
    return run.then(
      () => options.onSnapshotsChanged(),
      () => options.onSnapshotsChanged()
    );
  };

  commands.addCommand(CommandIDs.snapshot, {
    label: 'Snapshot Notebook Now',
    caption: 'Snapshot the kernel\'s variables now (%ft save)',
    isEnabled: hasKernel,
    execute: args => runMagic(args, 'save', 'Taking a snapshot…')
  });

  commands.addCommand(CommandIDs.restore, {
    label: args => (typeof args.snapshot === 'string' ? `Restore ${args.snapshot}` : 'Restore Latest Snapshot'),
    caption: 'Bring a snapshot\'s variables back into the kernel (%ft restore)',
    isEnabled: hasKernel,
    execute: args => {
      let line: string;
      try {
        line = restoreLine(typeof args.snapshot === 'string' ? args.snapshot : undefined);
      } catch (error) {
        Notification.error(errorMessage(error), { autoClose: false });
        return;
      }
      return runMagic(args, line, 'Restoring the snapshot…');
    }
  });

  commands.addCommand(CommandIDs.openDashboard, {
    label: args => (typeof args.run === 'string' ? `Open Dashboard of ${args.run}` : 'Open Run Dashboard'),
    caption: 'Insert a cell that shows the live dashboard of a run, and run it',
    execute: async args => {
      const run = typeof args.run === 'string' ? args.run : '';
      const panel = notebookOf(args);
      if (!run) {
        Notification.warning('Which run? Use the Dashboard button of a run in the Resilience panel.', {
          autoClose: 5000
        });
        return;
      }
      if (panel === null) {
        Notification.warning(`Open a notebook to show the dashboard of ${run}: it is shown in a new cell.`, {
          autoClose: 6000
        });
        return;
      }
      app.shell.activateById(panel.id);
      NotebookActions.insertBelow(panel.content);
      panel.content.activeCell?.model.sharedModel.setSource(dashboardCode(run));
      await NotebookActions.run(panel.content, panel.sessionContext);
    }
  });

  commands.addCommand(CommandIDs.openPanel, {
    label: 'Show Resilience Panel',
    caption: 'Clusters, runs and snapshots at a glance',
    execute: () => app.shell.activateById(options.panelId)
  });

  for (const command of [CommandIDs.snapshot, CommandIDs.restore, CommandIDs.openPanel]) {
    options.palette?.addItem({ command, category: CATEGORY });
  }
  if (tracker) {
    addToolbarButtons(app, tracker);
  }
}

/**
 * Snapshot and restore buttons in every notebook's toolbar.
 *
 * Added on `widgetAdded` rather than through the settings-based toolbar factory: that
 * one needs a settings schema shipped with the package (this package has none) and
 * fixes the buttons' place in the user's settings; here the buttons need no settings
 * and each carries its own notebook's id, so it acts on that notebook even when
 * another one is current.
 */
function addToolbarButtons(app: JupyterFrontEnd, tracker: INotebookTracker): void {
  const notify = () => {
    app.commands.notifyCommandChanged(CommandIDs.snapshot);
    app.commands.notifyCommandChanged(CommandIDs.restore);
  };
  tracker.widgetAdded.connect((_, panel) => {
    const args = { notebook: panel.id };
    const buttons: Array<[string, string]> = [
      ['ft-notebook-snapshot', CommandIDs.snapshot],
      ['ft-notebook-restore', CommandIDs.restore]
    ];
    // after the cell type selector when there is one; customised toolbars may lack it
    let after = 'cellType';
    for (const [name, id] of buttons) {
      const label = id === CommandIDs.snapshot ? 'Snapshot' : 'Restore';
      const button = new CommandToolbarButton({ commands: app.commands, id, args, label });
      if (!panel.toolbar.insertAfter(after, name, button)) {
        panel.toolbar.addItem(name, button);
      }
      after = name;
    }
    // the buttons are disabled until the kernel is there, and again when it goes
    panel.sessionContext.kernelChanged.connect(notify);
    panel.sessionContext.sessionChanged.connect(notify);
  });
  tracker.currentChanged.connect(notify);
}

function errorMessage(reason: unknown): string {
  return reason instanceof Error ? reason.message : String(reason);
}
