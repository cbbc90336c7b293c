import { EditorState } from '@codemirror/state';
import { EditorView } from '@codemirror/view';

import { TIP_CLOSE_DELAY_MS, markedLines, markerGutter, openTip, setMarkers, tipField } from '../src/gutter';
import { IMarker } from '../src/report';

function view(doc: string): EditorView {
  return new EditorView({ state: EditorState.create({ doc, extensions: [markerGutter] }), parent: document.body });
}

const marker = (line: number): IMarker => ({
  line, kind: 'break', title: 't', lines: [`reason ${line}`, 'hint: h'],
  links: [{ text: 'GB0059', href: 'https://meta-pytorch.org/compile-graph-break-site/gb/gb0059.html' }]
});

// jsdom has no layout; CodeMirror's tooltip positioning asks text ranges for their rectangles
Range.prototype.getClientRects = () => [] as unknown as DOMRectList;
Range.prototype.getBoundingClientRect = () => new DOMRect();

afterEach(() => {
  jest.useRealTimers();
  document.body.replaceChildren();
});

test('markers land on their lines, without a plain title that would hide the tooltip', () => {
  const v = view('%%compile\ndef f(x):\n    print(x)\n    return x\n');
  v.dispatch({ effects: setMarkers.of([marker(3), marker(99)]) });
  expect(markedLines(v)).toEqual([3]);
  const dom = v.dom.querySelector('.nbcompile-marker');
  expect(dom?.getAttribute('data-line')).toBe('3');
  expect(dom?.hasAttribute('title')).toBe(false);
  expect(v.dom.querySelector('.nbcompile-tip')).toBeNull();  // nothing inside the gutter
});

// jsdom lays nothing out: hovering, which finds the line by its height, is tested in the browser
test('the marker tooltip has the reason and a GB link, and lives outside the gutter', () => {
  const v = view('%%compile\ndef f(x):\n    print(x)\n    return x\n');
  v.dispatch({ effects: setMarkers.of([marker(3)]) });
  openTip(v, 3);
  const tip = document.querySelector('.cm-tooltip.nbcompile-tip') as HTMLElement;
  expect(tip).not.toBeNull();
  expect(v.dom.querySelector('.nbcompile-gutter')?.contains(tip)).toBe(false);
  expect(tip.querySelector('.nbcompile-tip-reason')?.textContent).toBe('reason 3');
  const a = tip.querySelector('a');
  expect(a?.getAttribute('href')).toBe('https://meta-pytorch.org/compile-graph-break-site/gb/gb0059.html');
  expect(a?.textContent).toBe('GB0059');
});

test('the tooltip stays open while the mouse is on it, and closes after it leaves', () => {
  jest.useFakeTimers();
  const v = view('%%compile\ndef f(x):\n    print(x)\n    return x\n');
  v.dispatch({ effects: setMarkers.of([marker(3)]) });
  openTip(v, 3);
  const gutterDom = v.dom.querySelector('.nbcompile-gutter') as HTMLElement;
  gutterDom.dispatchEvent(new MouseEvent('mouseout', { bubbles: true }));  // the mouse leaves the marker...
  const tip = document.querySelector('.nbcompile-tip') as HTMLElement;
  tip.dispatchEvent(new MouseEvent('mouseenter'));  // ...for the tooltip, in time
  jest.advanceTimersByTime(TIP_CLOSE_DELAY_MS * 3);
  expect(v.state.field(tipField)?.line).toBe(3);
  tip.dispatchEvent(new MouseEvent('mouseleave'));
  jest.advanceTimersByTime(TIP_CLOSE_DELAY_MS + 1);
  expect(v.state.field(tipField)).toBeNull();
});

test('an open tooltip follows a new report on its line and goes with its marker', () => {
  const v = view('%%compile\ndef f(x):\n    print(x)\n    return x\n');
  v.dispatch({ effects: setMarkers.of([marker(3)]) });
  openTip(v, 3);
  v.dispatch({ effects: setMarkers.of([{ ...marker(3), lines: ['new reason'] }]) });
  expect(v.state.field(tipField)?.info.lines).toEqual(['new reason']);
  v.dispatch({ effects: setMarkers.of([marker(4)]) });
  expect(v.state.field(tipField)).toBeNull();
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
