"""The fix search on GraphMend's models, side by side with GraphMend's published table (CGO 2027; its artifact
``savini98/CGO_AE_GraphMend``, ``artifact/RESULTS.md``, "Offline rows": 21 rows, 89 breaks to 19, 78%).

``python benchmarks/graphmend.py [--budget S]`` (180 by default): per model of that table, built from a small
config with random weights as its artifact builds it (``graphmend_build.py``; rows that share modeling code
are measured once, by their twin), in a fresh process:

- ``plain``: graphs - 1 of a plain ``torch.compile`` of the call with a counting backend, and the count of
  ``torch._dynamo.utils.counters["graph_break"]`` (what GraphMend counts: ``breaks = max(0, graphs - 1)``);
- the fix search: a real ``%%compile`` cell in an IPython shell builds the model and runs it (``--run``), then
  ``Session.fix(budget_s=S)`` (``corpus.py``'s harness, the same as the corpus benchmark);
- the chosen configuration, verified in another fresh process as the user pastes it (``Session.export``): a
  plain ``torch.compile`` with a counting backend, and its output against eager on the same weights.

Writes ``benchmarks/results/graphmend.json``: per published row, its published before/after/rule next to ours
(before, after verified, check), and the shares removed over the same rows. Run it where GraphMend's
transformers (4.52.4) is importable (``pip install --target DIR transformers==4.52.4 "huggingface_hub<1"
"tokenizers<0.22"`` and ``PYTHONPATH=DIR``): later releases moved many of its breaks.

What differs from GraphMend's method: its rewrites change the model's source (``[Defer]`` buffers logging calls
to the end of the forward, ``[Where]`` turns a data-dependent branch into ``torch.where``, ``[Trap]`` moves a
validation check out of the graph); nbcompile changes no source, only what a user pastes next to it (toggles on
functions, Dynamo's config), and checks every chosen configuration against eager.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ["NBCOMPILE_CORPUS_BUILDER"] = "graphmend_build"  # before corpus reads it, and for its children
import corpus  # noqa: E402

from _common import RESULTS, write  # noqa: E402

SOURCE = "savini98/CGO_AE_GraphMend, artifact/RESULTS.md, 'Offline rows (21)' (torch 2.12.1, transformers 4.52.4)"
#: GraphMend's published rows: (row, our builder, breaks before, breaks after, its rule).
PUBLISHED: list[tuple[str, str, int, int, str]] = [
    ("t5-small", "t5", 3, 0, "Defer"), ("t5-base", "t5", 3, 0, "Defer"), ("t5-3b", "t5", 3, 0, "Defer"),
    ("flan-t5-large", "t5", 3, 0, "Defer"), ("inclusively-reformulation-it5", "t5", 3, 0, "Defer"),
    ("whisper", "whisper", 3, 0, "Defer"), ("whisper-small", "whisper", 3, 0, "Defer"),
    ("whisper-base", "whisper", 3, 0, "Defer"), ("bart", "bart", 3, 0, "Defer"),
    ("bart-base", "bart", 3, 0, "Defer"), ("rebel-large", "bart", 3, 0, "Defer"),
    ("biogpt", "biogpt", 2, 0, "Defer"), ("blenderbot-400M-distill", "blenderbot", 3, 0, "Defer"),
    ("opus-mt-fr-en", "marian", 3, 0, "Defer"), ("PegasusForCausalLM", "pegasus-causal", 2, 0, "Defer"),
    ("layoutlmv3-base", "layoutlmv3", 2, 0, "Defer (warnings.warn)"),
    ("Phi-4-mini-instruct", "phi3-longrope", 5, 0, "Where + Defer"),
    ("grounding-dino", "grounding-dino", 16, 7, "Trap"), ("grounding-dino-base", "grounding-dino", 16, 7, "Trap"),
    ("longformer-base-4096", "longformer", 5, 3, "Defer (partial)"), ("clap-htsat-fused", "clap-fused", 2, 2, "none"),
]

PLAIN = r"""
import json, sys
sys.path.insert(0, {here!r})
import torch, transformers
from graphmend_build import build
model, inputs = build({key!r})
graphs = []
def counting(gm, example_inputs):
    graphs.append(gm)
    return gm.forward
torch._dynamo.utils.counters.clear()
with torch.no_grad():
    torch.compile(model, backend=counting, dynamic=False)(**inputs)
print("RESULT " + json.dumps({{"plain_splits": max(0, len(graphs) - 1),
    "plain_counter_breaks": sum(torch._dynamo.utils.counters["graph_break"].values()),
    "transformers": transformers.__version__}}))
"""


def measure(key: str, budget: float) -> dict[str, Any]:
    row: dict[str, Any] = {"name": key, "mode": "eval", "budget_s": budget,
                           **corpus._python(PLAIN.format(here=str(HERE), key=key), 600)}
    if "error" in row:
        return row
    row.update(corpus._one_in_process(key, False, budget, "aot_eager"))
    if row.get("snippet"):
        row.update(corpus.verify(key, False, row["snippet"], 600))
    elif "error" not in row:
        row["verified_splits_after"] = row.get("splits_before")
        row["verified_check"] = "nothing applied"
    return row


def share(before: int, after: int) -> float | None:
    return round((before - after) / before, 3) if before else None


def side_by_side(ours: dict[str, dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows = []
    for name, key, before, after, rule in PUBLISHED:
        mine = ours.get(key, {})
        rows.append({"row": name, "model": key, "graphmend_before": before, "graphmend_after": after,
                     "graphmend_rule": rule, "graphmend_share": share(before, after),
                     "ours_before": mine.get("plain_splits"), "ours_after": mine.get("verified_splits_after"),
                     "ours_share": share(mine["plain_splits"], mine["verified_splits_after"])
                     if mine.get("verified_splits_after") is not None else None,
                     "ours_check": mine.get("verified_check", mine.get("error", "not run"))})
    done = [r for r in rows if r["ours_after"] is not None]
    gm_before = sum(r["graphmend_before"] for r in done)
    gm_after = sum(r["graphmend_after"] for r in done)
    our_before = sum(r["ours_before"] for r in done)
    our_after = sum(r["ours_after"] for r in done)
    summary = {
        "rows": len(rows), "rows_measured": len(done), "source": SOURCE,
        "graphmend_breaks": f"{gm_before} -> {gm_after}", "graphmend_share_removed": share(gm_before, gm_after),
        "ours_breaks": f"{our_before} -> {our_after}", "ours_share_removed": share(our_before, our_after),
        "ours_wrong_results": sum(1 for r in done if str(r["ours_check"]).startswith("FAILED")),
        "ours_fully_fixed_rows": sum(1 for r in done if r["ours_after"] == 0),
        "graphmend_fully_fixed_rows": sum(1 for r in done if r["graphmend_after"] == 0),
    }
    return rows, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=180.0)
    parser.add_argument("--models", nargs="*", help="builder keys (default: every model of the table)")
    parser.add_argument("--merge", type=pathlib.Path, nargs="*", help="earlier runs' files whose models to keep")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS / "graphmend.json")
    args = parser.parse_args()
    keys = args.models or list(dict.fromkeys(key for _, key, *_ in PUBLISHED))
    ours: dict[str, dict[str, Any]] = {}
    for path in args.merge or []:
        ours.update({m["name"]: m for m in json.loads(path.read_text())["models"]})
    transformers_version = None
    for key in keys:
        row = measure(key, args.budget)
        transformers_version = row.pop("transformers", transformers_version)
        ours[key] = row
        print(json.dumps({k: v for k, v in row.items() if k not in ("snippet", "plan", "timeline")}), flush=True)
        rows, summary = side_by_side(ours)
        write("graphmend", {"transformers": transformers_version, "backend": "aot_eager", "budget_s": args.budget,
                            "summary": summary, "rows": rows, "models": list(ours.values())}, args.out)


if __name__ == "__main__":
    main()
