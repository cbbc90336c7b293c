/**
 * The nbcompile report as JSON (see nbcompile/schema/report.schema.json) and what the
 * frontend reads from it. Pure functions: no DOM, no JupyterLab, so they are unit-tested alone.
 */

import { GraphBreak, LintWarning, NbcompileReport } from './report-schema';

export const MIME_TYPE = 'application/vnd.nbcompile.report+json';

/**
 * The report JSON, generated from the schema (`npm run schema-types`): never written by hand, so
 * it cannot drift from what the kernel sends.
 */
export type IReport = NbcompileReport;
export type IGraphBreak = GraphBreak;
export type ILintWarning = LintWarning;

/** One gutter marker: the line (1-based, as displayed) and what its tooltip says. */
export interface IMarker {
  line: number;
  kind: 'break' | 'recompile';
  title: string;
  lines: string[];
  links: { text: string; href: string }[];
}

export function isCompileCell(source: string): boolean {
  return /^%%compile(\s|$)/.test(source);
}

/** The last report among a cell's outputs (a kernel replaces it in place as it changes). */
export function latestReport(outputs: { data?: Record<string, unknown> }[]): IReport | null {
  for (let i = outputs.length - 1; i >= 0; i--) {
    const data = outputs[i].data;
    if (data && data[MIME_TYPE]) {
      return data[MIME_TYPE] as IReport;
    }
  }
  return null;
}

function safeUrl(url: string | null): string | null {
  return url && /^https?:\/\//.test(url) ? url : null;
}

/** Markers for each cell line with a graph break, then each line named by a recompile. */
export function markers(report: IReport, source: string): IMarker[] {
  const byLine = new Map<number, IMarker>();
  for (const b of report.breaks) {
    if (b.cell_line === null || b.cell_line === undefined) {
      continue;
    }
    let m = byLine.get(b.cell_line);
    if (!m) {
      m = { line: b.cell_line, kind: 'break', title: '', lines: [], links: [] };
      byLine.set(b.cell_line, m);
    }
    const reason = `${b.gb_type}${b.gb_id ? ` (${b.gb_id})` : ''}: ${b.explanation || b.reason}`;
    if (!m.lines.includes(reason)) {
      m.lines.push(reason);
      for (const hint of b.hints.slice(0, 2)) {
        m.lines.push(`hint: ${hint}`);
      }
      const fix = (b.fixes || []).find(f => f.command);
      if (fix) {
        m.lines.push(`fix: ${fix.command}`);
      }
      const href = safeUrl(b.doc_url);
      if (href) {
        m.links.push({ text: b.gb_id || 'docs', href });
      }
    }
  }
  for (const m of byLine.values()) {
    m.title = `graph break: ${m.lines[0]}`;
  }
  const lines = source.split('\n');
  for (const r of report.recompiles) {
    for (const line of recompileLines(r.function, r.reason, lines)) {
      if (!byLine.has(line)) {
        byLine.set(line, { line, kind: 'recompile', title: `recompile: ${r.reason}`, lines: [`recompiled ${r.function}: ${r.reason}`], links: [] });
      }
    }
  }
  return [...byLine.values()].sort((a, b) => a.line - b.line);
}

/** Lines a recompile reason names: the recompiled function's def, and lines that use a global it names. */
export function recompileLines(fn: string, reason: string, lines: string[]): number[] {
  const base = fn.replace(/^torch_dynamo_resume_in_(.+)_at_\d+$/, '$1');
  const found = new Set<number>();
  const def = new RegExp(`^\\s*def\\s+${escapeRegExp(base)}\\s*\\(`);
  const globals = [...reason.matchAll(/G\['([A-Za-z_]\w*)'\]/g)].map(m => m[1]);
  lines.forEach((text, i) => {
    if (def.test(text)) {
      found.add(i + 1);
    }
    for (const g of globals) {
      if (new RegExp(`(^|[^\\w.])${escapeRegExp(g)}([^\\w]|$)`).test(text)) {
        found.add(i + 1);
      }
    }
  });
  return [...found].sort((a, b) => a - b);
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** `1 graph break`, `2 graph breaks` (as nbcompile/render.py's plural). */
export function plural(n: number, word: string): string {
  return n === 1 ? `${n} ${word}` : /(sh|ch)$/.test(word) ? `${n} ${word}es` : `${n} ${word}s`;
}

/** The report in one line, as nbcompile/render.py's summary_line. */
export function summary(report: IReport): string {
  const parts = [
    plural(report.frame_count, 'frame'),
    plural(report.graph_count, 'graph'),
    plural(report.break_count, 'graph break'),
    plural(report.recompile_count, 'recompile'),
    `compile ${report.compile_time_s.toFixed(2)} s`
  ];
  if (report.errors.length) {
    parts.push(plural(report.errors.length, 'error'));
  }
  if (report.check) {
    parts.push(report.check.ok ? 'check ok' : 'CHECK FAILED');
  }
  return parts.join(', ');
}
