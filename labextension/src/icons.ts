/**
 * The extension's icon: a shield with a heartbeat line, drawn in the theme's icon
 * colour (`jp-icon3`) so it follows light and dark themes.
 */
import { LabIcon } from '@jupyterlab/ui-components';

const SHIELD_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="none" stroke="#616161" stroke-width="2" stroke-linejoin="round" stroke-linecap="round">
    <path d="M12 2 4 5v6c0 5 3.4 9.4 8 11 4.6-1.6 8-6 8-11V5z"/>
    <path d="M7 12h3l1.5-3 2 6 1.5-3h2"/>
  </g>
</svg>`;

export const resilienceIcon = new LabIcon({ name: 'ft-notebook:resilience', svgstr: SHIELD_SVG });
