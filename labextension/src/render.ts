/** The report as DOM: built with textContent and attributes only, so no report text is HTML. */
import {
  IReport, IStatusLine, causeLine, causesOf, countText, fixProof, functionLabel, graphPlaces, guardText, opsShown, plainText,
  plural, shortPath, splitsText, statusLines, summary
} from './report';

function el(tag: string, text?: string, cls?: string): HTMLElement {
  const node = document.createElement(tag);
  if (text !== undefined) {
    node.textContent = text;
  }
  if (cls) {
    node.className = cls;
  }
  return node;
}

function table(headers: string[], rows: (string | HTMLElement)[][]): HTMLElement {
  const t = el('table', undefined, 'nbcompile-table');
  const head = t.appendChild(el('tr'));
  headers.forEach(h => head.appendChild(el('th', h)));
  for (const row of rows) {
    const tr = t.appendChild(el('tr'));
    for (const cell of row) {
      const td = tr.appendChild(el('td'));
      if (typeof cell === 'string') {
        td.textContent = cell;
      } else {
        td.appendChild(cell);
      }
    }
  }
  return t;
}

function section(title: string, body: HTMLElement, open = true, cls = ''): HTMLElement {
  const d = el('details', undefined, `nbcompile-section ${cls}`.trim()) as HTMLDetailsElement;
  d.open = open;
  d.appendChild(el('summary', title));
  d.appendChild(body);
  return d;
}

/** One status line: its label in bold, a short text, the rest folded in a <details>; coloured by severity. */
export function statusLine(line: IStatusLine): HTMLElement {
  const kind = line.kind.replace(/ /g, '-');
  const extra = line.kind === 'notice' ? ' nbcompile-notice' : line.kind === 'check' ? ' nbcompile-check' : '';
  const div = el('div', undefined, `nbcompile-status nbcompile-status-${kind} nbcompile-${line.severity}${extra}`);
  div.appendChild(el('b', line.label));
  if (line.text) {
    div.append(`: ${line.text}`);
  }
  if (line.detail) {
    const d = div.appendChild(el('details', undefined, 'nbcompile-status-detail'));
    d.appendChild(el('summary', 'details'));
    d.appendChild(el('pre', line.detail));
  }
  return div;
}

/** A graph's op names: the first ones, then the rest folded ("... 528 more"). */
export function opsCell(graph: { ops: string[]; op_count: number }): HTMLElement {
  const { first, rest } = opsShown({ ...graph, compile_id: '', function: '', torch_callables: [] });
  const cell = el('span', `${graph.op_count}: ${first}`, 'nbcompile-ops');
  if (rest.length) {
    const d = cell.appendChild(el('details', undefined, 'nbcompile-ops-more'));
    d.appendChild(el('summary', `... ${rest.length} more`));
    d.appendChild(el('span', rest.join(', ')));
  }
  return cell;
}

/**
 * The report as DOM; with the cell's `source`, a break inside installed code also names the cell line whose call
 * reaches it (as the gutter marks it).
 */
export function renderReport(report: IReport, source = ''): HTMLElement {
  const root = el('div', undefined, 'nbcompile-report');
  root.appendChild(el('div', report.title || 'nbcompile report', 'nbcompile-title'));
  root.appendChild(el('div', summary(report), 'nbcompile-summary'));
  for (const line of statusLines(report)) {
    if (line.kind !== 'lint' && line.kind !== 'torch log') {  // those two have their own folded sections
      root.appendChild(statusLine(line));
    }
  }
  if (report.warnings.length) {
    root.appendChild(section(`allow_in_graph lint (${plural(report.warnings.length, 'warning')})`, table(
      ['function', 'rule', 'variable', 'line', 'warning'],
      report.warnings.map(w => [w.function, w.rule, w.variable, String(w.cell_line ?? w.lineno), w.message])
    ), true, 'nbcompile-lint'));
  }
  for (const f of report.fallbacks ?? []) {
    const fixes = f.fixes.map(x => x.command || x.why).join('; ');
    root.appendChild(el('div', `${functionLabel(f.function)} ${f.kind}: ${f.reason}${fixes ? ` Fix: ${fixes}` : ''}`,
      'nbcompile-error nbcompile-fallback'));
  }
  if (report.graphs.length) {
    // each graph led by where its code is (function and line) and its ops; torch's compile id last, small
    const places = graphPlaces(report);
    const graphs = table(
      ['#', 'where', 'ops', 'id'],
      report.graphs.map((g, i) => [String(i + 1), places[i], opsCell(g), compileIdCell(g.compile_id)])
    );
    graphs.classList.add('nbcompile-graphs');
    root.appendChild(section(`Graphs (${report.graph_count})`, graphs));
  }
  const causes = causesOf(report);
  if (causes.length) {
    const title = `Graph breaks: ${plural(report.break_count, 'event')} from ${plural(causes.length, 'cause')}, ` +
      splitsText(report);
    root.appendChild(section(title, table(
      ['count', 'line', 'source', 'reason'],
      causes.map(b => {
        const reason = el('div');
        reason.appendChild(el('b', b.gb_type));
        if (b.doc_url && /^https?:\/\//.test(b.doc_url)) {
          const a = el('a', ` ${b.gb_id || 'docs'}`) as HTMLAnchorElement;
          a.href = b.doc_url;
          a.target = '_blank';
          a.rel = 'noopener';
          reason.appendChild(a);
        }
        reason.appendChild(el('div', plainText(b.explanation || b.reason)));
        if (b.hints.length) {
          const ul = reason.appendChild(el('ul'));
          b.hints.forEach(h => ul.appendChild(el('li', plainText(h))));
        }
        for (const f of b.fixes) {
          const proof = fixProof(f);
          const why = plainText(f.why);
          const text = f.command ? `fix: ${f.command}  (${why})${proof ? ` [${proof}]` : ''}` : `fix: ${why}`;
          const cls = f.verified === true ? 'proven' : f.verified === false ? 'failed' : 'untried';
          reason.appendChild(el('div', text, `nbcompile-fix nbcompile-fix-${cls}`));
        }
        const reached = b.cell_line === null ? causeLine(b, source.split('\n')) : null;
        const line = b.cell_line !== null ? String(b.cell_line) :
          `${shortPath(b.filename)}:${b.lineno}${reached !== null ? ` (reached from cell line ${reached})` : ''}`;
        const count = el('span', `x${b.count}`);
        count.title = b.count_text || countText(b.count, b.compile_ids ?? []);  // what xN counts, on hover
        return [count, line, b.source_line, reason];
      })
    ), true, 'nbcompile-causes'));
  }
  if (report.recompiles.length) {
    root.appendChild(section(`Recompiles (${report.recompile_count})`, table(
      ['function', 'compile id', 'what changed', 'line', 'fix', 'reason'],
      report.recompiles.map(r => [functionLabel(r.function), r.compile_id, changeText(r),
        r.cell_line === null || r.cell_line === undefined ? '' : String(r.cell_line), fixList(r.fixes ?? []),
        plainText(r.reason)])
    ), true, 'nbcompile-recompiles'));
  }
  if (report.frames.length) {
    const guards = el('div');
    for (const f of report.frames) {
      guards.appendChild(el('div', `${f.compile_id} ${functionLabel(f.function)}: ${f.guard_count} guards, ${f.compile_time_s.toFixed(3)} s`, 'nbcompile-frame'));
      // the guards as Python's views say them (every helper and alias torch uses); an older report: said here
      const said = f.guards_said?.length === f.guards.length ? f.guards_said : f.guards.map(guardText);
      guards.appendChild(el('pre', said.join('\n')));
    }
    root.appendChild(section('Frames and guards', guards, false));
  }
  const log = report.torch_log ?? [];
  if (log.length) {
    root.appendChild(section(`torch log (${plural(log.length, 'record')}, kept out of the cell)`, el('pre', log.join('\n')),
      false, 'nbcompile-torch-log'));
  }
  if (report.kernels.length) {
    const kernels = el('div');
    for (const k of report.kernels) {
      kernels.appendChild(el('div', `${k.name} (${k.language})`, 'nbcompile-frame'));
      kernels.appendChild(el('pre', k.code));
    }
    root.appendChild(section(`Generated kernels (${report.kernels.length})`, kernels, false));
  }
  return root;
}

/** torch's compile id, small and grey, with what it is on hover. */
export function compileIdCell(id: string): HTMLElement {
  const cell = el('span', id, 'nbcompile-compile-id');
  cell.title = "torch's compile id (frame/compile of that frame), as TORCH_TRACE and tlparse name it";
  return cell;
}

/** Fixes, each with its proof, classed by it (proven, failed, untried). */
export function fixList(fixes: IReport['recompiles'][number]['fixes']): HTMLElement {
  const list = el('div', undefined, 'nbcompile-fixes');
  for (const f of fixes.slice(0, 3)) {
    const proof = fixProof(f);
    const why = plainText(f.why);
    const text = f.command ? `fix: ${f.command}  (${why})${proof ? ` [${proof}]` : ''}` : `fix: ${why}${proof ? ` [${proof}]` : ''}`;
    const cls = f.verified === true ? 'proven' : f.verified === false ? 'failed' : 'untried';
    list.appendChild(el('div', text, `nbcompile-fix nbcompile-fix-${cls}`));
  }
  return list;
}

/** `x.shape[0]: 3 -> 5` (the newest cache entry's failed guard, and how many more), as render.py says it. */
export function changeText(r: { changes?: { subject: string; before: string; after: string }[] }): string {
  const changes = r.changes ?? [];
  if (!changes.length) {
    return '';
  }
  const first = changes[0];
  return `${first.subject}: ${first.before} -> ${first.after}` + (changes.length > 1 ? ` (+${changes.length - 1} more)` : '');
}

