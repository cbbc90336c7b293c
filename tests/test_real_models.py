"""Real models through nbcompile.inspect and %%compile, counted against an independent oracle.

Each case (tests/real_models_oracle.py) is a notebook cell that builds a tiny model with random
weights from its config: Hugging Face GPT-2 (returning its KV cache), BERT, Llama (a decode loop
over its KV cache), T5 (with a loss), Mixtral (mixture of experts), GPT-2 ``generate``, a BERT
training step (backward and SGD), BART, DistilBERT, RoBERTa, Qwen2, timm ViT and ConvNeXt, and a
torchvision ResNet in training mode; some under ``torch.no_grad()``, the others with autograd on.
Each runs with backend ``eager`` through ``nbcompile.inspect`` and through a real ``%%compile``
cell, one after the other in this process; graph, break and recompile counts (and frames Dynamo
gave up on) must equal those of plain ``torch.compile`` with a counting backend, counted in one
fresh process (started once, running alongside the tests, a JSON line per count). The check must
pass and compare with eager, and the report must render."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import torch

import nbcompile
from nbcompile.model.report import MIME_TYPE, SCHEMA_PATH

from nbhelpers import run_compile_cell
from real_models_oracle import CASES, Case, cell_namespace, grad_mode, import_torchvision, split_call

pytestmark = pytest.mark.models

HERE = pathlib.Path(__file__).parent
ORACLE_TIMEOUT_S = 600

#: Runs that are honestly not compared, by (case, config): a substring of check.message. Empty:
#: every run here is compared with eager.
NOT_COMPARED: dict[tuple[str, str], str] = {}

#: nbcompile bugs the oracle found, by (case, config): the reason (kept strict: an xfail that passes fails).
KNOWN_BUGS: dict[tuple[str, str], str] = {}


class OracleRun:
    """The oracle script in a fresh process, started once; counts are read as it prints them."""

    def __init__(self, names: list[str]) -> None:
        self.counts: dict[str, dict] = {}
        self.done = threading.Event()
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "real_models_oracle.py"), *names],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True, cwd=HERE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                entry = json.loads(line)
                self.counts[entry.pop("key")] = entry
        self.proc.wait()
        self.done.set()

    def get(self, key: str) -> dict:
        deadline = time.monotonic() + ORACLE_TIMEOUT_S
        while key not in self.counts and not self.done.is_set() and time.monotonic() < deadline:
            self.done.wait(0.1)
        if key not in self.counts:
            self.stderr.seek(0)
            pytest.fail(f"the oracle gave no count for {key} (exit {self.proc.poll()}):\n{self.stderr.read()[-3000:]}")
        counts = self.counts[key]
        assert "error" not in counts, f"the oracle failed on {key}: {counts['error']}"
        return counts

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.stderr.close()


def _missing(case: Case) -> str | None:
    """Why a case cannot run here, or None."""
    if importlib.util.find_spec(case.needs) is None:
        return f"{case.needs} is not installed (pip install {case.needs})"
    try:
        import_torchvision()  # timm and transformers import it when it is installed
        __import__(case.needs)
    except Exception as exc:
        return f"{case.needs} does not import: {type(exc).__name__}: {exc}"
    return None


def _selected(request) -> set[str]:
    """The cases this run's selected tests of the module need (all, for the oracle's own test)."""
    wanted: set[str] = set()
    for item in request.session.items:
        if getattr(item, "module", None) is not request.module:
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "case" in callspec.params:
            wanted.add(callspec.params["case"].name)
        elif getattr(item, "originalname", "") == "test_rerunning_the_decode_cell_gives_the_fresh_process_counts":
            wanted.add("llama_kv_decode")
        elif getattr(item, "originalname", "") == "test_the_oracle_is_not_trivial":
            wanted.update(CASES)
    return wanted


@pytest.fixture(scope="module")
def oracle(request):
    runnable = [name for name in _selected(request) & set(CASES) if _missing(CASES[name]) is None]
    runnable.sort(key=list(CASES).index)
    if not runnable:
        pytest.skip("no selected case can run here: transformers, timm or torchvision is missing")
    run = OracleRun(runnable)
    yield run
    run.close()


def _params():
    for name, case in CASES.items():
        for config in ("inspect", "magic"):
            marks = []
            if (name, config) in KNOWN_BUGS:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[name, config]))
            yield pytest.param(case, config, id=f"{name}-{config}", marks=marks)


def _counts(report) -> dict[str, int]:
    return {"graphs": report.graph_count, "breaks": report.break_count, "recompiles": report.recompile_count,
            "failed_frames": len([e for e in report.errors if e.fail_type != "check"])}


def _assert_renders(report) -> None:
    """The notebook views: the MIME bundle (the extension's JSON valid against the schema, HTML, text)."""
    import jsonschema

    bundle = report._repr_mimebundle_()
    assert {MIME_TYPE, "text/html", "text/plain"} <= set(bundle)
    data = json.loads(json.dumps(bundle[MIME_TYPE]))  # what the frontend receives
    jsonschema.validate(data, json.loads(SCHEMA_PATH.read_text()))
    assert (data["graph_count"], data["break_count"], data["recompile_count"]) == (
        report.graph_count, report.break_count, report.recompile_count)
    assert json.loads(json.dumps(report.to_json())) == data
    html = bundle["text/html"]
    assert isinstance(html, str) and html.lstrip().startswith("<")
    assert isinstance(bundle["text/plain"], str) and report.summary() in str(report)


def _assert_checked(case: Case, config: str, report) -> None:
    check = report.check
    assert check is not None, "no check was made"
    assert check.ok, check.message
    if not check.compared:
        reason = NOT_COMPARED.get((case.name, config))
        assert reason is not None and reason in check.message, f"not compared: {check.message}"
    assert all(e.fail_type != "check" for e in report.errors), report.errors  # the rest: failed_frames, counted
    assert not getattr(report, "fallbacks", []), report.fallbacks


def _run_inspect(case: Case):
    namespace = cell_namespace(case)
    fn, args, kwargs = split_call(case.inspect, namespace)
    with grad_mode(case):
        return nbcompile.inspect(fn, *args, backend="eager", **kwargs)


def _run_magic(ip, case: Case):
    before = set(ip.user_ns)
    try:
        with grad_mode(case):
            result = run_compile_cell(ip, case.magic_line, case.body)
        assert result.error_in_exec is None, result.error_in_exec
        assert result.error_before_exec is None, result.error_before_exec
        session = nbcompile.last()
        assert session.entries == [case.entry]
        return session.report
    finally:
        ip.run_line_magic("nbcompile", "reset")
        for name in set(ip.user_ns) - before:
            ip.user_ns.pop(name, None)


@pytest.mark.parametrize(("case", "config"), list(_params()))
def test_counts_match_the_oracle_and_the_check_passes(ip, oracle, case, config):
    missing = _missing(case)
    if missing:
        pytest.skip(missing)
    report = _run_inspect(case) if config == "inspect" else _run_magic(ip, case)
    expected = oracle.get(case.oracle_key(config))
    assert _counts(report) == expected, (report.summary(), [(b.function, b.reason) for b in report.breaks],
                                        [(r.function, r.reason) for r in report.recompiles])
    _assert_checked(case, config, report)
    _assert_renders(report)


def test_rerunning_the_decode_cell_gives_the_fresh_process_counts(ip, oracle):
    """Re-running a cell whose model recompiled for new shapes (a KV-cache decode loop): the same counts again.

    Dynamo remembers, per code (file, line, name), which dimensions changed, across cache regions and
    ``torch.compile`` calls (``torch._dynamo.pgo``); a second run that inherited the first one's memory
    would compile the model dynamic at once: fewer graphs and recompiles than in a fresh process.
    """
    case = CASES["llama_kv_decode"]
    missing = _missing(case)
    if missing:
        pytest.skip(missing)
    expected = oracle.get(case.oracle_key("magic"))
    assert expected["recompiles"] > 0
    runs = [_counts(_run_magic(ip, case)) for _ in range(2)]
    runs.append(_counts(_run_inspect(case)))  # inspect compiles decode() whole: its own count
    runs.append(_counts(_run_magic(ip, case)))  # and the cell again after it
    inspected = oracle.get(case.oracle_key("inspect"))
    assert runs == [expected, expected, inspected, expected]


def test_the_oracle_is_not_trivial(oracle):
    """The counts differ from case to case: breaks and recompiles, not only one graph each."""
    names = [n for n in CASES if _missing(CASES[n]) is None]
    counts = [oracle.get(CASES[n].oracle_key(c)) for n in names for c in ("inspect", "magic")]
    if "transformers" in {CASES[n].needs for n in names}:
        for kind in ("breaks", "recompiles", "failed_frames"):
            assert any(c[kind] > 0 for c in counts), (kind, counts)
        assert len({tuple(c.values()) for c in counts}) >= 3, counts


def test_grad_modes_are_both_covered():
    assert {case.no_grad for case in CASES.values()} == {True, False}
    assert len(CASES) >= 12
    assert torch.is_grad_enabled()
