import { EditorState } from '@codemirror/state';
import { EditorView } from '@codemirror/view';

import { TIP_CLOSE_DELAY_MS, markedLines, markerGutter, openTip, setMarkers, tipField } from '../src/gutter';
import { IMarker, IReport, markers } from '../src/report';
import { Cause, Fix } from '../src/report-schema';

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

// Issue 34: a call the user disabled with nbcompile's toggle. The cause as the kernel writes it now: torch's
// hint "Remove the `torch.compiler.disable` call" (a call nbcompile made, nowhere in the user's code) is replaced
// by nbcompile's own, and the gutter shows that.
const DISABLED_SOURCE = '%%compile --run "caller(torch.ones(3))"\nimport torch\ndef helper(x):\n    return x.cos() * 2\n' +
  'def caller(x):\n    return helper(x.sin()) + 1\n';

function disabledReport(): IReport {
  const compileBack: Fix = {
    command: '%nbcompile set helper compile', why: 'helper is disabled by this session; compiling it lets Dynamo trace it inline',
    warnings: [], verified: true, effect: 'breaks 1 -> 0, graphs 2 -> 1, check ok', action: null
  };
  const cause: Cause = {
    count: 1, cell_line: 6, filename: '<ipython-input-1-b3da036a77ee>', lineno: 6,
    gb_type: 'Skip calling `torch.compiler.disable()`d function',
    reason: 'Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):', fixes: [compileBack],
    function: 'caller', source_line: 'return helper(x.sin()) + 1',
    explanation: 'Skip calling function `<function helper at 0x7f055757a660>` since it was wrapped with `torch.compiler.disable`',
    hints: ["helper is disabled by you (nbcompile's toggle): it runs eagerly, as you chose; toggle it back to compile " +
      '(%nbcompile set helper compile) to trace it'],
    gb_id: 'GB0098', doc_url: 'https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0098.html',
    compile_ids: ['0/1'], count_text: 'x1: 1 break event at this line (compile 0/1)'
  };
  const report: Partial<IReport> = {  // the fields the gutter reads; the schema may gain others meanwhile
    title: '%%compile [1]: caller', backend: 'eager', mode: null, fullgraph: false, dynamic: null, dynamo_config: {},
    schema_version: 1, stage: 'complete', interrupted: false, compiled_again: '', torch_breaks: null, counts_said: '', skipped: [], cache: { hits: 0, misses: 0, reasons: [] },
    graph_count: 2, break_count: 1, splits: 1, recompile_count: 0, frame_count: 2, compile_time_s: 0.1, result: null,
    graphs: [], frames: [], recompiles: [], kernels: [], errors: [], warnings: [], snippet: '', dropped: {}, notice: '',
    torch_log: [], fallbacks: [], check: null, breaks: [], causes: [cause]
  };
  return report as IReport;
}

test("a call you disabled reads in nbcompile's words in its tooltip, never torch's 'Remove the disable call'", () => {
  const v = view(DISABLED_SOURCE);
  v.dispatch({ effects: setMarkers.of(markers(disabledReport(), DISABLED_SOURCE)) });
  expect(markedLines(v)).toEqual([6]);
  openTip(v, 6);
  const tip = document.querySelector('.cm-tooltip.nbcompile-tip') as HTMLElement;
  const text = tip.textContent ?? '';
  expect(text).toContain('helper is disabled by you');
  expect(text).toContain('toggle it back to compile (%nbcompile set helper compile)');
  expect(text).not.toContain('Remove the');
  expect(text).toContain('Skip calling function `helper` since');  // torch's repr of the function, as its name
  expect(text).not.toContain('0x7f055757a660');
});
