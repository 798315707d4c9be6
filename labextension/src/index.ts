/**
 * The ft_notebook frontend plugin: a "Resilience" sidebar panel, a status bar item and
 * commands, all fed by one poller of the server extension's REST API.
 *
 * Every dependency is optional: without the status bar there is no status item,
 * without notebooks no snapshots or toolbar buttons, and the panel still shows
 * clusters and runs.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { IStatusBar } from '@jupyterlab/statusbar';

import { FtApi } from './api';
import { ClusterControls } from './clustercontrols';
import { CommandIDs, registerCommands } from './commands';
import { DashboardCommandIDs, registerDashboards } from './dashboards';
import { RunDismissals } from './dismissals';
import { PANEL_ID, ResiliencePanel } from './panel';
import { Poller } from './polling';
import { fetchResilience, IResilience } from './state';
import { MEMORY_ITEM_ID, MemoryStatus, ResilienceStatus, STATUS_ITEM_ID } from './statusbar';

/** Why the snapshot buttons are disabled, or null when a notebook has a kernel. */
function snapshotDisabledReason(tracker: INotebookTracker | null): string | null {
  const panel = tracker?.currentWidget ?? null;
  if (panel === null) {
    return 'Open a notebook first.';
  }
  return panel.sessionContext.session?.kernel ? null : 'Start the notebook\'s kernel first.';
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'ft-notebook:plugin',
  description: 'Fault-tolerance toolkit for notebooks (frontend).',
  autoStart: true,
  optional: [ILayoutRestorer, IStatusBar, ICommandPalette, INotebookTracker],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    statusBar: IStatusBar | null,
    palette: ICommandPalette | null,
    tracker: INotebookTracker | null
  ): void => {
    const api = new FtApi(app.serviceManager.serverSettings);
    const poller = new Poller<IResilience>({
      // localPath: without a drive prefix (e.g. "RTC:"), as the kernel's path has it
      fetch: () =>
        fetchResilience(
          api,
          tracker?.currentWidget?.context.localPath ?? null,
          tracker?.currentWidget?.sessionContext.session?.kernel?.id ?? null
        )
    });
    const clusterControls = new ClusterControls(api, app.serviceManager.serverSettings.baseUrl, () => {
      panel.update();
      void poller.refresh();
    });
    const runDismissals = new RunDismissals(window.localStorage, () => panel.update());

    const panel = new ResiliencePanel({
      poller,
      actions: {
        snapshot: () => void app.commands.execute(CommandIDs.snapshot),
        restore: name => void app.commands.execute(CommandIDs.restore, name ? { snapshot: name } : {}),
        openDashboard: run => void app.commands.execute(CommandIDs.openDashboard, { run }),
        clusters: clusterControls,
        runs: runDismissals,
        openRunDashboard: run => void app.commands.execute(DashboardCommandIDs.openRun, { run }),
        openServiceDashboard: (cluster, service) =>
          void app.commands.execute(DashboardCommandIDs.openService, { cluster, service })
      },
      snapshotDisabledReason: () => snapshotDisabledReason(tracker)
    });
    app.shell.add(panel, 'left', { rank: 600 });
    restorer?.add(panel, PANEL_ID);

    registerDashboards(app, { api, palette, restorer });

    registerCommands(app, {
      tracker,
      palette,
      panelId: PANEL_ID,
      onSnapshotsChanged: () => poller.refresh()
    });

    if (statusBar) {
      const item = new ResilienceStatus({
        poller,
        onClick: () => void app.commands.execute(CommandIDs.openPanel)
      });
      item.id = 'ft-notebook-status';
      statusBar.registerStatusItem(STATUS_ITEM_ID, { item, align: 'left', rank: 10 });
      const memory = new MemoryStatus(poller);
      memory.id = 'ft-notebook-memory';
      statusBar.registerStatusItem(MEMORY_ITEM_ID, { item: memory, align: 'left', rank: 11 });
    }

    if (tracker) {
      // another notebook means other snapshots, and other buttons enabled
      const notebookChanged = () => {
        poller.refresh();
        panel.update();
      };
      tracker.currentChanged.connect(notebookChanged);
      tracker.widgetAdded.connect((_, notebook) => {
        notebook.sessionContext.sessionChanged.connect(notebookChanged);
        notebook.sessionContext.kernelChanged.connect(() => panel.update());
      });
    }
  }
};

export default plugin;
export { formatStatus } from './status';
