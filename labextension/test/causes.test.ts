/** Issue 22: one row per cause (with its count), recompile fixes with their proofs, a status that reads at a glance. */
import { causesOf, markers, IReport, SESSION_RUN_DETAIL, statusLines, summary } from '../src/report';
import { renderReport } from '../src/render';
import { Cause, Fix, GraphBreak, Recompile } from '../src/report-schema';

const SOURCE = '%%compile --run "step()"\nimport torch\ndef f(x):\n    print(x)\n    y = x.item()\n    return x\nSCALE = 2\ndef step():\n    return f(x) * SCALE\n';

function fix(command: string, verified: boolean | null, effect: string): Fix {
  return { command, why: 'w', warnings: [], verified, effect, action: null };
}

function brk(line: number, gb: string): GraphBreak {
  return {
    function: 'f', filename: '<ipython-input-3>', lineno: line, cell_line: line, source_line: `line ${line}`, reason: 'r',
    gb_type: gb, gb_id: null, explanation: `${gb} here`, hints: [], doc_url: null, compile_id: '0/0',
    fixes: [fix('%nbcompile set f disable', null, '')]
  };
}

function cause(b: GraphBreak, count: number): Cause {
  return {
    count, cell_line: b.cell_line, filename: b.filename, lineno: b.lineno, gb_type: b.gb_type, reason: b.reason,
    fixes: b.fixes, function: b.function, source_line: b.source_line, explanation: b.explanation, hints: b.hints,
    gb_id: b.gb_id, doc_url: b.doc_url, compile_ids: [b.compile_id], count_text: ''
  };
}

function report(extra: Partial<IReport> = {}): IReport {
  // 9 break events from 3 sites (3 each): the training-cell case of issue 22
  const sites = [brk(4, 'print'), brk(5, 'item'), brk(6, 'return')];
  const breaks = sites.flatMap(b => [b, b, b]);
  return {
    title: '%%compile [3]: step', backend: 'eager', mode: null, fullgraph: false, dynamic: null, dynamo_config: {}, schema_version: 1, stage: 'complete', interrupted: false, compiled_again: '', torch_breaks: null, counts_said: '', skipped: [], cache: { hits: 0, misses: 0, reasons: [] },
    graph_count: 4, break_count: 9, splits: 3, recompile_count: 0, frame_count: 4, compile_time_s: 0.1, result: null,
    graphs: [], frames: [], recompiles: [], kernels: [], errors: [], warnings: [], snippet: '', dropped: {}, notice: '',
    torch_log: [], fallbacks: [], check: null, breaks, causes: sites.map(b => cause(b, 3)), ...extra
  };
}

const recompile = (fixes: Fix[]): Recompile => ({
  function: 'step', compile_id: '1/1', reason: "G['SCALE'] == 2", cell_line: 7, fixes,
  changes: [{ subject: 'SCALE', before: '2', after: '3' }]
});

test('the renderer shows one row per cause with its count, not one per event, and the splits', () => {
  const node = renderReport(report());
  const rows = [...node.querySelectorAll('.nbcompile-causes tr')].slice(1);
  expect(rows).toHaveLength(3);
  expect(rows.map(r => r.querySelector('td')?.textContent)).toEqual(['x3', 'x3', 'x3']);
  expect(node.querySelector('.nbcompile-causes summary')?.textContent).toBe('Graph breaks: 9 events from 3 causes, 3 splits');
  expect(summary(report())).toContain('9 graph breaks, 3 splits, 3 causes');
});

test('a report without causes (saved before they existed) is grouped by site, counts adding up', () => {
  const r = report({ causes: [] });
  const causes = causesOf(r);
  expect(causes.map(c => [c.cell_line, c.count])).toEqual([[4, 3], [5, 3], [6, 3]]);
  expect(causes.reduce((n, c) => n + c.count, 0)).toBe(r.break_count);
});

test('the gutter has one marker per cause line, its tooltip with the count', () => {
  const ms = markers(report(), SOURCE).filter(m => m.kind === 'break');
  expect(ms.map(m => m.line)).toEqual([4, 5, 6]);
  expect(ms[0].lines[0]).toBe('x3 print: print here');
  expect(ms[0].lines.filter(l => l.startsWith('x'))).toHaveLength(1);
  expect(ms[0].title).toBe('graph break: x3 print: print here');
});

test('recompile fixes show with their proof in the renderer and in the gutter tooltip', () => {
  const r = report({
    breaks: [], causes: [], recompile_count: 1, recompiles: [recompile([
      fix('%nbcompile set step disable', false, 'recompiles 1 -> 1'),
      fix('SCALE = torch.tensor(2.0)', true, 'recompiles 1 -> 0, check ok')
    ])]
  });
  const cells = [...renderReport(r).querySelectorAll('.nbcompile-recompiles .nbcompile-fix')].map(d => [d.className, d.textContent]);
  expect(cells).toEqual([
    ['nbcompile-fix nbcompile-fix-failed', 'fix: %nbcompile set step disable  (w) [tried, did not help: recompiles 1 -> 1]'],
    ['nbcompile-fix nbcompile-fix-proven', 'fix: SCALE = torch.tensor(2.0)  (w) [proven: recompiles 1 -> 0, check ok]']
  ]);
  const origin = markers(r, SOURCE).find(m => m.kind === 'origin');
  expect(origin?.lines).toContain('fix: SCALE = torch.tensor(2.0) (proven: recompiles 1 -> 0, check ok)');
  expect(origin?.lines.join('\n')).not.toContain('set step disable');  // tried and did not help: not offered
  const def = markers(r, SOURCE).find(m => m.kind === 'recompile' && m.line === 8);
  expect(def?.lines).toContain('fix: SCALE = torch.tensor(2.0) (proven: recompiles 1 -> 0, check ok)');
});

test('the status is one short line per kind, coloured by severity, the rest folded', () => {
  const long = 'compiled error 7.02e-05, eager error 1e-07, ratio 702 on in_proj_bias\n' + 'x'.repeat(500);
  const r = report({
    check: { ok: false, max_abs_diff: 7e-5, message: long, compared: true, rule: 'fp64', compiled_error: 7e-5, eager_error: 1e-7, run: 'cell', source: '' },
    errors: [{ function: 'f', compile_id: '0/0', fail_type: 'Unsupported', message: 'boom' }],
    notice: 'helper -> allow_in_graph failed; kept the last good report'
  });
  expect(statusLines(r).map(l => [l.kind, l.severity])).toEqual([['check', 'error'], ['errors', 'error'], ['notice', 'warn']]);
  const node = renderReport(r);
  const lines = [...node.querySelectorAll('.nbcompile-status')];
  expect(lines.map(l => l.className)).toEqual([
    'nbcompile-status nbcompile-status-check nbcompile-error nbcompile-check',
    'nbcompile-status nbcompile-status-errors nbcompile-error',
    'nbcompile-status nbcompile-status-notice nbcompile-warn nbcompile-notice'
  ]);
  const check = lines[0];
  expect(check.querySelector('b')?.textContent).toBe("Check failed (the session's run)");
  expect(check.querySelector('details pre')?.textContent).toBe(`${long}\n${SESSION_RUN_DETAIL}`);  // the whole message, folded
  const shown = check.textContent?.replace(check.querySelector('details')?.textContent ?? '', '') ?? '';
  expect(shown.length).toBeLessThan(200);
  expect(shown).toContain('ratio 702');
  expect(shown).not.toContain('xxxx');
});

test('the check line names the run in the words the kernel set (Check.source), as every other view does', () => {
  const check = { ok: true, max_abs_diff: 0, message: 'matches eager', compared: true, rule: 'fp64', compiled_error: 0,
    eager_error: 0, run: 'copies', source: 're-run on copies after log_metrics -> disable' };
  expect(statusLines(report({ check }))[0].label).toBe('check ok (re-run on copies after log_metrics -> disable)');
  expect(statusLines(report({ check: { ...check, source: '' } }))[0].label).toBe('check ok (re-run on copies after a toggle)');
});

test('a configuration seen before that compiled again says why, as the kernel said it', () => {
  const said = 'compiled again: the code kept for this configuration was compiled on other objects than this run';
  const line = statusLines(report({ compiled_again: said })).find(l => l.kind === 'compiled again');
  expect(line?.label).toBe('compiled again');
  expect(line?.text).toBe('the code kept for this configuration was compiled on other objects than this run');
  expect(statusLines(report({})).some(l => l.kind === 'compiled again')).toBe(false);
});

test('a break count that is not torch\'s own says why, as the kernel said it', () => {
  const said = "1 break event here, 0 in torch's counters['graph_break']: a break event is one per frame a break cuts";
  const line = statusLines(report({ torch_breaks: 0, counts_said: said })).find(l => l.kind === 'counts');
  expect(line?.label).toBe('counts');
  expect(line?.text).toBe(said);
  expect(statusLines(report({})).some(l => l.kind === 'counts')).toBe(false);
});

test('long op lists are folded and torch log records sit in a closed section', () => {
  const ops = Array.from({ length: 540 }, (_, i) => `op${i}`);
  const r = report({
    graphs: [{ compile_id: '0/0', op_count: 540, ops, function: 'f', torch_callables: [] }],
    torch_log: ['W1123 torch/_dynamo/convert_frame.py: recompile limit reached']
  });
  const node = renderReport(r);
  const more = node.querySelector('.nbcompile-ops-more') as HTMLDetailsElement;
  expect(more.open).toBe(false);
  expect(more.querySelector('summary')?.textContent).toBe('... 528 more');
  expect(node.querySelector('.nbcompile-ops')?.firstChild?.textContent).toBe('540: ' + ops.slice(0, 12).join(', '));
  const log = node.querySelector('.nbcompile-torch-log') as HTMLDetailsElement;
  expect(log.open).toBe(false);
  expect(log.querySelector('summary')?.textContent).toBe('torch log (1 record, kept out of the cell)');
  expect(log.querySelector('pre')?.textContent).toContain('W1123');
});

test('the check line names the run its figures come from, as the check says it', () => {
  const check = { ok: true, max_abs_diff: 0, message: 'matches eager', compared: true, rule: 'fp64', compiled_error: 0,
    eager_error: 0, source: '' };
  const label = (run: string) => statusLines(report({ check: { ...check, run } }))[0].label;
  expect(label('cell')).toBe("check ok (the session's run)");
  expect(label('copies')).toBe('check ok (re-run on copies after a toggle)');
  expect(label('trial')).toBe('check ok (a trial on copies)');
  expect(label('')).toBe("check ok (the session's run)");
});

test("a report at its first stage says so first: Dynamo's view, kernels and the check to follow", () => {
  const first = report({ stage: 'dynamo' });
  expect(statusLines(first)[0]).toMatchObject({ kind: 'stage', severity: 'info', label: "Dynamo's view" });
  expect(statusLines(first)[0].text).toContain('kernels, timings and the check follow');
  expect(statusLines(report({ stage: 'complete' })).map(l => l.kind)).not.toContain('stage');
  const node = renderReport(first);
  expect(node.querySelector('.nbcompile-status-stage')?.textContent).toContain("Dynamo's view");
});

test('frames run eagerly without a break and the cache lookups have a status line each, as in Python', () => {
  const r = report({
    skipped: [{ function: 'count', reason: 'no tensor operation in it', filename: '<ipython-input-3-abc>', lineno: 8 }],
    cache: { hits: 3, misses: 1, reasons: ['FX graph cache miss [1/0]: the same graph as before, with x'] }
  });
  const lines = statusLines(r);
  const skipped = lines.find(l => l.kind === 'skipped');
  expect(skipped?.text).toBe('1 frame run eagerly without a graph break: count');
  expect(skipped?.detail).toBe('count (cell line 8): no tensor operation in it');
  const cache = lines.find(l => l.kind === 'cache');
  expect(cache?.text).toBe('FX graph / AOTAutograd cache: 3 hits, 1 miss');
  expect(cache?.detail).toContain('the same graph as before');
  expect(statusLines(report()).map(l => l.kind)).not.toContain('cache');
});
