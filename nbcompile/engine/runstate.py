"""What a second run of the user's code is started from and hidden by: the random-number state (torch's, CUDA's,
Python's, NumPy's), taken and put back, and the quiet in which a reference run prints and logs nothing."""

from __future__ import annotations

import contextlib
import io
import random
from typing import Any

import torch

from ..core import torch_compat


class RngState:
    """torch's (CPU and CUDA), Python's and NumPy's random-number state."""

    def __init__(self) -> None:
        self.torch = torch.get_rng_state()
        cuda_started = torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
        self.cuda = torch.cuda.get_rng_state_all() if cuda_started else None
        self.python = random.getstate()
        self.numpy = None
        try:
            import numpy

            self.numpy = numpy.random.get_state()
        except ImportError:  # pragma: no cover
            pass

    def restore(self) -> None:
        torch.set_rng_state(self.torch)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        random.setstate(self.python)
        if self.numpy is not None:
            import numpy

            numpy.random.set_state(self.numpy)



@contextlib.contextmanager
def quiet() -> Any:
    """What the eager run prints or logs is not shown: the user sees one run."""
    import logging

    before = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:  # torch's trace records still reach nbcompile's recordings (torch 2.11 drops them under a disable)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                torch_compat.trace_records_through_disable():
            yield
    finally:
        logging.disable(before)
