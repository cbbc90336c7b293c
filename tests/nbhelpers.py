"""Helpers the tests share."""

from __future__ import annotations


def run_compile_cell(shell, line: str, body: str):
    """Run a real cell `%%compile LINE` + body the way a notebook does; return the ExecutionResult."""
    return shell.run_cell(f"%%compile {line}\n{body}", store_history=True)
