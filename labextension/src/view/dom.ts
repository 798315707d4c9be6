/**
 * A tiny element builder, so the renderers read as the DOM they make. Text is always
 * set as text (never HTML): names and messages come from the server and may hold `<`.
 */

/** Attributes: `class` and `data-*` as strings; `false`/`null` leave one out. */
export type Attributes = Record<string, string | number | boolean | null | undefined>;

/** A child: an element, text, or nothing (skipped). */
export type Child = Node | string | null | undefined | false;

/** Make `<tag ...attributes>children</tag>`. */
export function h(tag: string, attributes: Attributes = {}, ...children: Child[]): HTMLElement {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) {
      continue;
    }
    element.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) {
      continue;
    }
    element.append(child);
  }
  return element;
}

/** A `<button>` that calls `onClick`; `disabled` greys it out with a reason. */
export function button(
  label: string,
  className: string,
  onClick: () => void,
  disabledReason: string | null = null
): HTMLButtonElement {
  const element = h(
    'button',
    {
      type: 'button',
      class: `jp-ft-button ${className}`,
      disabled: disabledReason !== null,
      title: disabledReason
    },
    label
  ) as HTMLButtonElement;
  element.addEventListener('click', () => onClick());
  return element;
}

/** A class-safe form of a server value, e.g. `lost` → `jp-ft-mod-lost`. */
export function modClass(value: string): string {
  return `jp-ft-mod-${value.toLowerCase().replace(/[^a-z0-9-]/g, '-')}`;
}
