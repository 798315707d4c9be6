import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';

/**
 * The ft_notebook frontend plugin. For now it only registers itself.
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: 'ft-notebook:plugin',
  description: 'Fault-tolerance toolkit for notebooks (frontend).',
  autoStart: true,
  activate: (app: JupyterFrontEnd): void => {
    console.log(`JupyterLab extension ft-notebook:plugin is activated (${app.name})`);
  }
};

export default plugin;
export { formatStatus } from './status';
