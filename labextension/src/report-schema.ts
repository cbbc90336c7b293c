/**
 * Generated from nbcompile/schema/report.schema.json by `npm run schema-types` (`make schema`).
 * Do not edit: change the dataclasses in nbcompile/report.py and regenerate.
 */

export interface NbcompileReport {
  title: string;
  backend: string;
  mode: string | null;
  fullgraph: boolean;
  dynamic: boolean | null;
  dynamo_config: {
    [k: string]: string;
  };
  graphs: Graph[];
  breaks: GraphBreak[];
  frames: Frame[];
  recompiles: Recompile[];
  kernels: Kernel[];
  fallbacks: Fallback[];
  errors: CompileError[];
  warnings: LintWarning[];
  check: Check | null;
  snippet: string;
  dropped: {
    [k: string]: number;
  };
  torch_breaks: number | null;
  notice: string;
  torch_log: string[];
  causes: Cause[];
  stage: 'dynamo' | 'complete';
  interrupted: boolean;
  compiled_again: string;
  skipped: Skip[];
  cache: CacheStats;
  schema_version: number;
  graph_count: number;
  break_count: number;
  splits: number;
  counts_said: string;
  recompile_count: number;
  frame_count: number;
  compile_time_s: number;
  result: string | null;
}
export interface Graph {
  compile_id: string;
  op_count: number;
  ops: string[];
  function: string;
  torch_callables: string[];
}
export interface GraphBreak {
  function: string;
  filename: string;
  lineno: number;
  cell_line: number | null;
  source_line: string;
  reason: string;
  gb_type: string;
  gb_id: string | null;
  explanation: string;
  hints: string[];
  doc_url: string | null;
  compile_id: string;
  fixes: Fix[];
}
export interface Fix {
  command: string;
  why: string;
  warnings: string[];
  verified: boolean | null;
  effect: string;
  action: FixAction | null;
}
export interface FixAction {
  kind: 'toggle' | 'config' | 'dynamic' | 'mark' | 'as_tensor' | 'rewrite';
  toggles: {
    [k: string]: string;
  };
  config: string;
  value: boolean | number | string | null;
  mark: 'maybe_mark_dynamic' | 'mark_static' | 'mark_unbacked' | null;
  param: string;
  dim: number | null;
  subject: string;
  cell_line: number | null;
  before: string;
  after: string;
  rule: string;
}
export interface Frame {
  compile_id: string;
  function: string;
  guards: string[];
  guard_count: number;
  compile_time_s: number;
  filename: string;
  firstlineno: number;
  graph_count: number;
  trace_overhead_s: number;
  guard_latency_us: number | null;
  guard_check_us: number | null;
  backend_time_s: number | null;
  inductor_time_s: number | null;
  collectives: string[];
  cache: string[];
  inputs: {
    [k: string]: string;
  };
  guards_said: string[];
}
export interface Recompile {
  function: string;
  compile_id: string;
  reason: string;
  changes: GuardChange[];
  cell_line: number | null;
  fixes: Fix[];
}
export interface GuardChange {
  subject: string;
  before: string;
  after: string;
}
export interface Kernel {
  name: string;
  language: string;
  code: string;
  compile_id: string;
}
export interface Fallback {
  function: string;
  kind: string;
  reason: string;
  fixes: Fix[];
}
export interface CompileError {
  function: string;
  compile_id: string;
  fail_type: string;
  message: string;
}
export interface LintWarning {
  function: string;
  rule: string;
  variable: string;
  lineno: number;
  cell_line: number | null;
  message: string;
}
export interface Check {
  ok: boolean;
  max_abs_diff: number | null;
  message: string;
  compared: boolean;
  rule: string;
  compiled_error: number | null;
  eager_error: number | null;
  run: string;
  source: string;
}
export interface Cause {
  count: number;
  cell_line: number | null;
  filename: string;
  lineno: number;
  gb_type: string;
  reason: string;
  fixes: Fix[];
  function: string;
  source_line: string;
  explanation: string;
  hints: string[];
  gb_id: string | null;
  doc_url: string | null;
  compile_ids: string[];
  count_text: string;
}
export interface Skip {
  function: string;
  reason: string;
  filename: string;
  lineno: number;
}
export interface CacheStats {
  hits: number;
  misses: number;
  reasons: string[];
}
