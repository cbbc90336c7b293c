/**
 * The nbcompile report as JSON (see nbcompile/schema/report.schema.json) and what the
 * frontend reads from it. Pure functions: no DOM, no JupyterLab, so they are unit-tested alone.
 */

import { Cause, Fix, Graph, GraphBreak, LintWarning, NbcompileReport, Recompile } from './report-schema';

export const MIME_TYPE = 'application/vnd.nbcompile.report+json';

/**
 * The report JSON, generated from the schema (`npm run schema-types`): never written by hand, so
 * it cannot drift from what the kernel sends.
 */
export type IReport = NbcompileReport;
export type IGraphBreak = GraphBreak;
export type ILintWarning = LintWarning;
export type ICause = Cause;

/** Ops of one graph shown before the rest is folded (as nbcompile/render.py's SHOWN_OPS). */
export const SHOWN_OPS = 12;

/**
 * The report's break causes, one per site with its event count. A report saved before causes
 * existed (or built by hand) has none: its breaks are grouped here the way Report.add groups them.
 */
export function causesOf(report: IReport): ICause[] {
  return inLineOrder(groupedCauses(report));
}

/** The cell's lines in order, then library sites by file and line (as Report.causes_in_order). */
function inLineOrder(causes: ICause[]): ICause[] {
  const rank = (c: ICause): [number, number, string, number] =>
    [c.cell_line === null || c.cell_line === undefined ? 1 : 0, c.cell_line ?? 0, c.filename, c.lineno];
  return [...causes].sort((a, b) => {
    const [x, y] = [rank(a), rank(b)];
    return x[0] - y[0] || x[1] - y[1] || x[2].localeCompare(y[2]) || x[3] - y[3];
  });
}

function groupedCauses(report: IReport): ICause[] {
  const kept = report.causes ?? [];
  if (kept.length || !report.breaks.length) {
    return kept;
  }
  const bySite = new Map<string, ICause>();
  for (const b of report.breaks) {
    const key = b.filename ? `${b.filename}\u0000${b.lineno}` : `\u0000${b.function}\u0000${b.gb_type}\u0000${b.reason}`;
    const c = bySite.get(key);
    if (c) {
      c.count += 1;
      if (!c.fixes.length && b.fixes.length) {
        c.fixes = b.fixes;
      }
      if (b.compile_id && !c.compile_ids.includes(b.compile_id)) {
        c.compile_ids.push(b.compile_id);
      }
    } else {
      bySite.set(key, {
        count: 1, cell_line: b.cell_line, filename: b.filename, lineno: b.lineno, gb_type: b.gb_type, reason: b.reason,
        fixes: b.fixes, function: b.function, source_line: b.source_line, explanation: b.explanation, hints: b.hints,
        gb_id: b.gb_id, doc_url: b.doc_url, compile_ids: b.compile_id ? [b.compile_id] : [], count_text: ''
      });
    }
  }
  const causes = [...bySite.values()];
  causes.forEach(c => { c.count_text = countText(c.count, c.compile_ids); });
  return causes;
}

/** What a cause's `xN` counts (as report.py's count_text, for a report that did not say it). */
export function countText(count: number, ids: string[]): string {
  const events = `x${count}: ${count} break event${count === 1 ? '' : 's'} at this line`;
  if (count === 1) {
    return ids.length ? `${events} (compile ${ids[0]})` : events;
  }
  if (!ids.length) {
    return `${events}: Dynamo met the line ${count} times as it compiled`;
  }
  const said = ids.slice(0, 6).join(', ') + (ids.length > 6 ? ', ...' : '');
  return ids.length === count ?
    `${events}, one in each of ${count} compiles that traced it (${said}); one cause, one fix` :
    `${events}, from ${plural(ids.length, 'compile')} (${said}): the line ran more than once in one compile; one cause, one fix`;
}

/** Graph splits as GraphMend counts them (the kernel sends them; an old report: graphs - 1). */
export function splitsOf(report: IReport): number {
  return typeof report.splits === 'number' ? report.splits : Math.max(0, report.graph_count - 1);
}

/** Why a report with breaks has no splits (as render.py's NO_SPLITS_WHY): said beside the figure. */
export const NO_SPLITS_WHY = "no call's graph was cut in two: torch compiled the code around the breaks as separate frames";

/** `2 splits`; with breaks and no split, why (as render.py's splits_text). */
export function splitsText(report: IReport): string {
  const splits = splitsOf(report);
  const said = plural(splits, 'split');
  return report.break_count && !splits ? `${said} (${NO_SPLITS_WHY})` : said;
}

/**
 * An op as a user reads it (as render.py's op_label): an operator overload Dynamo put in the graph
 * (`fma.default`, which `addcmul_` becomes) without its overload suffix; every other name as it is.
 */
export function opLabel(name: string): string {
  const m = /^([A-Za-z_]\w*)\.[A-Za-z_]\w*$/.exec(name);
  return m ? m[1] : name;
}

/** A graph's first ops and, apart, the rest (the views fold it: "... 528 more"), as the user reads them. */
export function opsShown(graph: Graph, shown = SHOWN_OPS): { first: string; rest: string[] } {
  return { first: graph.ops.slice(0, shown).map(opLabel).join(', '), rest: graph.ops.slice(shown).map(opLabel) };
}

/** A notebook cell's file (as capture/cell.py's is_cell_filename). */
export function isCellFile(filename: string): boolean {
  return /^<ipython-input-\d+-[0-9a-f]+>$/.test(filename) || /[/\\]ipykernel_\d+[/\\]-?\d+\.py$/.test(filename);
}

/**
 * Where each graph's code is, as the user wrote it (as render.py's graph_places without the cell's
 * spans): `forward (cell line 14)`, `train_step (after line 25)`, `step (torch/optim/adam.py:214)`.
 */
export function graphPlaces(report: IReport): string[] {
  const frames = new Map<string, IReport['frames'][number]>();
  for (const f of report.frames) {
    if (!frames.has(f.compile_id)) {
      frames.set(f.compile_id, f);
    }
  }
  return report.graphs.map(g => {
    const name = functionLabel(g.function);
    const frame = frames.get(g.compile_id);
    const file = frame?.filename ?? '';
    const line = frame?.firstlineno ?? 0;
    if (!frame || !file || !line) {
      return name;
    }
    if (!isCellFile(file)) {
      return `${name} (${shortPath(file)}:${line})`;
    }
    return name !== g.function ? name : `${name} (cell line ${line})`;
  });
}

/** A fix as one line, with its proof (`%nbcompile set f disable (proven: breaks 2 -> 1)`). */
export function fixText(fix: Fix): string {
  const proof = fixProof(fix);
  return `${fix.command || fix.why}${proof ? ` (${proof})` : ''}`;
}

/** The fixes a view offers: never one that was tried and did not help. */
export function offeredFixes(fixes: Fix[]): Fix[] {
  return fixes.filter(f => f.verified !== false);
}

/** One line of the status (as nbcompile/render.py's StatusLine): a kind, how bad, a short text, the rest folded. */
export interface IStatusLine {
  kind: string;
  severity: 'ok' | 'info' | 'warn' | 'error';
  label: string;
  text: string;
  detail: string;
}

/** Characters of a status line's short text (as render.py's STATUS_CHARS). */
export const STATUS_CHARS = 140;

/** An installed package's file from the package down (as core/text.py's short_path): never a venv path. */
export function shortPath(filename: string): string {
  return filename.replace(/^.*[/\\](?:site|dist)-packages[/\\]/, '');
}

export function shortText(text: string, limit = STATUS_CHARS): string {
  const lines = text.trim().split('\n');
  const first = lines[0] ?? '';
  if (first.length > limit) {
    // between clauses (before " (", after ";" or ":") or words, never inside a number (as render.py's short)
    const head = first.slice(0, limit - 1);
    const clause = Math.max(head.lastIndexOf(' ('), head.lastIndexOf('; ') + 1, head.lastIndexOf(': ') + 1);
    const word = head.lastIndexOf(' ');
    const at = clause >= limit * 0.4 ? clause : word >= limit * 0.4 ? word : head.length;
    return `${head.slice(0, at).replace(/[ ;:,]+$/, '')}…`;
  }
  return first + (lines.length > 1 ? '…' : '');
}

function folded(kind: string, severity: IStatusLine['severity'], text: string, detail = '', label = ''): IStatusLine {
  text = plainText(text);
  detail = plainText(detail);
  const brief = shortText(text);
  const whole = detail || text;
  return { kind, severity, label: label || kind, text: brief, detail: whole.trim() === brief.trim() ? '' : whole };
}

/** Where a report's check figures come from (as render.py's SESSION_RUN and SESSION_RUN_DETAIL). */
export const SESSION_RUN = "the session's run";
export const SESSION_RUN_DETAIL = "Figures from the session's latest run of --run: the cell's own run (compiled on your " +
  'objects), or, after a toggle or an option change, its re-run on copies of your objects. The eager reference ' +
  "always runs on copies. The Fix tab's trials are judged on copies of their own.";

/** What each `Check.run` says in a check line (as render.py's RUN_SOURCES). */
export const RUN_SOURCES: Record<string, string> = {
  cell: SESSION_RUN,
  copies: 're-run on copies after a toggle',
  trial: 'a trial on copies'
};

/** The report's errors but the check's (a failed check has its own line: never counted twice, never a compile error). */
export function compileErrors(report: IReport): IReport['errors'] {
  return report.errors.filter(e => e.fail_type !== 'check');
}

/** What a report at its first stage says (``stage === 'dynamo'``); as the Python renderer says it. */
export const STAGE_DYNAMO =
  "graphs, breaks, guards and recompiles from Dynamo's trace; kernels, timings and the check follow";

/** Where a skipped frame is: its cell line, or its file (from the package down) and line; as the Python renderer. */
export function skipWhere(skip: { filename: string; lineno: number }): string {
  if (isCellFile(skip.filename)) {
    return `cell line ${skip.lineno}`;
  }
  return skip.filename ? `${shortPath(skip.filename)}:${skip.lineno}` : '?';
}

/** `FX graph / AOTAutograd cache: 3 hits, 1 miss`. */
export function cacheText(cache: { hits: number; misses: number }): string {
  return `FX graph / AOTAutograd cache: ${plural(cache.hits, 'hit')}, ${cache.misses} miss${cache.misses === 1 ? '' : 'es'}`;
}

/** The report's status, one short line per kind (check, errors, notice, fallbacks, lint, torch log). */
export function statusLines(report: IReport): IStatusLine[] {
  const lines: IStatusLine[] = [];
  if (report.stage === 'dynamo' && !report.interrupted) {
    lines.push({ kind: 'stage', severity: 'info', label: "Dynamo's view", text: STAGE_DYNAMO, detail: '' });
  }
  if (report.compiled_again) {  // a configuration seen before compiled again: why (as render.py's status_lines)
    lines.push({ kind: 'compiled again', severity: 'info', label: 'compiled again',
      text: report.compiled_again.replace(/^compiled again: /, ''), detail: '' });
  }
  const check = report.check;
  if (check) {
    // the check names the run its figures come from: the panel's re-run on copies or a Fix-tab trial differ
    const message = plainText(check.message);
    const detail = `${message}\n${SESSION_RUN_DETAIL}`;
    const [severity, head]: [IStatusLine['severity'], string] =
      !check.compared ? ['info', 'check not compared'] : check.ok ? ['ok', 'check ok'] : ['error', 'Check failed'];
    const source = check.source || (RUN_SOURCES[check.run ?? ''] ?? SESSION_RUN);
    lines.push({ kind: 'check', severity, label: `${head} (${source})`, text: shortText(message), detail });
  }
  if (report.counts_said) {  // the break count beside torch's own, and why they differ (render.py's status_lines)
    lines.push({ kind: 'counts', severity: 'info', label: 'counts', text: report.counts_said, detail: '' });
  }
  const errors = compileErrors(report);
  if (errors.length) {
    const last = errors[errors.length - 1];
    lines.push(folded('errors', 'error',
      `${plural(errors.length, 'compile error')}; last: ${functionLabel(last.function)} ${last.fail_type}: ${last.message}`,
      errors.map(e => `${functionLabel(e.function)} [${e.compile_id}] ${e.fail_type}: ${e.message}`).join('\n')));
  }
  if (report.notice) {
    lines.push(folded('notice', 'warn', report.notice));
  }
  const skipped = report.skipped ?? [];
  if (skipped.length) {
    const named = skipped.slice(0, 4).map(s => functionLabel(s.function)).join(', ') + (skipped.length > 4 ? ', ...' : '');
    lines.push(folded('skipped', 'info', `${plural(skipped.length, 'frame')} run eagerly without a graph break: ${named}`,
      skipped.map(s => `${functionLabel(s.function)} (${skipWhere(s)}): ${s.reason}`).join('\n')));
  }
  const cache = report.cache;
  if (cache && (cache.hits || cache.misses)) {
    lines.push({ kind: 'cache', severity: 'info', label: 'cache', text: cacheText(cache), detail: cache.reasons.join('\n') });
  }
  if (report.warnings.length) {
    lines.push(folded('lint', 'warn', `${report.warnings.length} lint warnings (allow_in_graph)`,
      report.warnings.map(w => `${w.function}: ${w.message}`).join('\n')));
  }
  const log = report.torch_log ?? [];
  if (log.length) {
    lines.push({ kind: 'torch log', severity: 'info', label: 'torch log', text: `${plural(log.length, 'record')}, kept out of the cell`,
      detail: log.join('\n') });
  }
  return lines;
}

/**
 * One gutter marker: the line (1-based, as displayed) and what its tooltip says: first its causes, one
 * line each with its count (`causes` of them), then the hints and fixes.
 */
export interface IMarker {
  line: number;
  kind: 'break' | 'recompile' | 'origin';
  title: string;
  lines: string[];
  links: { text: string; href: string }[];
  /** How many of `lines`, from the first, are causes (one line each); the rest are details. */
  causes?: number;
}

/** The most characters of a hint a tooltip shows (the whole hint is in the report). */
export const TIP_HINT_CHARS = 160;
/** The most characters of a cause's line in a tooltip (the whole line on hover). */
export const TIP_CAUSE_CHARS = 110;

/**
 * `text` within `limit` characters, cut between words (never inside a word such as a GB id, `GB01…`) and
 * ending with an ellipsis; a single word longer than the limit is cut where it must be.
 */
export function cutText(text: string, limit: number): string {
  if (text.length <= limit) {
    return text;
  }
  const head = text.slice(0, limit - 1);
  const space = head.search(/\s\S*$/);
  const at = space >= limit * 0.4 ? space : head.length;
  return `${head.slice(0, at).replace(/[\s,;:(]+$/, '')}…`;
}

const LOG_LINE = /^[IWEFD]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]\n]{1,300}\].*$/;
const REPR_NAME = '((?:\\w|\\.|<locals>|<lambda>|<genexpr>){1,100})';
const FUNCTION_REPR = new RegExp(
  `<(?:function|built-in function|built-in method|method-wrapper) ${REPR_NAME}(?: of [^<>\\n]{0,300}?)?(?: at 0x[0-9a-fA-F]{1,16})?>`,
  'g');
const BOUND_REPR = new RegExp(`<bound method ${REPR_NAME} of (?:<[^<>\\n]{0,300}>|[^<>\\n]{0,300}?)>`, 'g');

/**
 * torch's text as the views show it (as render.py's plain): `L['x']` -> `x`, `G['SCALE']` -> `SCALE`, a stack
 * slot -> "a value on the stack", a resume function -> `f (after line 5)`, an installed file from the package
 * down (never the virtual environment's path), `<function foo at 0x7f..>` -> `foo`, and none of torch's own
 * log lines (`W1123 12:00:00.123 ...`: they are in the report's torch log, folded).
 */
export function plainText(text: string): string {
  if (!text) {
    return text ?? '';
  }
  let out = text.split('\n').filter(line => !LOG_LINE.test(line.trim())).join('\n');
  out = out.replace(/<ipython-input-\d+-[0-9a-f]+>:(\d+)/g, 'cell line $1');
  out = out.replace(/\btorch_dynamo_resume_in_(\w+?)_at_(\d+)\b/g, '$1 (after line $2)');
  out = out.replace(/\b(?:L\['|)___stack\d+(?:'\]|)/g, 'a value on the stack');
  out = out.replace(/\b[GL]\['([A-Za-z_]\w*)'\]/g, '$1');
  out = out.replace(/(?<![^\s"'`([{=,])(?:[A-Za-z]:)?[^\s"'`<>()[\]{},;=]{0,400}[/\\](?:site|dist)-packages[/\\]/g, '');
  const name = (n: string) => n.split('<locals>.').pop() as string;
  out = out.replace(FUNCTION_REPR, (_m, n: string) => name(n)).replace(BOUND_REPR, (_m, n: string) => name(n));
  return out.replace(/<([\w.]{1,300}) object at 0x[0-9a-fA-F]{1,16}>/g, (_m, cls: string) => `a ${cls.split('.').pop()} object`);
}

/** A guard as the user reads it (as render.py's guard_text). */
export function guardText(guard: string): string {
  return plainText(guard)
    .replace(/___check_obj_id\(([^,()\n]{1,300}(?:\([^()\n]{0,300}\))?[^,()\n]{0,300}), -?\d+\)/g, '$1 is the same object')
    .replace(/___check_type_id\(([^,()\n]{1,300}(?:\([^()\n]{0,300}\))?[^,()\n]{0,300}), -?\d+\)/g,
      'type($1) is the same type');
}

/**
 * The cell line a cause is marked on (as render.py's cause_line): its own line, else (a break inside installed
 * code, in torch's optimizer step) the cell line whose call reaches it, as its fix names it (`opt.step()`
 * (line 20)), only where that line of the cell holds that call.
 */
export function causeLine(c: ICause, lines: string[]): number | null {
  if (c.cell_line !== null && c.cell_line !== undefined) {
    return c.cell_line;
  }
  for (const fix of c.fixes) {
    for (const m of (fix.why ?? '').matchAll(/`([^`\n]{1,200})` \(line (\d{1,6})\)/g)) {
      const line = Number(m[2]);
      const code = m[1].replace(/…$/, '').trim();
      if (code && line >= 1 && line <= lines.length && lines[line - 1].includes(code)) {
        return line;
      }
    }
  }
  return null;
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
  const details = new Map<number, string[]>();
  const cellLines = source.split('\n');
  for (const c of causesOf(report)) {
    const at = causeLine(c, cellLines);  // a break inside installed code: on the cell line whose call reaches it
    if (at === null) {
      continue;
    }
    let m = byLine.get(at);
    if (!m) {
      m = { line: at, kind: 'break', title: '', lines: [], links: [], causes: 0 };
      byLine.set(at, m);
      details.set(at, []);
    }
    // the causes first, one line each with its count; their hint and fix after them, so a line with
    // several causes lists them all at the top of a tooltip of bounded height
    const inside = c.cell_line === null || c.cell_line === undefined ? ` (in ${shortPath(c.filename)}:${c.lineno})` : '';
    m.lines.push(`x${c.count} ${c.gb_type}${c.gb_id ? ` (${c.gb_id})` : ''}${inside}: ${plainText(c.explanation || c.reason)}`);
    m.causes = (m.causes ?? 0) + 1;
    const more = details.get(at) as string[];
    const fix = c.fixes.find(f => f.command && f.verified !== false) ??
      (inside ? c.fixes.find(f => f.verified !== false) : undefined);  // installed code: what the user can do
    if (fix) {
      more.push(`fix: ${cutText(plainText(fixText(fix)), TIP_HINT_CHARS * 2)}`);
    }
    for (const hint of c.hints.slice(0, 1)) {
      more.push(`hint: ${cutText(plainText(hint), TIP_HINT_CHARS)}`);
    }
    if (c.count > 1) {  // "x2" explained, after what to do: the events, and the compiles they came from
      more.push(`count: ${c.count_text || countText(c.count, c.compile_ids ?? [])}`);
    }
    const href = safeUrl(c.doc_url);
    if (href && !m.links.some(l => l.href === href)) {
      m.links.push({ text: c.gb_id || 'docs', href });
    }
  }
  for (const [line, m] of byLine) {
    m.lines.push(...(details.get(line) ?? []).filter((d, i, all) => all.indexOf(d) === i));
    m.title = `graph break: ${cutText(m.lines[0], TIP_CAUSE_CHARS)}`;
  }
  // Where a recompile's guarded name comes from (its parameter, its global): a distinct marker whose
  // tooltip says what changed ("x.shape[0]: 3 -> 5, 3 recompiles").
  const origins = new Map<number, Map<string, number>>();
  const originFixes = new Map<number, string[]>();
  for (const r of report.recompiles ?? []) {
    const change = (r.changes ?? [])[0];
    if (r.cell_line === null || r.cell_line === undefined || !change) {
      continue;
    }
    const text = `${change.subject}: ${change.before} → ${change.after}`;
    const counts = origins.get(r.cell_line) ?? new Map<string, number>();
    counts.set(text, (counts.get(text) ?? 0) + 1);
    origins.set(r.cell_line, counts);
    const fixes = originFixes.get(r.cell_line) ?? [];
    for (const line of recompileFixLines(r)) {
      if (!fixes.includes(line)) {
        fixes.push(line);
      }
    }
    originFixes.set(r.cell_line, fixes);
  }
  for (const [line, counts] of origins) {
    const fixes = originFixes.get(line) ?? [];
    const existing = byLine.get(line);
    if (existing) {  // a break on the same line keeps its marker; the recompile's fixes join it
      existing.lines.push(...fixes.filter(f => !existing.lines.includes(f)));
      continue;
    }
    const total = [...counts.values()].reduce((a, b) => a + b, 0);
    const said = [...counts.keys()].map(t => `${t}`);
    byLine.set(line, {
      line, kind: 'origin', title: `${said[said.length - 1]}, ${total} recompile${total === 1 ? '' : 's'}`,
      lines: [...said.map(t => `${t}`), `${total} recompile${total === 1 ? '' : 's'} from this line`, ...fixes], links: []
    });
  }
  const lines = source.split('\n');
  for (const r of report.recompiles) {
    for (const line of recompileLines(r.function, r.reason, lines, (r.changes ?? []).map(c => c.subject))) {
      const said = changeSaid(r) || r.reason;
      const m = byLine.get(line);
      if (!m) {
        byLine.set(line, {
          line, kind: 'recompile', title: `recompile: ${said}`,
          lines: [`recompiled ${functionLabel(r.function)}: ${said}`, ...recompileFixLines(r)], links: []
        });
      } else if (m.kind === 'recompile') {
        m.lines.push(...recompileFixLines(r).filter(f => !m.lines.includes(f)));
      }
    }
  }
  return [...byLine.values()].sort((a, b) => a.line - b.line);
}

/** A recompile's fixes as tooltip lines, each with its proof (one that did not help is not offered). */
export function recompileFixLines(r: Recompile): string[] {
  return offeredFixes(r.fixes ?? []).slice(0, 3).map(f => `fix: ${fixText(f)}`);
}

function changeSaid(r: Recompile): string {
  const change = (r.changes ?? [])[0];
  return change ? `${change.subject}: ${change.before} → ${change.after}` : '';
}

/** Lines a recompile names: the recompiled function's def, and lines that use a global it names (in
 *  torch's raw `G['X']` form, or as a guard change's plain subject `X`, as nbcompile now writes them). */
export function recompileLines(fn: string, reason: string, lines: string[], subjects: string[] = []): number[] {
  const base = fn.replace(/^torch_dynamo_resume_in_(.+)_at_\d+$/, '$1');
  const found = new Set<number>();
  const def = new RegExp(`^\\s*def\\s+${escapeRegExp(base)}\\s*\\(`);
  const globals = [
    ...[...reason.matchAll(/G\['([A-Za-z_]\w*)'\]/g)].map(m => m[1]),
    ...subjects.filter(s => /^[A-Za-z_]\w*$/.test(s))
  ];
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

/** `torch_dynamo_resume_in_f_at_5` -> `f (after line 5)` (as nbcompile/render.py's function_label). */
export function functionLabel(name: string): string {
  const m = /^torch_dynamo_resume_in_(.+)_at_(\d+)$/.exec(name);
  return m ? `${m[1]} (after line ${m[2]})` : name;
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
    ...(report.break_count ? [splitsText(report), plural(causesOf(report).length, 'cause')] : []),
    plural(report.recompile_count, 'recompile'),
    `compile ${report.compile_time_s.toFixed(2)} s`
  ];
  if (compileErrors(report).length) {
    parts.push(plural(compileErrors(report).length, 'error'));
  }
  if (report.check) {
    parts.push(!report.check.compared ? 'check not compared' : report.check.ok ? 'check ok' : 'CHECK FAILED');
  }
  return parts.join(', ');
}
