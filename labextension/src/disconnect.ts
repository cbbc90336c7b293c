/**
 * After a kernel restart the nbcompile panels still drawn in a notebook have nothing behind them: their
 * widgets' models and the sessions they act on lived in the old kernel, so a click does nothing. Rather
 * than let them look alive, each one is marked: a banner on top ("disconnected ...: re-run the cell"), its
 * controls disabled, and the `nbcompile-disconnected` class. A panel drawn by a later run is a new element,
 * unmarked. The static report (the mime renderer's output) is plain data and stays as it is.
 *
 * A panel is found by its root class (`nbcompile-panel`, set by the Python panel), and, in `%%compile` cells,
 * as the top-level widget view of an output.
 */
import type { ISignal } from '@lumino/signaling';

import { isCompileCell } from './report';

export const PANEL_CLASS = 'nbcompile-panel';
export const DISCONNECTED_CLASS = 'nbcompile-disconnected';
export const BANNER_CLASS = 'nbcompile-disconnected-banner';

/** Kernel statuses after which the old kernel's objects are gone, and what the banner says of each. */
export const GONE: Readonly<Record<string, string>> = {
  restarting: 'the kernel restarted',
  autorestarting: 'the kernel died and restarted',
  dead: 'the kernel died'
};

export function bannerText(reason: string): string {
  return `disconnected (${reason}): re-run the cell to use this panel again`;
}

/** The nbcompile panels drawn under `root`: by their class, and in `cells` that are %%compile cells, the
 * top-level widget view of each output. */
export function panelsIn(root: ParentNode, cells: readonly ICellLike[] = []): HTMLElement[] {
  const found = new Set<HTMLElement>(root.querySelectorAll<HTMLElement>(`.${PANEL_CLASS}`));
  for (const cell of cells) {
    if (isCompileCell(cell.model.sharedModel.getSource())) {
      cell.node.querySelectorAll<HTMLElement>('.jp-OutputArea-output > .jupyter-widgets').forEach(n => found.add(n));
    }
  }
  return Array.from(found);
}

/** Mark each panel not marked yet: a banner first, its controls disabled. Returns the panels marked now. */
export function markDisconnected(panels: readonly HTMLElement[], reason: string): HTMLElement[] {
  const marked: HTMLElement[] = [];
  for (const panel of panels) {
    if (panel.classList.contains(DISCONNECTED_CLASS)) {
      continue;
    }
    panel.classList.add(DISCONNECTED_CLASS);
    const banner = panel.ownerDocument.createElement('div');
    banner.className = BANNER_CLASS;
    banner.setAttribute('role', 'status');
    banner.textContent = bannerText(reason);
    banner.style.cssText = 'background:#fff3cd;color:#664d03;border:1px solid #ffda6a;border-radius:3px;' +
      'padding:4px 8px;margin-bottom:6px;font-weight:bold';
    panel.prepend(banner);
    panel.querySelectorAll<HTMLButtonElement | HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement>(
      'button, input, select, textarea').forEach(control => {
      control.disabled = true;
    });
    marked.push(panel);
  }
  return marked;
}

/** What a cell widget offers that this module reads (a JupyterLab `Cell`). */
export interface ICellLike {
  readonly node: HTMLElement;
  readonly model: { readonly sharedModel: { getSource(): string } };
}

/** What a notebook offers that this module reads (a JupyterLab `NotebookPanel`). */
export interface INotebookLike {
  readonly node: HTMLElement;
  readonly content: { readonly widgets: readonly ICellLike[] };
  readonly sessionContext: {
    readonly statusChanged: ISignal<unknown, string>;
    readonly kernelChanged: ISignal<unknown, { readonly oldValue: unknown; readonly newValue: unknown }>;
  };
}

/** Mark the notebook's panels whenever its kernel restarts, dies or is replaced; returns the unwatch. */
export function watchKernel(notebook: INotebookLike): () => void {
  const mark = (reason: string): void => {
    markDisconnected(panelsIn(notebook.node, notebook.content.widgets), reason);
  };
  const onStatus = (_: unknown, status: string): void => {
    if (status in GONE) {
      mark(GONE[status]);
    }
  };
  const onKernel = (_: unknown, change: { readonly oldValue: unknown }): void => {
    if (change.oldValue) {
      mark('the notebook changed kernels');
    }
  };
  notebook.sessionContext.statusChanged.connect(onStatus);
  notebook.sessionContext.kernelChanged.connect(onKernel);
  return () => {
    notebook.sessionContext.statusChanged.disconnect(onStatus);
    notebook.sessionContext.kernelChanged.disconnect(onKernel);
  };
}
