/** Renderer for application/vnd.nbcompile.report+json: works with no kernel (a reopened notebook). */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { IReport, MIME_TYPE } from './report';
import { renderReport } from './render';

export class ReportWidget extends Widget implements IRenderMime.IRenderer {
  constructor() {
    super();
    this.addClass('nbcompile-report-output');
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const report = model.data[MIME_TYPE] as unknown as IReport;
    this.node.replaceChildren(renderReport(report));
    return Promise.resolve();
  }
}

export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [MIME_TYPE],
  createRenderer: () => new ReportWidget()
};

const extension: IRenderMime.IExtension = {
  id: 'nbcompile:report-renderer',
  rendererFactory,
  rank: 0,
  dataType: 'json',
  fileTypes: [],
  documentWidgetFactoryOptions: []
};

export default extension;
