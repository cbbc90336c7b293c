"""``nbcompile.load`` of a job's folder whose logs sit one level down (``node0/``, ``node1/``) names those
folders instead of saying only "no .log files" (issue 34)."""

from __future__ import annotations

import pytest

import nbcompile
from nbcompile.core.errors import NbcompileError


def test_load_names_the_folders_that_hold_the_logs(tmp_path):
    for node in ("node0", "node1"):
        (tmp_path / node).mkdir()
        (tmp_path / node / "dedicated_log_torch_trace_rank_0_x.log").write_text("")
    with pytest.raises(NbcompileError) as info:
        nbcompile.load(tmp_path)
    message = str(info.value)
    assert "no .log files" in message and "node0/ (1)" in message and "node1/ (1)" in message
    assert "nbcompile.load(" in message


def test_an_empty_folder_says_only_that(tmp_path):
    with pytest.raises(NbcompileError) as info:
        nbcompile.load(tmp_path)
    assert "its folders hold them" not in str(info.value)
