/**
 * nbcompile for JupyterLab: gutter markers in %%compile cells, driven by the latest report in
 * the cell's outputs (the kernel replaces it in place as the panel re-runs), and the
 * "nbcompile: Copy annotation snippet" command (palette and cell toolbar).
 *
 * The kernel replaces a report with update_display under a display id. JupyterLab routes such
 * updates only to outputs it saw displayed in this page; after a reload (kernel still running)
 * it drops them. So the extension routes them too, by the id the report output carries in its
 * metadata, which the notebook file keeps.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Clipboard, ICommandPalette, Notification } from '@jupyterlab/apputils';
import { Cell, CodeCell, ICodeCellModel } from '@jupyterlab/cells';
import { CodeMirrorEditor } from '@jupyterlab/codemirror';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { markerGutter, setMarkers } from './gutter';
import { watchKernel } from './disconnect';
import { IDisplayContent, IOutputJSON, IReport, isCompileCell, latestReport, markers, outputsToReplace } from './report';

export const COPY_COMMAND = 'nbcompile:copy-snippet';

const injected = new WeakSet<Cell>();

function cellReport(cell: Cell | null): IReport | null {
  if (!(cell instanceof CodeCell)) {
    return null;
  }
  return latestReport(cell.model.outputs.toJSON() as { data?: Record<string, unknown> }[]);
}

/** Put the markers of the cell's latest report in its editor (none if it is not a %%compile cell). */
export function updateCell(cell: Cell): void {
  const editor = cell.editor as CodeMirrorEditor | null;
  if (!editor || !(cell instanceof CodeCell)) {
    return;
  }
  const source = cell.model.sharedModel.getSource();
  const report = isCompileCell(source) ? cellReport(cell) : null;
  if (!report && !injected.has(cell)) {
    return;
  }
  if (!injected.has(cell)) {
    editor.injectExtension(markerGutter);
    injected.add(cell);
  }
  editor.editor.dispatch({ effects: setMarkers.of(report ? markers(report, source) : []) });
}

function watchCell(cell: Cell): void {
  if (!(cell instanceof CodeCell)) {
    return;
  }
  void cell.ready.then(() => {
    updateCell(cell);
    cell.model.outputs.changed.connect(() => updateCell(cell));
  });
}

/** Replace the report outputs of the notebook that a kernel display message is for (see above). */
function followDisplays(panel: NotebookPanel, content: IDisplayContent): void {
  const cells = panel.content.model?.cells;
  if (!cells) {
    return;
  }
  for (let c = 0; c < cells.length; c++) {
    const cell = cells.get(c);
    if (cell.type !== 'code') {
      continue;
    }
    const outputs = (cell as ICodeCellModel).outputs;
    const current: IOutputJSON[] = [];
    for (let i = 0; i < outputs.length; i++) {
      current.push(outputs.get(i).toJSON() as IOutputJSON);
    }
    const output = { output_type: 'display_data', data: content.data, metadata: content.metadata } as
      Parameters<typeof outputs.set>[1];
    for (const i of outputsToReplace(current, content)) {
      outputs.set(i, output);
    }
  }
}

function watchNotebook(panel: NotebookPanel): void {
  watchKernel(panel);
  panel.sessionContext.iopubMessage.connect((_, msg) => {
    const type = msg.header.msg_type;
    if (type === 'update_display_data' || type === 'display_data') {
      followDisplays(panel, msg.content as unknown as IDisplayContent);
    }
  });
  void panel.revealed.then(() => {
    panel.content.widgets.forEach(watchCell);
    panel.content.model?.cells.changed.connect((_, change) => {
      if (change.type === 'add') {
        // the new cell widgets exist once the notebook has laid them out
        requestAnimationFrame(() => panel.content.widgets.forEach(cell => {
          if (!injected.has(cell)) {
            watchCell(cell);
          }
        }));
      }
    });
  });
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'nbcompile:plugin',
  description: 'Graph-break gutter markers and the annotation snippet command for %%compile cells.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker, palette: ICommandPalette | null) => {
    tracker.widgetAdded.connect((_, panel) => watchNotebook(panel));
    tracker.forEach(watchNotebook);
    app.commands.addCommand(COPY_COMMAND, {
      label: 'nbcompile: Copy annotation snippet',
      caption: 'Copy the toggles of this %%compile cell as code to paste',
      isEnabled: () => !!cellReport(tracker.activeCell)?.snippet,
      execute: () => {
        const snippet = cellReport(tracker.activeCell)?.snippet;
        if (!snippet) {
          Notification.warning('nbcompile: the active cell has no report with a snippet; run a %%compile cell first');
          return;
        }
        Clipboard.copyToSystem(snippet);
        Notification.success('nbcompile: annotation snippet copied');
      }
    });
    palette?.addItem({ command: COPY_COMMAND, category: 'nbcompile' });
  }
};

export default plugin;
