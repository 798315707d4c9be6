/**
 * What the panel's cluster buttons do: start a cluster (a JupyterLab dialog asks for
 * its name and workers), scale it, stop it (after a confirmation dialog). Each action
 * is a POST to the server extension; its progress and outcome show as JupyterLab
 * notifications with the server's own message (which says what to do on an error),
 * and while it runs the cluster's buttons wait, saying what is under way.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import type { ReadonlyJSONValue } from '@lumino/coreutils';
import { Widget } from '@lumino/widgets';

import type { FtApi } from './api';
import type { IClusterActions } from './view/clusters';

/** What the start dialog asks for. */
export interface IStartRequest {
  name: string;
  workers: number;
}

/** The body of the start dialog: a cluster name and a number of workers. */
export class StartClusterForm extends Widget implements Dialog.IBodyWidget<IStartRequest> {
  constructor(defaults: IStartRequest) {
    super();
    this.addClass('jp-ft-start-form');
    this._name = labelled(this.node, 'Cluster name', 'text', defaults.name, 'jp-ft-start-name');
    this._workers = labelled(
      this.node,
      'Workers',
      'number',
      String(defaults.workers),
      'jp-ft-start-workers'
    );
    this._workers.min = '1';
    this._workers.step = '1';
  }

  getValue(): IStartRequest {
    return { name: this._name.value.trim(), workers: Number(this._workers.value) };
  }

  private readonly _name: HTMLInputElement;
  private readonly _workers: HTMLInputElement;
}

function labelled(
  parent: HTMLElement,
  text: string,
  type: string,
  value: string,
  className: string
): HTMLInputElement {
  const label = document.createElement('label');
  label.textContent = text;
  const input = document.createElement('input');
  input.type = type;
  input.value = value;
  input.className = `jp-mod-styled ${className}`;
  label.append(input);
  parent.append(label);
  return input;
}

export class ClusterControls implements IClusterActions {
  /**
   * @param api - the server extension's client
   * @param baseUrl - the Jupyter server's base URL (for proxied dashboard links)
   * @param changed - called when an action starts or ends: re-render and re-poll
   */
  constructor(
    private readonly api: FtApi,
    readonly baseUrl: string,
    private readonly changed: () => void
  ) {}

  busy(name: string): string | null {
    return this._busy.get(name) ?? null;
  }

  starting(): string | null {
    return this._starting;
  }

  async start(): Promise<void> {
    const result = await showDialog({
      title: 'Start a private cluster',
      body: new StartClusterForm({ name: 'default', workers: 2 }),
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Start' })]
    });
    if (!result.button.accept || result.value === null) {
      return;
    }
    const { name, workers } = result.value;
    this._starting = `Starting ${name}…`;
    await this.track(
      this.api.startCluster(name, workers),
      `Starting cluster ${name} with ${workers} worker(s)…`,
      `Cluster ${name} started.`,
      () => (this._starting = null)
    );
  }

  async scale(name: string, workers: number): Promise<void> {
    this._busy.set(name, 'Scaling…');
    await this.track(
      this.api.scaleCluster(name, workers),
      `Scaling cluster ${name} to ${workers} worker(s)…`,
      `Cluster ${name} has ${workers} worker(s).`,
      () => this._busy.delete(name)
    );
  }

  async stop(name: string): Promise<void> {
    const result = await showDialog({
      title: `Stop cluster ${name}?`,
      body:
        `Its scheduler and every worker stop, with the data they hold. Runs and services ` +
        'on it stop too (a run resumes from its last checkpoint on a new cluster).',
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Stop' })]
    });
    if (!result.button.accept) {
      return;
    }
    this._busy.set(name, 'Stopping…');
    await this.track(
      this.api.stopCluster(name),
      `Stopping cluster ${name}…`,
      `Cluster ${name} stopped.`,
      () => this._busy.delete(name)
    );
  }

  private async track(
    action: Promise<unknown>,
    pending: string,
    success: string,
    done: () => void
  ): Promise<void> {
    this.changed();
    // the models are JSON, as the server sent them
    Notification.promise(action as Promise<ReadonlyJSONValue>, {
      pending: { message: pending, options: { autoClose: false } },
      success: { message: () => success, options: { autoClose: 5000 } },
      error: {
        message: (reason: unknown) => (reason instanceof Error ? reason.message : String(reason)),
        options: { autoClose: false }
      }
    });
    try {
      await action;
    } catch {
      // the notification shows the server's message
    } finally {
      done();
      this.changed();
    }
  }

  private readonly _busy = new Map<string, string>();
  private _starting: string | null = null;
}
