import { EditorState } from '@codemirror/state';
import { EditorView } from '@codemirror/view';

import { markedLines, markerGutter, setMarkers } from '../src/gutter';
import { IMarker } from '../src/report';

function view(doc: string): EditorView {
  return new EditorView({ state: EditorState.create({ doc, extensions: [markerGutter] }), parent: document.body });
}

const marker = (line: number): IMarker => ({ line, kind: 'break', title: 't', lines: ['reason'], links: [] });

test('markers land on their lines and render a tooltip', () => {
  const v = view('%%compile\ndef f(x):\n    print(x)\n    return x\n');
  v.dispatch({ effects: setMarkers.of([marker(3), marker(99)]) });
  expect(markedLines(v)).toEqual([3]);
  const dom = v.dom.querySelector('.nbcompile-marker');
  expect(dom?.textContent).toContain('reason');
});

test('markers shift when lines are inserted above, and go when their line is edited', () => {
  const v = view('%%compile\ndef f(x):\n    print(x)\n    return x\n');
  v.dispatch({ effects: setMarkers.of([marker(3), marker(4)]) });
  v.dispatch({ changes: { from: 0, insert: 'import torch\n' } });
  expect(markedLines(v)).toEqual([4, 5]);
  const line = v.state.doc.line(4);
  v.dispatch({ changes: { from: line.from + 4, to: line.from + 9, insert: 'log' } });
  expect(markedLines(v)).toEqual([5]);
  v.dispatch({ effects: setMarkers.of([]) });
  expect(markedLines(v)).toEqual([]);
});
