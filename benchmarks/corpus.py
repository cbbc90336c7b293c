"""The fix search on models nobody here tuned for: Hugging Face models of the public PT2 graph-break corpus
(``penguinwu/oss-model-graph-break-corpus``, its ``corpus/golden_set.json``), each built from its config
class's defaults made small, with random weights and inputs (``corpus_build.py``: nothing downloaded).

Three steps, one command each:

- ``python benchmarks/corpus.py --discover [--limit N]``: fetch (or find) the corpus repository, and for each
  model it lists as breaking, build it in a fresh process, run it eagerly, count its graphs under a plain
  ``torch.compile`` with a counting backend, and keep those that build, run and split (graphs - 1 >= 1) in
  ``benchmarks/corpus_models.json`` (with the trace's time: the models are taken in the corpus's order).
- ``python benchmarks/corpus.py [--budget S ...] [--models FILE] [--train N]``: per model and budget, in a
  fresh process, a real ``%%compile`` cell in an IPython shell builds the model and runs it (``--run``), then
  ``Session.fix(budget_s=S)``; the chosen configuration is then verified in another fresh process (its
  toggles and config values applied to a plain ``torch.compile``: graphs - 1 with a counting backend, and the
  output against eager on the same weights). The first N models also run in training mode (a backward
  through the model). Writes ``benchmarks/results/corpus.json`` (per model: ``splits_before``,
  ``splits_after``, ``trials``, ``seconds``, ``check``, ``verified_splits_after``) and the table in
  ``docs/benchmarks.md`` (``python benchmarks/docs.py``). ``--merge A.json B.json`` writes the results from the
  rows of runs made apart (one per budget, or one cut short).

Run it where the corpus's transformers is installed (its sweep used transformers 5.5.3; later releases removed
many of its breaks): ``pip install transformers==5.5.3`` in a virtual environment with torch and nbcompile.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import RESULTS, environment, write  # noqa: E402

CORPUS_REPO = "penguinwu/oss-model-graph-break-corpus"
MODELS_FILE = HERE / "corpus_models.json"
#: The module whose ``build(name, train=...)`` and ``first_tensor`` make each model (``graphmend.py`` runs the
#: same harness on GraphMend's models with ``graphmend_build``).
BUILDER = os.environ.get("NBCOMPILE_CORPUS_BUILDER", "corpus_build")
#: Where a fetched copy of the corpus is looked for first (a bare mirror or a checkout), then cloned to.
MIRRORS = [pathlib.Path(os.environ.get("NBCOMPILE_CORPUS", "/nonexistent")),
           pathlib.Path("/work/.mirror/penguinwu+oss-model-graph-break-corpus/repo"), HERE / ".corpus"]


def corpus_file(path: str) -> Any:
    """A JSON file of the corpus repository (fetched with git when no copy is here)."""
    for where in MIRRORS:
        if (where / path).is_file():
            return json.loads((where / path).read_text())
        if (where / "HEAD").is_file():  # a bare mirror
            text = subprocess.run(["git", "--git-dir", str(where), "show", f"HEAD:{path}"],
                                  capture_output=True, text=True, check=True).stdout
            return json.loads(text)
    subprocess.run(["git", "clone", "--depth", "1", f"https://github.com/{CORPUS_REPO}", str(MIRRORS[-1])],
                   check=True)
    return json.loads((MIRRORS[-1] / path).read_text())


def breaking_models() -> list[str]:
    """The corpus's models that break (eval or train), those whose recorded breaks (its pt2.10 explain pass) are
    not only ``copy.deepcopy`` of a config (gone from later transformers) first, in the corpus's order."""
    models = [m["name"] for m in corpus_file("corpus/golden_set.json")["models"]
              if "graph_break" in (m["eval"]["status"], m["train"]["status"])]
    first: list[str] = []
    for r in corpus_file("sweep_results/pt2.10/explain_results.json")["results"]:
        reasons = [b.get("reason", "") for b in r.get("break_reasons", [])]
        if r.get("mode") == "eval" and any("deepcopy" not in x for x in reasons) and r["name"] not in first:
            first.append(r["name"])
    return first + sorted(n for n in models if n not in first)


PROBE = r"""
import json, sys, time
sys.path.insert(0, {here!r})
import torch
from {builder} import build, first_tensor
train = {train!r}
began = time.perf_counter()
model, inputs = build({name!r}, train=train)
torch.set_grad_enabled(train)
def call():
    out = model(**inputs)
    if train:
        loss = first_tensor(out).float().mean()
        loss.backward()
        return loss.detach()
    return out
call()
graphs = []
def counting(gm, example_inputs):
    graphs.append(len(gm.graph.nodes))
    return gm.forward
built = time.perf_counter()
torch._dynamo.utils.counters.clear()
torch.compile(call, backend=counting)()
print("RESULT " + json.dumps({{"graphs": len(graphs), "splits": len(graphs) - 1,
    "counter_breaks": sum(torch._dynamo.utils.counters["graph_break"].values()),
    "build_s": round(built - began, 1), "trace_s": round(time.perf_counter() - built, 1)}}))
"""


def _python(code: str, timeout: float) -> dict[str, Any]:
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONUNBUFFERED": "1", "TRANSFORMERS_VERBOSITY": "error"})
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s"}
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        tail = [x for x in done.stderr.strip().splitlines() if x.strip()][-1:]
        return {"error": tail[0][:300] if tail else f"exit {done.returncode}"}
    return json.loads(line[7:])


def discover(limit: int, timeout: float) -> None:
    """Keep the corpus's breaking models that build, run eagerly and split here (eval; train where it splits)."""
    kept: list[dict[str, Any]] = []
    before = [m["name"] for m in json.loads(MODELS_FILE.read_text())["models"]] if MODELS_FILE.exists() else []
    names = breaking_models()
    for name in [n for n in before if n in names] + [n for n in names if n not in before]:  # the sample kept
        row = _python(PROBE.format(here=str(HERE), builder=BUILDER, name=name, train=False), timeout)
        print(name, json.dumps(row), flush=True)
        if row.get("splits", 0) >= 1:
            train = _python(PROBE.format(here=str(HERE), builder=BUILDER, name=name, train=True), timeout)
            kept.append({"name": name, "splits": row["splits"], "counter_breaks": row["counter_breaks"],
                         "trace_s": row["trace_s"], "build_s": row["build_s"],
                         "train_splits": train.get("splits"), "train_error": train.get("error")})
            MODELS_FILE.write_text(json.dumps({"corpus": CORPUS_REPO, **environment(), "models": kept}, indent=1)
                                   + "\n")
        if len(kept) >= limit:
            break
    print(f"kept {len(kept)} models in {MODELS_FILE}")


def cell_of(name: str, train: bool) -> tuple[str, str, str]:
    """(the cell that builds the model, its --entry, its --run) as a user writes them."""
    cell = (f"import torch\nfrom {BUILDER} import build, first_tensor\n"
            f"model, inputs = build({name!r}, train={train!r})\n")
    if not train:
        return cell, "model", "model(**inputs)"
    cell += ("\ndef step(inputs):\n    loss = first_tensor(model(**inputs)).float().mean()\n    loss.backward()\n"
             "    return loss.detach()\n")
    return cell, "step", "step(inputs)"


def run_one(name: str, train: bool, budget: float, backend: str) -> dict[str, Any]:
    """In this process: the cell in a real IPython shell, ``Session.fix``, and what it chose as a snippet."""
    import contextlib
    import io

    import torch
    from IPython.core.interactiveshell import InteractiveShell

    import nbcompile

    ip = InteractiveShell.instance()  # a real shell, as a terminal's or a kernel's
    ip.run_line_magic("load_ext", "nbcompile")
    torch.set_grad_enabled(train)
    cell, entry, run = cell_of(name, train)
    with contextlib.redirect_stdout(io.StringIO()):
        done = ip.run_cell(f'%%compile --backend {backend} --no-panel --entry {entry} --run "{run}"\n{cell}')
    session = nbcompile.last()
    if session is None or not done.success:
        return {"error": f"the cell did not make a session ({done.error_in_exec or done.error_before_exec})"}
    before = session.report
    began = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        result = session.fix(budget_s=budget)
    seconds = time.perf_counter() - began
    after = session.report
    check = after.check
    return {
        "splits_before": before.splits, "breaks_before": before.break_count,
        "splits_after": after.splits, "breaks_after": after.break_count,
        "trials": len(result.trials), "trials_run": sum(1 for t in result.trials if t.seconds > 0),
        "start_s": round(result.start.seconds, 1) if result.start is not None else None,
        "seconds": round(seconds, 1), "state": result.state, "advice_s": result.advice_s,
        "check": "ok" if check is not None and check.ok and check.compared else
                 "not compared" if check is None or not check.compared else f"FAILED: {check.message[:200]}",
        "chosen": result.best.describe() if result.best is not None and result.applied else None,
        "applied": result.applied, "not_applied": result.applied_note, "plan": result.plan,
        "budget_bound": result.budget_bound,
        # where the budget went: each trial's label, when it was recorded, its run's seconds, breaks, splits
        "timeline": [[t.label[:80], round(t.at_s, 1), round(t.seconds, 1), t.breaks, t.splits,
                      "proof" if t.proven else t.kind.value if t.kind is not None else ""] for t in result.trials],
        "snippet": session.export() if result.applied else "",
    }


VERIFY = r"""
import copy, json, re, sys
sys.path.insert(0, {here!r})
import torch
from {builder} import first_tensor
train = {train!r}
torch.set_grad_enabled(train)
graphs = []
def counting(gm, example_inputs):
    graphs.append(len(gm.graph.nodes))
    return gm.forward
ref = {{}}
exec({cell!r}, ref)
expected = first_tensor(eval({run!r}, ref))
ns = {{"counting": counting}}
exec({cell!r}, ns)
snippet = re.sub(r"backend='[^']*'", "backend=counting", {snippet!r})
if "torch.compile(" not in snippet:
    snippet += "\n{entry} = torch.compile({entry}, backend=counting)\n"
exec(snippet, ns)
got = first_tensor(eval({run!r}, ns))
try:
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    same = "ok"
except AssertionError as exc:
    same = "FAILED: " + str(exc).splitlines()[0][:200]
print("RESULT " + json.dumps({{"verified_splits_after": len(graphs) - 1, "verified_check": same}}))
"""


def verify(name: str, train: bool, snippet: str, timeout: float) -> dict[str, Any]:
    """The chosen configuration as the user pastes it (``Session.export``), in a fresh process: a plain
    ``torch.compile`` with a counting backend (graphs - 1), and its output against eager on the same weights."""
    cell, entry, run = cell_of(name, train)
    return _python(VERIFY.format(here=str(HERE), builder=BUILDER, train=train, cell=cell, run=run, entry=entry,
                                 snippet=snippet), timeout)


def _one_in_process(name: str, train: bool, budget: float, backend: str) -> dict[str, Any]:
    began = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, __file__, "--one", name, "--budget", str(budget), "--backend", backend,
                               *(["--training"] if train else [])], capture_output=True, text=True,
                              timeout=budget * 4 + 600,
                              env={**os.environ, "PYTHONUNBUFFERED": "1", "TRANSFORMERS_VERBOSITY": "error"})
        line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
        row = json.loads(line[7:]) if line else {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:300]}
    except subprocess.TimeoutExpired:
        row = {"error": "timed out"}
    row["process_s"] = round(time.perf_counter() - began, 1)
    return row


def benchmark(models: list[dict[str, Any]], budgets: list[float], train_n: int, backend: str,
              out: pathlib.Path) -> None:
    rows: list[dict[str, Any]] = []
    for i, model in enumerate(models):
        for train in ([False, True] if i < train_n and model.get("train_splits") else [False]):
            for budget in budgets:
                row = {"name": model["name"], "mode": "train" if train else "eval", "budget_s": budget,
                       "trace_s": model.get("trace_s"),
                       **_one_in_process(model["name"], train, budget, backend)}
                if row.get("snippet"):
                    row.update(verify(model["name"], train, row["snippet"], 600))
                elif "error" not in row:
                    row["verified_splits_after"] = row["splits_before"] if row.get("splits_before") is not None \
                        else None
                    row["verified_check"] = "nothing applied"
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k not in ("snippet", "plan")}), flush=True)
                write_results(rows, budgets, backend, out)


def summarize(rows: list[dict[str, Any]], budget: float, mode: str | None = None) -> dict[str, Any]:
    ok = [r for r in rows if r["budget_s"] == budget and "error" not in r and (mode is None or r["mode"] == mode)]
    before = sum(r["splits_before"] for r in ok)
    after = sum(r["splits_after"] for r in ok)
    verified = sum(r.get("verified_splits_after") or 0 for r in ok)
    quick = [r for r in ok if (r.get("start_s") or 99) <= 15]
    return {
        "models": len(ok), "splits_before": before, "splits_after": after,
        "share_removed": round((before - after) / before, 3) if before else None,
        "verified_splits_after": verified,
        "verified_share_removed": round((before - verified) / before, 3) if before else None,
        "fully_fixed": sum(1 for r in ok if r["splits_after"] == 0),
        "verified_fully_fixed": sum(1 for r in ok if r.get("verified_splits_after") == 0),
        # a chosen configuration whose result differs from eager (its verification, or the session's check once
        # it was applied); a check the session's own run failed before any search is the model's, not a choice's
        "wrong_results": sum(1 for r in ok if str(r.get("verified_check", "")).startswith("FAILED")
                             or (r.get("applied") and str(r.get("check", "")).startswith("FAILED"))),
        "failed_before_search": sum(1 for r in ok if not r.get("applied")
                                    and str(r.get("check", "")).startswith("FAILED")),
        "median_trials": sorted(r["trials"] for r in ok)[len(ok) // 2] if ok else None,
        "min_trials_where_start_le_15s": min((r["trials"] for r in quick), default=None),
        "seconds": round(sum(r["seconds"] for r in ok), 1),
        # a search (its applying included) that ran past its budget, and by how much at most
        "over_budget": sum(1 for r in ok if r["seconds"] > budget),
        "most_over_s": round(max((r["seconds"] - budget for r in ok), default=0.0), 1),
        "ended_on_budget": sum(1 for r in ok if r["state"].startswith("budget")),
        "errors": sum(1 for r in rows if r["budget_s"] == budget and "error" in r
                      and (mode is None or r.get("mode") == mode)),
    }


def write_results(rows: list[dict[str, Any]], budgets: list[float], backend: str, out: pathlib.Path) -> None:
    import transformers

    summary = {f"{b:g}s": {"all": summarize(rows, b), "eval": summarize(rows, b, "eval"),
                           "train": summarize(rows, b, "train")} for b in budgets}
    write("corpus", {"corpus": CORPUS_REPO, "transformers": transformers.__version__, "backend": backend,
                     "summary": summary, "models": rows}, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--discover", action="store_true")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--budget", type=float, action="append", help="seconds per search (repeat: 60 and 180)")
    parser.add_argument("--models", type=pathlib.Path, default=MODELS_FILE)
    parser.add_argument("--train", type=int, default=10, help="how many of the models also run a training step")
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--training", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS / "corpus.json")
    parser.add_argument("--merge", type=pathlib.Path, nargs="+",
                        help="write --out from the rows of these earlier runs' files (runs per budget, or cut "
                             "short; a row of a later file replaces the same model, mode and budget of an earlier one)")
    args = parser.parse_args()
    if args.merge:
        runs = [json.loads(path.read_text()) for path in args.merge]
        kept: dict[tuple[Any, ...], dict[str, Any]] = {}  # a row run again (a later file) replaces the earlier one
        for row in (row for run in runs for row in run["models"]):
            kept[(row["name"], row["mode"], row["budget_s"])] = row
        rows = list(kept.values())
        budgets = sorted({row["budget_s"] for row in rows})
        write_results(rows, budgets, runs[0]["backend"], args.out)
        return
    if args.discover:
        discover(args.limit, args.timeout)
        return
    if args.one:
        print("RESULT " + json.dumps(run_one(args.one, args.training, (args.budget or [60.0])[0], args.backend)),
              flush=True)
        return
    models = json.loads(args.models.read_text())["models"][:args.limit]
    benchmark(models, args.budget or [60.0, 180.0], args.train, args.backend, args.out)


if __name__ == "__main__":
    main()
