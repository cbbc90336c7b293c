/** The report as DOM: built with textContent and attributes only, so no report text is HTML. */
import { IReport, fixProof, functionLabel, plural, summary } from './report';

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

export function renderReport(report: IReport): HTMLElement {
  const root = el('div', undefined, 'nbcompile-report');
  root.appendChild(el('div', report.title || 'nbcompile report', 'nbcompile-title'));
  if (report.notice) {
    root.appendChild(el('div', report.notice, 'nbcompile-notice'));
  }
  root.appendChild(el('div', summary(report), 'nbcompile-summary'));
  if (report.check && !report.check.ok) {
    root.appendChild(el('div', `Check failed: ${report.check.message}`, 'nbcompile-error'));
  } else if (report.check) {
    root.appendChild(el('div', `Check: ${report.check.message}`, 'nbcompile-check'));
  }
  if (report.warnings.length) {
    root.appendChild(section(`allow_in_graph lint (${plural(report.warnings.length, 'warning')})`, table(
      ['function', 'rule', 'variable', 'line', 'warning'],
      report.warnings.map(w => [w.function, w.rule, w.variable, String(w.cell_line ?? w.lineno), w.message])
    ), true, 'nbcompile-lint'));
  }
  for (const e of report.errors) {
    root.appendChild(el('div', `${functionLabel(e.function)} ${e.fail_type}: ${e.message}`, 'nbcompile-error'));
  }
  for (const f of report.fallbacks ?? []) {
    const fixes = f.fixes.map(x => x.command || x.why).join('; ');
    root.appendChild(el('div', `${functionLabel(f.function)} ${f.kind}: ${f.reason}${fixes ? ` Fix: ${fixes}` : ''}`,
      'nbcompile-error nbcompile-fallback'));
  }
  if (report.graphs.length) {
    root.appendChild(section(`Graphs (${report.graph_count})`, table(
      ['#', 'compile id', 'function', 'ops'],
      report.graphs.map((g, i) => [String(i + 1), g.compile_id, functionLabel(g.function), `${g.op_count}: ${g.ops.join(', ')}`])
    )));
  }
  if (report.breaks.length) {
    root.appendChild(section(`Graph breaks (${report.break_count})`, table(
      ['line', 'source', 'reason'],
      report.breaks.map(b => {
        const reason = el('div');
        reason.appendChild(el('b', b.gb_type));
        if (b.doc_url && /^https?:\/\//.test(b.doc_url)) {
          const a = el('a', ` ${b.gb_id || 'docs'}`) as HTMLAnchorElement;
          a.href = b.doc_url;
          a.target = '_blank';
          a.rel = 'noopener';
          reason.appendChild(a);
        }
        reason.appendChild(el('div', b.explanation || b.reason));
        if (b.hints.length) {
          const ul = reason.appendChild(el('ul'));
          b.hints.forEach(h => ul.appendChild(el('li', h)));
        }
        for (const f of b.fixes) {
          const proof = fixProof(f);
          const text = f.command ? `fix: ${f.command}  (${f.why})${proof ? ` [${proof}]` : ''}` : `fix: ${f.why}`;
          const cls = f.verified === true ? 'proven' : f.verified === false ? 'failed' : 'untried';
          reason.appendChild(el('div', text, `nbcompile-fix nbcompile-fix-${cls}`));
        }
        return [b.cell_line !== null ? String(b.cell_line) : `${b.filename}:${b.lineno}`, b.source_line, reason];
      })
    )));
  }
  if (report.recompiles.length) {
    root.appendChild(section(`Recompiles (${report.recompile_count})`, table(
      ['function', 'compile id', 'what changed', 'line', 'reason'],
      report.recompiles.map(r => [functionLabel(r.function), r.compile_id, changeText(r),
        r.cell_line === null || r.cell_line === undefined ? '' : String(r.cell_line), r.reason])
    )));
  }
  if (report.frames.length) {
    const guards = el('div');
    for (const f of report.frames) {
      guards.appendChild(el('div', `${f.compile_id} ${functionLabel(f.function)}: ${f.guard_count} guards, ${f.compile_time_s.toFixed(3)} s`, 'nbcompile-frame'));
      guards.appendChild(el('pre', f.guards.join('\n')));
    }
    root.appendChild(section('Frames and guards', guards, false));
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

/** `x.shape[0]: 3 -> 5` (the newest cache entry's failed guard, and how many more), as render.py says it. */
export function changeText(r: { changes?: { subject: string; before: string; after: string }[] }): string {
  const changes = r.changes ?? [];
  if (!changes.length) {
    return '';
  }
  const first = changes[0];
  return `${first.subject}: ${first.before} -> ${first.after}` + (changes.length > 1 ? ` (+${changes.length - 1} more)` : '');
}

