"""Which compile backends can work on this machine (cheap checks only, nothing compiled): what the
panel's backend dropdown offers.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import torch

from ..core import torch_compat

#: C and C++ compilers Inductor's CPU code can be built with (the first found is enough).
_CXX = ("g++", "c++", "clang++", "cl")


def _c_compiler() -> bool:
    """Whether a C++ compiler is on PATH (``$CXX`` first): Inductor's CPU kernels need one."""
    named = os.environ.get("CXX")
    return any(shutil.which(c) for c in ((named,) if named else ()) + _CXX)


def backend_problem(name: str) -> str | None:
    """Why ``name`` cannot work on this machine (cheap checks only, nothing compiled), or None."""
    cuda = torch.cuda.is_available()
    if name == "inductor":
        if cuda and importlib.util.find_spec("triton") is None and not _c_compiler():
            return "no triton for the GPU and no C++ compiler"
        if not cuda and not _c_compiler():
            return "no C++ compiler on PATH (Inductor builds its CPU kernels with one)"
        return None
    if name == "cudagraphs":
        return None if cuda else "no CUDA device"
    needs = {"tvm": "tvm", "openxla": "torch_xla", "onnxrt": "onnxruntime", "tensorrt": "torch_tensorrt",
             "ipex": "intel_extension_for_pytorch"}
    module = needs.get(name)
    if module is not None and importlib.util.find_spec(module) is None:
        return f"{module} is not installed"
    return None


def working_backends(current: str | None = None) -> list[str]:
    """The backends the panel offers: torch's user-facing list, less those that cannot work here
    (the session's own backend is always kept, so the dropdown can show it)."""
    names = [n for n in torch_compat.list_backends(user_facing=True) if backend_problem(n) is None]
    if current is not None and current not in names:
        names.append(current)
    return names
