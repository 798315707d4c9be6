/**
 * The commands that dock a run's or a service's dashboard in the main area (one tab
 * per run or service: asked again, the open tab comes forward), their palette entries
 * ("Open Run Dashboard…", "Open Service Dashboard…", which ask which one when not
 * told), and their restoration with the layout.
 */
import type { ILayoutRestorer, JupyterFrontEnd } from '@jupyterlab/application';
import {
  ICommandPalette,
  InputDialog,
  MainAreaWidget,
  Notification,
  WidgetTracker
} from '@jupyterlab/apputils';
import type { Widget } from '@lumino/widgets';

import type { FtApi } from './api';
import { RunDashboard, ServiceDashboard } from './dashboard';
import { resilienceIcon } from './icons';

export namespace DashboardCommandIDs {
  export const openRun = 'ft-notebook:open-run-dashboard';
  export const openService = 'ft-notebook:open-service-dashboard';
}

/** The palette category, as the other commands'. */
const CATEGORY = 'Fault tolerance';

export interface IDashboardOptions {
  api: FtApi;
  palette: ICommandPalette | null;
  restorer: ILayoutRestorer | null;
}

/** The id of a run's dashboard tab (names are safe: letters, digits, `.`, `_`, `-`). */
export function runDashboardId(run: string): string {
  return `ft-notebook-run-dashboard-${run}`;
}

export function serviceDashboardId(cluster: string, service: string): string {
  return `ft-notebook-service-dashboard-${cluster}-${service}`;
}

/** Register the dashboard commands, palette entries and layout restoration. */
export function registerDashboards(app: JupyterFrontEnd, options: IDashboardOptions): void {
  const { api } = options;
  const runs = new WidgetTracker<MainAreaWidget<RunDashboard>>({ namespace: 'ft-notebook-run-dashboards' });
  const services = new WidgetTracker<MainAreaWidget<ServiceDashboard>>({
    namespace: 'ft-notebook-service-dashboards'
  });

  const dock = <T extends Widget>(
    tracker: WidgetTracker<MainAreaWidget<T>>,
    id: string,
    label: string,
    make: () => T
  ) => {
    const open = tracker.find(widget => widget.id === id);
    if (open) {
      app.shell.activateById(id);
      return open;
    }
    const widget = new MainAreaWidget({ content: make() });
    widget.id = id;
    widget.title.label = label;
    widget.title.icon = resilienceIcon;
    widget.title.closable = true;
    void tracker.add(widget);
    app.shell.add(widget, 'main');
    app.shell.activateById(id);
    return widget;
  };

  app.commands.addCommand(DashboardCommandIDs.openRun, {
    label: args => (typeof args.run === 'string' ? `Open Run Dashboard of ${args.run}` : 'Open Run Dashboard…'),
    caption: 'A run\'s loss, throughput, recoveries and state in a main-area tab',
    execute: async args => {
      let run = typeof args.run === 'string' ? args.run : null;
      if (run === null) {
        const names = (await api.runs()).sort((a, b) => b.updated - a.updated).map(r => r.name);
        if (names.length === 0) {
          Notification.warning('No run has a journal yet: start one with ft.fit(...).', { autoClose: 5000 });
          return;
        }
        const asked = await InputDialog.getItem({ title: 'Open the dashboard of run', items: names });
        run = asked.button.accept ? asked.value : null;
      }
      if (run) {
        const name = run;
        dock(runs, runDashboardId(name), `Run ${name}`, () => new RunDashboard(name, () => api.runHistory(name)));
      }
    }
  });

  app.commands.addCommand(DashboardCommandIDs.openService, {
    label: args =>
      typeof args.service === 'string' ? `Open Service Dashboard of ${args.service}` : 'Open Service Dashboard…',
    caption: 'A service\'s requests/s, p99 latency and tier in a main-area tab',
    execute: async args => {
      const cluster = typeof args.cluster === 'string' ? args.cluster : 'default';
      let service = typeof args.service === 'string' ? args.service : null;
      if (service === null) {
        const names = (await api.services(cluster).catch(() => [])).map(s => s.name);
        if (names.length === 0) {
          Notification.warning(`No service runs on cluster ${cluster}: start one with ft.serve(...).`, {
            autoClose: 5000
          });
          return;
        }
        const asked = await InputDialog.getItem({ title: `Open the dashboard of a service of ${cluster}`, items: names });
        service = asked.button.accept ? asked.value : null;
      }
      if (service) {
        const name = service;
        dock(
          services,
          serviceDashboardId(cluster, name),
          `Service ${name}`,
          () => new ServiceDashboard(cluster, name, () => api.serviceHistory(cluster, name))
        );
      }
    }
  });

  options.palette?.addItem({ command: DashboardCommandIDs.openRun, category: CATEGORY });
  options.palette?.addItem({ command: DashboardCommandIDs.openService, category: CATEGORY });
  if (options.restorer) {
    void options.restorer.restore(runs, {
      command: DashboardCommandIDs.openRun,
      args: widget => ({ run: widget.content.run }),
      name: widget => widget.content.run
    });
    void options.restorer.restore(services, {
      command: DashboardCommandIDs.openService,
      args: widget => ({ cluster: widget.content.cluster, service: widget.content.service }),
      name: widget => `${widget.content.cluster}/${widget.content.service}`
    });
  }
}
