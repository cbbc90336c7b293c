"""The headless runner counts a cell whose magic raised ``UsageError`` as failed (issue 34): IPython shows
it as text on stderr, with no error output, and the runner used to report the notebook clean."""

from __future__ import annotations

import pytest

pytest.importorskip("nbclient")

import nbformat  # noqa: E402

from nbcompile import runner  # noqa: E402

pytestmark = pytest.mark.kernel


def test_a_usage_error_is_a_failed_cell(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbcompile"),
                nbformat.v4.new_code_cell("%nbcompile bogus"),
                nbformat.v4.new_code_cell("print('still runs')")]
    path = tmp_path / "usage.ipynb"
    nbformat.write(nb, str(path))
    _, facts = runner.execute(path, allow_errors=True)
    assert [f["cell"] for f in facts["failed_cells"]] == [2]
    assert facts["failed_cells"][0]["error"].startswith("UsageError: %nbcompile: unknown command 'bogus'")


def test_stderr_text_that_is_not_a_usage_error_is_not_a_failure():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("import sys; sys.stderr.write('warning: UsageError: later\\n')")
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text="warning: UsageError: later\n")]
    nb.cells = [cell]
    assert runner.failed_cells(nb) == []
