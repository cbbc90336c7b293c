"""The Report: its JSON schema in step with the dataclasses, its views, its bounds."""

from __future__ import annotations

import json

import jsonschema
import torch

import nbcompile
from nbcompile.model.render import to_html, to_text
from nbcompile.model.report import MAX_ITEMS, MIME_TYPE, SCHEMA_PATH, Graph, Report
from nbcompile.model.schema import json_schema


def hostile(x):
    y = x + 1
    print("<script>alert('x')</script> & <b>bold</b>")
    return y * 2


def test_schema_file_is_generated_from_the_dataclasses():
    assert json.loads(SCHEMA_PATH.read_text()) == json_schema(), "run `make schema`"


def test_schema_covers_every_dataclass_field():
    schema = json_schema()
    import dataclasses

    for cls in (nbcompile.Graph, nbcompile.GraphBreak, nbcompile.Frame, nbcompile.Recompile,
                nbcompile.Kernel, nbcompile.Check, nbcompile.CompileError):
        props = schema["$defs"][cls.__name__]["properties"]
        derived = {"guards_said"} if cls is nbcompile.Frame else set()  # what to_json adds: the guards as said
        assert set(props) == {f.name for f in dataclasses.fields(cls)} | derived


def test_real_report_validates_and_round_trips_through_json():
    report = nbcompile.inspect(hostile, torch.ones(2), backend="eager")
    data = report.to_json()
    jsonschema.validate(data, json.loads(SCHEMA_PATH.read_text()))
    again = json.loads(json.dumps(data))
    assert again["graph_count"] == report.graph_count == 2
    assert again["break_count"] == 1
    assert again["result"].startswith("Tensor(shape=(2,)")


def test_schema_rejects_a_wrong_report():
    data = nbcompile.inspect(hostile, torch.ones(2), backend="eager").to_json()
    data["graphs"][0]["op_count"] = "three"
    try:
        jsonschema.validate(data, json_schema())
    except jsonschema.ValidationError:
        return
    raise AssertionError("schema accepted a string op_count")


def test_html_escapes_user_and_torch_text():
    report = nbcompile.inspect(hostile, torch.ones(2), backend="eager")
    assert "<script>" in report.breaks[0].source_line
    page = to_html(report)
    assert "<script>" not in page and "<b>bold</b>" not in page
    assert "&lt;script&gt;" in page and "&amp;" in page
    assert "href='https://" in page  # the GB doc link survives


def test_mimebundle_and_text_views():
    report = nbcompile.inspect(hostile, torch.ones(2), backend="eager")
    bundle = report._repr_mimebundle_()
    assert set(bundle) == {MIME_TYPE, "text/html", "text/plain"}
    assert bundle[MIME_TYPE] == report.to_json()
    text = to_text(report)
    assert "2 graphs, 1 graph break," in text
    assert "hint:" in text and str(report.breaks[0].lineno) in text


def test_memory_is_bounded_but_counts_go_on():
    report = Report()
    for i in range(MAX_ITEMS + 25):
        report.add("graphs", Graph(f"{i}/0", 1, ["add"]))
    assert len(report.graphs) == MAX_ITEMS
    assert report.graph_count == MAX_ITEMS + 25
    assert report.to_json()["dropped"] == {"graphs": 25}


def test_triton_kernels_are_parsed_from_inductor_output_code():
    """The layout Inductor writes for CUDA (checked for real by the gpu-marked tests)."""
    from nbcompile.capture.trace_parse import parse_kernels

    code = (
        "from torch._inductor.async_compile import AsyncCompile\n"
        "async_compile = AsyncCompile()\n"
        "triton_poi_fused_mul_sin_0 = async_compile.triton('triton_poi_fused_mul_sin_0', '''\n"
        "import triton\nimport triton.language as tl\n\n@triton.jit\n"
        "def triton_poi_fused_mul_sin_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):\n"
        "    xoffset = tl.program_id(0) * XBLOCK\n"
        "''', device_str='cuda')\n"
        "async_compile.wait(globals())\n"
    )
    ((name, language, kernel),) = parse_kernels(code)
    assert (name, language) == ("triton_poi_fused_mul_sin_0", "triton")
    assert kernel.startswith("import triton") and "@triton.jit" in kernel and "device_str" not in kernel


def test_causes_counted_through_their_index_match_a_grouping_of_the_breaks():
    import random

    from nbcompile.model.report import GraphBreak, Report, group_causes

    rng = random.Random(3)
    report = Report(title="t")
    for i in range(400):
        line = rng.randrange(60)
        report.add("breaks", GraphBreak(function=f"f{line % 7}", filename="" if line < 6 else "m.py", lineno=line,
                                        reason=f"r{line % 3}", gb_type="Data-dependent branching",
                                        compile_id=f"{i}/0", cell_line=None, source_line="", gb_id="",
                                        explanation="", hints=[], doc_url=""))
        if i == 150:  # the list made anew elsewhere (as ``carry`` does): the index follows it
            report.causes = group_causes(report.breaks)
        if i == 250:  # ... and one shortened in place: another length than the index knew
            del report.causes[3:]
            report.causes.extend(group_causes(report.breaks)[3:])

    def summary(causes):
        return sorted((c.filename, c.lineno, c.function, c.reason, c.count) for c in causes)

    assert summary(report.causes) == summary(group_causes(report.breaks))
    assert sum(c.count for c in report.causes) == 400


def test_counts_of_many_spans_at_once_match_each_counted_alone():
    import random

    from nbcompile.model.report import Frame, GraphBreak, Report

    rng = random.Random(5)
    report = Report(title="t")
    for i in range(120):
        line, filename = rng.randrange(200), rng.choice(["a.py", "b.py"])
        report.add("frames", Frame(compile_id=f"{i}/0", function="f", guards=[], guard_count=0,
                                   compile_time_s=0.0, filename=filename, firstlineno=line))
        if i % 3 == 0:
            report.add("breaks", GraphBreak(function="f", filename=filename, lineno=line + 1, reason="r",
                                            gb_type="t", compile_id=f"{i}/0", cell_line=None, source_line="",
                                            gb_id="", explanation="", hints=[], doc_url=""))
    spans = [(rng.choice(["a.py", "b.py", "c.py"]), first, first + rng.randrange(30))
             for first in (rng.randrange(200) for _ in range(80))]
    assert report.spans_counts(spans) == [report.part_counts("f", [span]) for span in spans]
    assert any(c.frames for c in report.spans_counts(spans))


def test_causes_sorted_in_place_are_still_counted_on_their_own_site():
    from nbcompile.model.report import GraphBreak, Report

    def brk(line):
        return GraphBreak(function="f", filename="m.py", lineno=line, reason="r", gb_type="t", compile_id="0/0",
                          cell_line=None, source_line="", gb_id="", explanation="", hints=[], doc_url="")

    report = Report(title="t")
    for line in (1, 2, 2, 3):
        report.add("breaks", brk(line))
    report.causes.sort(key=lambda c: -c.count)  # same list, same length, other order
    report.add("breaks", brk(1))
    assert {c.lineno: c.count for c in report.causes} == {1: 2, 2: 2, 3: 1}
