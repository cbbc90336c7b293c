/**
 * Issue 22, from a real JupyterLab tour of a training cell (docs/training_*.png): graphs led by where their
 * code is, readable op names, "0 splits" beside breaks said why, check figures named by their run, a
 * gutter tooltip of bounded height that lists its causes one per line with their counts.
 */
import { EditorState } from '@codemirror/state';
import { EditorView } from '@codemirror/view';

import { TIP_MAX_HEIGHT_PX, markerGutter, openTip, setMarkers, tipDOM } from '../src/gutter';
import {
  IReport, SESSION_RUN, TIP_CAUSE_CHARS, causeLine, cutText, graphPlaces, guardText, markers, opLabel, plainText,
  statusLines, summary
} from '../src/report';
import { renderReport } from '../src/render';
import { Frame, GraphBreak } from '../src/report-schema';

const CELL = '<ipython-input-2-58c94ad9c669>';
const ADAM = '/home/me/.venv/lib/python3.11/site-packages/torch/optim/adam.py';

function frame(compile_id: string, fn: string, filename: string, firstlineno: number, graph_count: number): Frame {
  return {
    compile_id, function: fn, guards: [], guards_said: [], guard_count: 0, compile_time_s: 0.1, filename, firstlineno, graph_count,
    trace_overhead_s: 0, guard_latency_us: null, guard_check_us: null, backend_time_s: null, inductor_time_s: null, collectives: [], cache: [], inputs: {}
  };
}

function brk(compile_id: string, fn: string, line: number, gb_type: string, explanation: string): GraphBreak {
  return {
    function: fn, filename: CELL, lineno: line, cell_line: line, source_line: `line ${line}`, reason: 'r', gb_type,
    gb_id: 'GB0124', explanation, hints: ['Set `torch._dynamo.config.capture_scalar_outputs = True` or ' + 'x'.repeat(400)],
    doc_url: 'https://example.org/gb0124', compile_id,
    fixes: [{ command: `%nbcompile set ${fn} disable`, why: 'w', warnings: [], verified: null, effect: '', action: null }]
  };
}

/** The training cell of the tour: train_step skipped at line 25, forward and AdamW's step compiled apart. */
function tour(extra: Partial<IReport> = {}): IReport {
  const breaks = [
    brk('0/0', 'train_step', 25, 'Attempted to inline function marked as skipped', 'Optimizer.zero_grad is skipped'),
    brk('2/0', 'log_loss', 22, 'Unsupported Tensor.item() call with capture_scalar_outputs=False',
      'Dynamo does not support tracing `Tensor.item()` with config.capture_scalar_outputs=False.'),
    brk('2/0', 'log_loss', 22, 'Unsupported builtin print', 'print is a side effect')
  ];
  return {
    title: '%%compile [2]: train_step, net', backend: 'eager', mode: null, fullgraph: false, dynamic: null, dynamo_config: {},
    schema_version: 1, stage: 'complete', interrupted: false, compiled_again: '', torch_breaks: null, counts_said: '', skipped: [], cache: { hits: 0, misses: 0, reasons: [] }, graph_count: 2, break_count: 3, splits: 0, recompile_count: 0, frame_count: 5,
    compile_time_s: 0.1, result: null,
    graphs: [
      { compile_id: '1/0', op_count: 3, ops: ['linear', 'relu', 'mean'], function: 'forward', torch_callables: [] },
      { compile_id: '4/0', op_count: 4, ops: ['iadd', 'mul_', 'fma.default', 'add.Tensor'], function: 'step', torch_callables: [] }
    ],
    frames: [frame('0/0', 'train_step', CELL, 24, 0), frame('1/0', 'forward', CELL, 14, 1),
      frame('2/0', 'log_loss', CELL, 21, 0), frame('4/0', 'step', ADAM, 214, 1),
      frame('5/0', 'torch_dynamo_resume_in_train_step_at_25', CELL, 25, 0)],
    recompiles: [], kernels: [], errors: [], warnings: [], snippet: '', dropped: {}, notice: '', torch_log: [],
    fallbacks: [], causes: [], breaks,
    check: { ok: true, max_abs_diff: 1e-7, message: 'matches eager (71 values compared)', compared: true, rule: 'fp64',
      compiled_error: 1.5e-5, eager_error: 1.6e-5, run: 'cell', source: '' },
    ...extra
  };
}

/** The tour's report with two sites on cell line 22 (its cell ran twice: two cell files). */
function twoCauses(): IReport {
  const r = tour();
  const item = r.breaks[1];
  r.causes = [
    { count: 2, cell_line: 22, filename: CELL, lineno: 22, gb_type: item.gb_type, reason: 'r', fixes: item.fixes,
      function: 'log_loss', source_line: 'print(...)', explanation: 'no item', hints: item.hints, gb_id: 'GB0124',
      doc_url: 'https://example.org/gb0124', compile_ids: ['2/0', '2/1'], count_text: 'x2: two compiles' },
    { count: 1, cell_line: 22, filename: '<ipython-input-1-aaa>', lineno: 22, gb_type: 'Unsupported builtin print',
      reason: 'r', fixes: item.fixes, function: 'log_loss', source_line: 'print(...)', explanation: 'no print',
      hints: [], gb_id: 'GB0059', doc_url: 'https://example.org/gb0059', compile_ids: ['7/0'], count_text: '' }
  ];
  return r;
}

const SOURCE = Array.from({ length: 30 }, (_, i) => (i === 0 ? '%%compile --run "train_step()"' : `line ${i + 1}`)).join('\n');

afterEach(() => document.body.replaceChildren());

test('the Graphs table leads with where each graph is and readable ops; the compile id is a small last column', () => {
  expect(graphPlaces(tour())).toEqual(['forward (cell line 14)', 'step (torch/optim/adam.py:214)']);
  const graphs = renderReport(tour()).querySelector('.nbcompile-graphs') as HTMLElement;
  expect([...graphs.querySelectorAll('th')].map(th => th.textContent)).toEqual(['#', 'where', 'ops', 'id']);
  const rows = [...graphs.querySelectorAll('tr')].slice(1).map(tr => [...tr.querySelectorAll('td')].map(td => td.textContent));
  expect(rows[0][1]).toBe('forward (cell line 14)');
  expect(rows[1][1]).toBe('step (torch/optim/adam.py:214)');
  expect(rows[1][2]).toBe('4: iadd, mul_, fma, add');  // `fma.default` and `add.Tensor` read as the ops they are
  expect(graphs.textContent).not.toContain('fma.default');
  const id = graphs.querySelector('.nbcompile-compile-id') as HTMLElement;
  expect(id.textContent).toBe('1/0');
  expect(id.title).toContain('compile id');
  expect(opLabel('multi_head_attention_forward')).toBe('multi_head_attention_forward');
});

test('a resumed frame is named by the line it resumes after, not by a compile id', () => {
  const r = tour({
    graphs: [{ compile_id: '5/0', op_count: 1, ops: ['mul'], function: 'torch_dynamo_resume_in_train_step_at_25',
      torch_callables: [] }]
  });
  expect(graphPlaces(r)).toEqual(['train_step (after line 25)']);
});

test('"0 splits" beside breaks says why, in the summary and the breaks section; with splits it says only the count', () => {
  const node = renderReport(tour());
  const said = "0 splits (no call's graph was cut in two: torch compiled the code around the breaks as separate frames)";
  expect(summary(tour())).toContain(`3 graph breaks, ${said}, 2 causes`);
  expect(node.querySelector('.nbcompile-causes summary')?.textContent).toBe(`Graph breaks: 3 events from 2 causes, ${said}`);
  expect(summary(tour({ splits: 2 }))).toContain('3 graph breaks, 2 splits, 2 causes');
  expect(summary(tour({ splits: 2 }))).not.toContain('cut in two');
});

test('the check names the run its figures come from', () => {
  const [check] = statusLines(tour());
  expect(check.label).toBe(`check ok (${SESSION_RUN})`);
  expect(check.detail).toContain('re-run on copies');
  expect(check.detail).toContain("The Fix tab's trials are judged on copies of their own");
  const node = renderReport(tour());
  expect(node.querySelector('.nbcompile-status-check b')?.textContent).toBe("check ok (the session's run)");
});

test('the gutter tooltip lists its causes first, one line each with its count, and is capped in height', () => {
  const [one] = markers(tour(), SOURCE).filter(x => x.line === 22);
  expect(one.causes).toBe(1);  // two events at one site: one cause, counted
  expect(one.lines[0].startsWith('x2 Unsupported Tensor.item() call with capture_scalar_outputs=False (GB0124)')).toBe(true);
  // two sites on one cell line (the cell ran twice: two files): both causes on top, then their details
  const twice = twoCauses();
  const [m] = markers(twice, SOURCE).filter(x => x.line === 22);
  expect(m.causes).toBe(2);
  expect(m.lines.slice(0, 2)).toEqual([  // in the causes' order: the cell's lines, then file by file
    'x1 Unsupported builtin print (GB0059): no print',
    'x2 Unsupported Tensor.item() call with capture_scalar_outputs=False (GB0124): no item'
  ]);
  expect(m.lines.slice(2)).toContain('fix: %nbcompile set log_loss disable');
  expect(m.lines.filter(l => l.startsWith('fix: '))).toHaveLength(1);  // the same fix said once
  const hint = m.lines.find(l => l.startsWith('hint: ')) as string;
  expect(hint.length).toBeLessThanOrEqual(170);  // torch's long hint cut, with an ellipsis
  expect(hint.endsWith('…')).toBe(true);
  expect(m.links.map(l => l.text)).toEqual(['GB0059', 'GB0124']);

  const tip = tipDOM(m);
  expect(tip.style.maxHeight).toBe(`${TIP_MAX_HEIGHT_PX}px`);
  expect(tip.style.overflowY).toBe('auto');
  const causes = [...tip.querySelectorAll('.nbcompile-tip-cause')] as HTMLElement[];
  expect(causes.map(c => c.textContent)).toEqual(m.lines.slice(0, 2));
  expect(causes.every((c, i) => c.title === m.lines[i])).toBe(true);  // whole on hover
  expect(tip.querySelectorAll('.nbcompile-tip-line')).toHaveLength(m.lines.length - 2);
});

// jsdom has no layout; CodeMirror's tooltip positioning asks text ranges for their rectangles
Range.prototype.getClientRects = () => [] as unknown as DOMRectList;
Range.prototype.getBoundingClientRect = () => new DOMRect();

test('the capped tooltip is what the editor shows', () => {
  const v = new EditorView({ state: EditorState.create({ doc: SOURCE, extensions: [markerGutter] }), parent: document.body });
  v.dispatch({ effects: setMarkers.of(markers(twoCauses(), SOURCE)) });
  openTip(v, 22);
  const tip = document.querySelector('.cm-tooltip.nbcompile-tip') as HTMLElement;
  expect(tip.style.maxHeight).toBe(`${TIP_MAX_HEIGHT_PX}px`);
  expect(tip.querySelectorAll('.nbcompile-tip-cause')).toHaveLength(2);
});

// -- the tour's second pass: cut between words, a marker where the user's call reaches installed code, plain names

test('a tooltip cuts a long cause between words with an ellipsis, never inside its GB id', () => {
  const long = 'x1 Attempted to inline function marked as skipped but the function lives in a module Dynamo always skips ' +
    '(GB0008): Dynamo developers have intentionally marked that the function should not be traced.';
  const gb = long.indexOf('GB0008');
  expect(gb).toBeLessThan(TIP_CAUSE_CHARS);  // a cut by characters lands inside the id
  expect(gb + 'GB0008'.length).toBeGreaterThan(TIP_CAUSE_CHARS - 1);
  const said = cutText(long, TIP_CAUSE_CHARS);
  expect(said.endsWith('…')).toBe(true);
  expect(said.length).toBeLessThanOrEqual(TIP_CAUSE_CHARS);
  expect(said).not.toMatch(/GB\d{0,3}…/);
  expect(long.startsWith(said.slice(0, -1))).toBe(true);
  expect(long[said.length - 1]).toMatch(/[\s(]/);  // the cut falls where a word ended
  const r = tour();
  r.breaks[0].gb_type = long.slice(3, long.indexOf(' (GB0008)'));
  r.breaks[0].gb_id = 'GB0008';
  const [m] = markers(r, SOURCE).filter(x => x.line === 25);
  const row = tipDOM(m).querySelector('.nbcompile-tip-cause') as HTMLElement;
  expect(row.textContent?.endsWith('…')).toBe(true);
  expect(row.textContent).not.toMatch(/GB\d{0,3}…/);
  expect(row.title).toBe(m.lines[0]);  // the whole line on hover
  expect(m.title).not.toMatch(/GB\d{0,3}…/);
});

const STEP_CELL = ['%%compile --run "train_step()"', 'import torch', 'def train_step():', '    opt.zero_grad()',
  '    loss = net(X)', '    loss.backward()', '    opt.step()  # AdamW', '    return loss'].join('\n');

test('a break inside installed code is marked on the cell line whose call reaches it', () => {
  const inside: GraphBreak = {
    function: '_use_grad', filename: '/work/.venv/lib/python3.11/site-packages/torch/optim/optimizer.py', lineno: 79,
    cell_line: null, source_line: 'torch._dynamo.graph_break()', reason: 'r', gb_type: 'Call to `torch._dynamo.graph_break()`',
    gb_id: 'GB0025', explanation: 'User-inserted graph break. Message: None', hints: [], doc_url: null, compile_id: '2/0',
    fixes: [{ command: '', why: 'the break is inside AdamW.step (installed code: torch/optim/optimizer.py:79, in its ' +
      'wrapper _use_grad), which is not yours to edit: call `opt.step()` (line 7) outside train_step', warnings: [],
    verified: null, effect: '', action: null }]
  };
  const r = tour({ breaks: [inside], causes: [] });
  const found = markers(r, STEP_CELL);
  expect(found.map(x => x.line)).toEqual([7]);
  expect(found[0].lines[0]).toContain('(in torch/optim/optimizer.py:79)');
  expect(found[0].lines.some(l => l.startsWith('fix: the break is inside AdamW.step'))).toBe(true);
  expect(found[0].lines.join('\n')).not.toContain('site-packages');
  // a line that does not hold the call named is never marked
  expect(causeLine({ ...r.breaks[0], count: 1, compile_ids: [], count_text: '' }, STEP_CELL.replace('opt.step()', 'pass').split('\n'))).toBeNull();
  const node = renderReport(r, STEP_CELL);
  expect(node.querySelector('.nbcompile-causes')?.textContent).toContain('torch/optim/optimizer.py:79 (reached from cell line 7)');
});

test('the renderer shows no venv paths, function reprs, log lines or raw guards', () => {
  const venv = '/work/main/.venv/lib/python3.11/site-packages/torch/optim/adamw.py';
  expect(plainText(`Graph break in user code at ${venv}:88 calling <function helper at 0x7f3a2b1c0d60>\n` +
    'W1123 12:00:00.123000 5990 torch/_logging/_internal.py:1345] [2/0] record')).toBe(
    'Graph break in user code at torch/optim/adamw.py:88 calling helper');
  expect(guardText("EQUALS_MATCH: G['SCALE'] == 2")).toBe('EQUALS_MATCH: SCALE == 2');
  expect(guardText("TYPE_MATCH: ___check_type_id(L['___stack0'], 9412)")).toBe(
    'TYPE_MATCH: type(a value on the stack) is the same type');
  const r = tour();
  r.frames[0].guards = ["ID_MATCH: ___check_obj_id(G['helper'].__code__, 1396)", "TENSOR_MATCH: check_tensor(L['x'])"];
  r.breaks[0].explanation = `see ${venv}:3`;
  const text = renderReport(r).textContent ?? '';
  expect(text).toContain('helper.__code__ is the same object');
  expect(text).toContain('check_tensor(x)');
  expect(text).toContain('see torch/optim/adamw.py:3');
  expect(text).not.toMatch(/site-packages|[GL]\['|___check/);
});

test('the guards are shown as the report says them, else translated here (a report saved before guards_said)', () => {
  const r = tour();
  r.frames[0].guards = ["___dict_contains('k', G['CFG'])"];
  r.frames[0].guards_said = ["'k' in CFG"];
  expect(renderReport(r).textContent).toContain("'k' in CFG");
  expect(renderReport(r).textContent).not.toContain('___dict_contains');
  const old = tour() as any;
  old.frames[0].guards = ["EQUALS_MATCH: G['SCALE'] == 2"];
  delete old.frames[0].guards_said;
  expect(renderReport(old).textContent).toContain('EQUALS_MATCH: SCALE == 2');
});
