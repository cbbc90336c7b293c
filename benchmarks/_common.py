"""What every benchmark records: the machine and versions, and where results go."""

from __future__ import annotations

import json
import os
import pathlib
import platform
import statistics
from typing import Any

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def environment() -> dict[str, Any]:
    import torch

    env = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else f"cpu ({os.cpu_count()} cores)",
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    return env


def median(values: list[float]) -> float:
    return statistics.median(values)


def write(name: str, result: dict[str, Any], out: pathlib.Path | None = None) -> pathlib.Path:
    path = out or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"benchmark": name, **environment(), **result}, indent=2) + "\n")
    print(f"wrote {path}")
    return path
