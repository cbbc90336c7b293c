/**
 * The nbcompile report as JSON (see nbcompile/schema/report.schema.json) and what the
 * frontend reads from it. Pure functions: no DOM, no JupyterLab, so they are unit-tested alone.
 */

import { Fix, GraphBreak, LintWarning, NbcompileReport } from './report-schema';

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
  kind: 'break' | 'recompile' | 'origin';
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

/** An output as nbformat saves it (the fields this extension reads). */
export interface IOutputJSON {
  output_type?: string;
  data?: Record<string, unknown>;
  metadata?: Record<string, unknown>;
}

/** The content of an iopub display_data or update_display_data message. */
export interface IDisplayContent {
  data: Record<string, unknown>;
  metadata: Record<string, unknown>;
  transient?: { display_id?: string };
}

/**
 * The display id a report output carries in its metadata (the kernel puts it there as well as in
 * the message's transient part, which a saved notebook loses).
 */
export function reportDisplayId(output: IOutputJSON): string | null {
  const meta = output.metadata?.[MIME_TYPE] as { display_id?: unknown } | undefined;
  return meta && typeof meta.display_id === 'string' ? meta.display_id : null;
}

/**
 * The indices of the outputs a display message replaces: those that carry its display id in their
 * metadata and differ from it (JupyterLab already replaced the others itself while it still knew
 * the transient id, i.e. before a page reload).
 */
export function outputsToReplace(outputs: IOutputJSON[], content: IDisplayContent): number[] {
  const id = content.transient?.display_id;
  if (!id || !content.data?.[MIME_TYPE]) {
    return [];
  }
  const wanted = JSON.stringify([content.data, content.metadata ?? {}]);
  const found: number[] = [];
  outputs.forEach((output, i) => {
    if (reportDisplayId(output) === id && JSON.stringify([output.data ?? {}, output.metadata ?? {}]) !== wanted) {
      found.push(i);
    }
  });
  return found;
}

/** What trying a fix showed (as nbcompile/render.py's fix_proof): `proven: breaks 2 -> 1, check ok`. */
export function fixProof(fix: Fix): string {
  if (fix.verified === true) {
    return `proven: ${fix.effect}`;
  }
  if (fix.verified === false) {
    return `tried, did not help: ${fix.effect}`;
  }
  return fix.effect;
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
      const fix = b.fixes.find(f => f.command && f.verified !== false);
      if (fix) {
        const proof = fixProof(fix);
        m.lines.push(`fix: ${fix.command}${proof ? ` (${proof})` : ''}`);
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
  // Where a recompile's guarded name comes from (its parameter, its global): a distinct marker whose
  // tooltip says what changed ("x.shape[0]: 3 -> 5, 3 recompiles").
  const origins = new Map<number, Map<string, number>>();
  for (const r of report.recompiles ?? []) {
    const change = (r.changes ?? [])[0];
    if (r.cell_line === null || r.cell_line === undefined || !change) {
      continue;
    }
    const text = `${change.subject}: ${change.before} → ${change.after}`;
    const counts = origins.get(r.cell_line) ?? new Map<string, number>();
    counts.set(text, (counts.get(text) ?? 0) + 1);
    origins.set(r.cell_line, counts);
  }
  for (const [line, counts] of origins) {
    if (byLine.has(line)) {
      continue;  // a break on the same line keeps its marker
    }
    const total = [...counts.values()].reduce((a, b) => a + b, 0);
    const said = [...counts.keys()].map(t => `${t}`);
    byLine.set(line, {
      line, kind: 'origin', title: `${said[said.length - 1]}, ${total} recompile${total === 1 ? '' : 's'}`,
      lines: [...said.map(t => `${t}`), `${total} recompile${total === 1 ? '' : 's'} from this line`], links: []
    });
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

/** `torch_dynamo_resume_in_f_at_5` -> `f (resumed at line 5)` (as nbcompile/render.py's function_label). */
export function functionLabel(name: string): string {
  const m = /^torch_dynamo_resume_in_(.+)_at_(\d+)$/.exec(name);
  return m ? `${m[1]} (resumed at line ${m[2]})` : name;
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
