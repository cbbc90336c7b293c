"""Dynamo shares a resume function between the paths that reach the same break (a loop's breaks, a break
reached from several earlier breaks): ``ContinueExecutionCache`` is a graph with shared nodes, not a tree.
``torch_compat.resume_codes`` walked it as a tree, so every path counted again: on VitsModel a drop of the
session's compiled code spent over 10 minutes and 5 GB listing the same resume functions (the corpus's
180 s row ran 917 s and died). Each resume function is now listed once."""

from __future__ import annotations

import torch
from torch._dynamo.resume_execution import ContinueExecutionCache

from nbcompile.core import torch_compat


def _code(name: str):
    return compile("pass", f"<resume-test-{name}>", "exec")


def test_shared_resume_functions_are_listed_once():
    root = _code("root")
    levels = [[_code(f"{depth}-{side}") for side in "ab"] for depth in range(20)]
    cache = ContinueExecutionCache.cache
    # every node of a level resumes into both nodes of the next: 2**20 paths, 40 functions (the cache holds
    # its keys weakly: these entries go with the test's codes)
    cache[root] = {("r", i): c for i, c in enumerate(levels[0])}
    for level, after in zip(levels, levels[1:], strict=False):
        for code in level:
            cache[code] = {("r", i): c for i, c in enumerate(after)}
    found = torch_compat.resume_codes(root)
    assert len(found) == 40
    assert {id(c) for c in found} == {id(c) for level in levels for c in level}


def test_a_function_with_breaks_lists_its_resume_functions_once():
    def body(x):
        x = x + 1
        torch._dynamo.graph_break()
        x = x * 2
        torch._dynamo.graph_break()
        return x - 1

    torch._dynamo.reset()
    torch.compile(body, backend="eager")(torch.ones(2))
    found = torch_compat.resume_codes(body.__code__)
    assert found and len(found) == len({id(c) for c in found})
    torch_compat.drop_compiled_code(body.__code__)
    assert not torch_compat.cache_entries(body.__code__)
