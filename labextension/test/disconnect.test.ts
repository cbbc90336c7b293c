import type { NotebookPanel } from '@jupyterlab/notebook';
import { Signal } from '@lumino/signaling';

import {
  BANNER_CLASS, DISCONNECTED_CLASS, ICellLike, INotebookLike, PANEL_CLASS, markDisconnected, panelsIn, watchKernel
} from '../src/disconnect';

// index.ts hands watchKernel a NotebookPanel: this only has to type-check
export const acceptsANotebookPanel = (panel: NotebookPanel): (() => void) => watchKernel(panel);

function panelElement(parent: HTMLElement): HTMLElement {
  const panel = document.createElement('div');
  panel.className = `${PANEL_CLASS} widget-vbox`;
  panel.innerHTML = '<button>disable</button><input type="checkbox"><div class="nbcompile-status">check ok</div>';
  parent.appendChild(panel);
  return panel;
}

function cell(source: string): ICellLike {
  const node = document.createElement('div');
  node.innerHTML = '<div class="jp-OutputArea-output"><div class="jupyter-widgets widget-vbox">' +
    '<button>compile</button></div></div>';
  return { node, model: { sharedModel: { getSource: () => source } } };
}

class FakeNotebook implements INotebookLike {
  readonly node = document.createElement('div');
  readonly content: { widgets: ICellLike[] } = { widgets: [] };
  readonly statusChanged = new Signal<this, string>(this);
  readonly kernelChanged = new Signal<this, { oldValue: unknown; newValue: unknown }>(this);
  readonly sessionContext = { statusChanged: this.statusChanged, kernelChanged: this.kernelChanged };
}

const banners = (root: ParentNode): string[] =>
  Array.from(root.querySelectorAll(`.${BANNER_CLASS}`)).map(b => b.textContent ?? '');

afterEach(() => document.body.replaceChildren());

test('a restart marks every panel of the notebook with a banner and disables its controls', () => {
  const nb = new FakeNotebook();
  document.body.appendChild(nb.node);
  const panels = [panelElement(nb.node), panelElement(nb.node)];
  watchKernel(nb);
  nb.statusChanged.emit('busy');
  nb.statusChanged.emit('idle');
  expect(banners(nb.node)).toEqual([]);  // a live kernel: nothing changes
  nb.statusChanged.emit('restarting');
  expect(banners(nb.node)).toEqual([
    'disconnected (the kernel restarted): re-run the cell to use this panel again',
    'disconnected (the kernel restarted): re-run the cell to use this panel again'
  ]);
  for (const panel of panels) {
    expect(panel.classList.contains(DISCONNECTED_CLASS)).toBe(true);
    expect(panel.firstElementChild?.className).toBe(BANNER_CLASS);  // on top, where it is seen
    expect(panel.querySelector('button')?.disabled).toBe(true);
    expect((panel.querySelector('input') as HTMLInputElement).disabled).toBe(true);
  }
  nb.statusChanged.emit('starting');
  nb.statusChanged.emit('restarting');  // a second restart: still one banner per panel
  expect(banners(nb.node)).toHaveLength(2);
});

test('a panel drawn after the restart (the cell re-run) is not marked', () => {
  const nb = new FakeNotebook();
  const old = panelElement(nb.node);
  watchKernel(nb);
  nb.statusChanged.emit('restarting');
  nb.statusChanged.emit('idle');
  const fresh = panelElement(nb.node);
  expect(old.classList.contains(DISCONNECTED_CLASS)).toBe(true);
  expect(fresh.classList.contains(DISCONNECTED_CLASS)).toBe(false);
  expect(fresh.querySelector('button')?.disabled).toBe(false);
});

test('a dead kernel and a changed kernel say so; a first kernel does not', () => {
  const nb = new FakeNotebook();
  const panel = panelElement(nb.node);
  watchKernel(nb);
  nb.kernelChanged.emit({ oldValue: null, newValue: {} });  // the notebook's first kernel
  expect(banners(nb.node)).toEqual([]);
  nb.statusChanged.emit('dead');
  expect(banners(panel)).toEqual(['disconnected (the kernel died): re-run the cell to use this panel again']);
  const other = new FakeNotebook();
  panelElement(other.node);
  watchKernel(other);
  other.kernelChanged.emit({ oldValue: {}, newValue: {} });
  expect(banners(other.node)).toEqual([
    'disconnected (the notebook changed kernels): re-run the cell to use this panel again']);
});

test('widget outputs of %%compile cells count as panels, other cells\' widgets do not', () => {
  const compileCell = cell('%%compile --run "f(x)"\ndef f(x):\n    return x\n');
  const otherCell = cell('import ipywidgets\nipywidgets.Button()');
  const found = panelsIn(document.createElement('div'), [compileCell, otherCell]);
  expect(found).toEqual([compileCell.node.querySelector('.jupyter-widgets')]);
  expect(markDisconnected(found, 'the kernel restarted')).toEqual(found);
  expect(markDisconnected(found, 'the kernel restarted')).toEqual([]);  // once
  expect(otherCell.node.querySelector(`.${BANNER_CLASS}`)).toBeNull();
});

test('unwatching stops the marking', () => {
  const nb = new FakeNotebook();
  panelElement(nb.node);
  const unwatch = watchKernel(nb);
  unwatch();
  nb.statusChanged.emit('restarting');
  expect(banners(nb.node)).toEqual([]);
});
