import {
  isCompileCell, latestReport, markers, MIME_TYPE, outputsToReplace, recompileLines, IReport, reportDisplayId, summary
} from '../src/report';
import { renderReport } from '../src/render';
import { FixAction } from '../src/report-schema';

/** A fix's action with only the fields of its kind set, as the kernel writes it. */
function action(fields: Partial<FixAction> & Pick<FixAction, 'kind'>): FixAction {
  return {
    toggles: {}, config: '', value: null, mark: null, param: '', dim: null, subject: '', cell_line: null, before: '',
    after: '', rule: '', ...fields
  };
}

function report(extra: Partial<IReport> = {}): IReport {
  return {
    title: '%%compile [3]: outer', backend: 'eager', mode: null, fullgraph: false, dynamic: null, dynamo_config: {}, schema_version: 1, stage: 'complete', interrupted: false, compiled_again: '', torch_breaks: null, counts_said: '', skipped: [], cache: { hits: 0, misses: 0, reasons: [] },
    graph_count: 2, break_count: 2, recompile_count: 0, frame_count: 2, compile_time_s: 0.1, result: null,
    graphs: [], frames: [], recompiles: [], kernels: [], errors: [], warnings: [], snippet: '', dropped: {}, notice: '', torch_log: [],
    fallbacks: [], causes: [], splits: 1,
    check: { ok: true, max_abs_diff: 0, message: 'matches eager', compared: true, rule: 'fp64', compiled_error: 0, eager_error: 0, run: 'copies', source: '' },
    breaks: [1, 2].map(() => ({
      function: 'helper', filename: '<ipython-input-3>', lineno: 4, cell_line: 4, source_line: 'print("x")',
      reason: 'r', gb_type: 'Failed to trace builtin operator', gb_id: 'GB0059', explanation: 'no print',
      hints: ['Avoid print'], doc_url: 'https://example.org/gb0059', compile_id: '0/0',
      fixes: [{ command: '%nbcompile set helper disable', why: 'runs eagerly', warnings: [], verified: null, effect: '',
        action: action({ kind: 'toggle', toggles: { helper: 'disable' } }) }]
    })),
    ...extra
  };
}

const SOURCE = '%%compile --run "outer(x)"\nimport torch\ndef helper(x):\n    print("x")\n    return x\nSCALE = 2\ndef outer(x):\n    return helper(x) * SCALE\n';

test('compile cells are recognised by their first line', () => {
  expect(isCompileCell(SOURCE)).toBe(true);
  expect(isCompileCell('%%compile')).toBe(true);
  expect(isCompileCell('x = 1\n%%compile')).toBe(false);
  expect(isCompileCell('%%compiled')).toBe(false);
});

test('the latest report among the outputs wins', () => {
  const a = report({ title: 'old' });
  const b = report({ title: 'new' });
  expect(latestReport([{ data: { [MIME_TYPE]: a } }, { data: { 'text/plain': 'x' } }, { data: { [MIME_TYPE]: b } }])?.title).toBe('new');
  expect(latestReport([{ data: { 'text/plain': 'x' } }, {}])).toBeNull();
});

test('one marker per break line, with reason, fix, hint and the GB link', () => {
  const [m] = markers(report(), SOURCE);
  expect(m.line).toBe(4);
  expect(m.kind).toBe('break');
  expect(m.lines).toEqual([
    'x2 Failed to trace builtin operator (GB0059): no print', 'fix: %nbcompile set helper disable', 'hint: Avoid print',
    // what x2 counts (the report's count_text, else said here from the events' compile ids)
    'count: x2: 2 break events at this line, from 1 compile (0/0): the line ran more than once in one compile; one cause, one fix'
  ]);
  expect(m.causes).toBe(1);
  expect(m.links).toEqual([{ text: 'GB0059', href: 'https://example.org/gb0059' }]);
});

test('unsafe doc links are dropped and breaks outside the cell are not marked', () => {
  const r = report();
  r.breaks[0].doc_url = 'javascript:alert(1)';
  r.breaks[1].cell_line = null;
  const [m] = markers(r, SOURCE);
  expect(m.links).toEqual([]);
  expect(markers(r, SOURCE)).toHaveLength(1);
});

test('recompile reasons mark the function and the globals they name', () => {
  const lines = SOURCE.split('\n');
  expect(recompileLines('outer', "G['SCALE'] == 2", lines)).toEqual([6, 7, 8]);
  expect(recompileLines('torch_dynamo_resume_in_helper_at_4', 'size mismatch', lines)).toEqual([3]);
  expect(recompileLines('outer', 'SCALE == 2', lines, ['SCALE'])).toEqual([6, 7, 8]);
  const r = report({ breaks: [], recompiles: [{
    function: 'outer', compile_id: '1/1', reason: "G['SCALE'] == 2", changes: [], cell_line: null, fixes: []
  }] });
  expect(markers(r, SOURCE).map(m => [m.line, m.kind])).toEqual([[6, 'recompile'], [7, 'recompile'], [8, 'recompile']]);
});

test('the rendered report escapes every text it shows', () => {
  const r = report({ title: '<img src=x onerror=alert(1)>' });
  r.breaks[0].source_line = '<script>alert(1)</script>';
  const node = renderReport(r);
  expect(node.querySelector('img')).toBeNull();
  expect(node.querySelector('script')).toBeNull();
  expect(node.textContent).toContain('<script>alert(1)</script>');
  expect(node.querySelector('.nbcompile-summary')?.textContent).toBe('2 frames, 2 graphs, 2 graph breaks, 1 split, 1 cause, 0 recompiles, compile 0.10 s, check ok');
  expect(node.querySelector('a')?.getAttribute('href')).toBe('https://example.org/gb0059');
});

test('allow_in_graph lint warnings are rendered, with their line and message', () => {
  const r = report({
    warnings: [{
      function: 'helper', rule: 'captured-tensor', variable: 'W', lineno: 12, cell_line: 5,
      message: 'helper reads the global tensor W: <b>captured</b>'
    }]
  });
  const lint = renderReport(r).querySelector('.nbcompile-lint');
  expect(lint?.querySelector('summary')?.textContent).toBe('allow_in_graph lint (1 warning)');
  const cells = [...(lint?.querySelectorAll('td') ?? [])].map(td => td.textContent);
  expect(cells).toEqual(['helper', 'captured-tensor', 'W', '5', 'helper reads the global tensor W: <b>captured</b>']);
  expect(lint?.querySelector('b')).toBeNull();
});

test('the summary counts as the Python one does: plurals and errors', () => {
  const r = report({
    frame_count: 1, graph_count: 1, break_count: 1, splits: 0, breaks: report().breaks.slice(0, 1),
    errors: [{ function: 'f', compile_id: '0/0', fail_type: 'Unsupported', message: 'boom' }]
  });
  expect(summary(r)).toBe('1 frame, 1 graph, 1 graph break, 0 splits (no call\'s graph was cut in two: torch compiled the ' +
    'code around the breaks as separate frames), 1 cause, 0 recompiles, compile 0.10 s, 1 error, check ok');
});

test('a display message replaces the saved report outputs that carry its display id, and only those', () => {
  const meta = (id: string) => ({ [MIME_TYPE]: { display_id: id } });
  const saved = [
    { output_type: 'display_data', data: { 'application/vnd.jupyter.widget-view+json': {} }, metadata: {} },
    { output_type: 'display_data', data: { [MIME_TYPE]: report({ title: 'old' }) }, metadata: meta('nbcompile-a') },
    { output_type: 'display_data', data: { [MIME_TYPE]: report({ title: 'other' }) }, metadata: meta('nbcompile-b') }
  ];
  expect(saved.map(reportDisplayId)).toEqual([null, 'nbcompile-a', 'nbcompile-b']);
  const update = { data: { [MIME_TYPE]: report({ title: 'new' }) }, metadata: meta('nbcompile-a'), transient: { display_id: 'nbcompile-a' } };
  expect(outputsToReplace(saved, update)).toEqual([1]);
  // already replaced (JupyterLab routed it itself, before any reload): nothing to do
  expect(outputsToReplace([saved[0], { output_type: 'display_data', data: update.data, metadata: update.metadata }], update)).toEqual([]);
  // no transient id, or a display that is not a report: not ours
  expect(outputsToReplace(saved, { ...update, transient: {} })).toEqual([]);
  expect(outputsToReplace(saved, { ...update, data: { 'text/plain': 'x' } })).toEqual([]);
});

test('a fix that was tried and did not help is not offered in the gutter; a proven one says so', () => {
  const r = report();
  const fix = (command: string, verified: boolean | null, effect: string) =>
    ({ command, why: 'w', warnings: [], verified, effect, action: null });
  r.breaks[0].fixes = [fix('%nbcompile set outer disable', false, 'breaks 2 -> 2'),
    fix('%nbcompile set helper disable', true, 'breaks 2 -> 1, check ok')];
  expect(markers(r, SOURCE)[0].lines).toContain('fix: %nbcompile set helper disable (proven: breaks 2 -> 1, check ok)');
  expect(markers(r, SOURCE)[0].lines.join('\n')).not.toContain('set outer disable');
  const shown = [...renderReport(r).querySelectorAll('.nbcompile-fix')].map(d => [d.className, d.textContent]);
  expect(shown).toEqual([  // one cause (two events at one site): its fixes once
    ['nbcompile-fix nbcompile-fix-failed', 'fix: %nbcompile set outer disable  (w) [tried, did not help: breaks 2 -> 2]'],
    ['nbcompile-fix nbcompile-fix-proven', 'fix: %nbcompile set helper disable  (w) [proven: breaks 2 -> 1, check ok]']
  ]);
});

test('resume functions read as the function they resume, as in the Python views', () => {
  const r = report({ graphs: [{ compile_id: '2/0', op_count: 1, ops: ['mul'], function: 'torch_dynamo_resume_in_helper_at_4', torch_callables: [] }] });
  const cells = [...renderReport(r).querySelectorAll('td')].map(td => td.textContent);
  expect(cells).toContain('helper (after line 4)');
  expect(cells).not.toContain('torch_dynamo_resume_in_helper_at_4');
});

test('the notice of a kept report (a later change failed) is shown', () => {
  const r = report({ notice: 'scale -> allow_in_graph failed (ValueError: boom); kept the last good report' });
  const notice = renderReport(r).querySelector('.nbcompile-notice');
  expect(notice?.textContent).toContain(r.notice);
  expect(notice?.className).toContain('nbcompile-warn');
  expect(renderReport(report()).querySelector('.nbcompile-notice')).toBeNull();
});

test('recompiles show what changed and fallbacks show as errors with their fix', () => {
  const r = report({
    recompile_count: 1,
    recompiles: [{
      function: 'f', compile_id: '0/1', reason: "tensor 'x' size mismatch", cell_line: 3, fixes: [],
      changes: [{ subject: 'x.shape[0]', before: '3', after: '5' }]
    }],
    fallbacks: [{
      function: 'f', kind: 'recompile_limit', reason: 'f hit recompile_limit (8)',
      fixes: [{ command: 'torch._dynamo.maybe_mark_dynamic(x, 0)', why: 'w', warnings: [], verified: null, effect: '',
        action: action({ kind: 'mark', mark: 'maybe_mark_dynamic', param: 'x', dim: 0 }) }]
    }]
  });
  const node = renderReport(r);
  expect(node.textContent).toContain('x.shape[0]: 3 -> 5');
  const fallback = node.querySelector('.nbcompile-fallback');
  expect(fallback?.textContent).toContain('recompile_limit');
  expect(fallback?.textContent).toContain('maybe_mark_dynamic(x, 0)');
});

test('the line a recompile comes from gets its own marker saying what changed', () => {
  const r = report({
    breaks: [],
    recompiles: [1, 2, 3].map(i => ({
      function: 'outer', compile_id: `1/${i}`, reason: "G['SCALE'] == 2", cell_line: 6, fixes: [],
      changes: [{ subject: 'SCALE', before: String(i + 1), after: String(i + 2) }]
    }))
  });
  const origin = markers(r, SOURCE).find(m => m.kind === 'origin');
  expect(origin?.line).toBe(6);
  expect(origin?.title).toBe('SCALE: 4 → 5, 3 recompiles');
  expect(origin?.lines).toContain('SCALE: 2 → 3');
});

