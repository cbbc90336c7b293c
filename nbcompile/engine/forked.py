"""Fix-search trials side by side, in forked processes.

A trial is a Dynamo trace of the whole run (seconds on a real model, all of it in Python on one core), and
the trials of one search step do not depend on each other. On a machine with more than one core the search
runs one trial in its own process and the others, at the same time, in children forked from it: each child
starts as an exact copy of the process at the fork (the notebook's objects, the copies' memo, Dynamo's
caches), runs its trial there, sends back the ``Outcome`` (pickled, through a pipe) and exits. Whatever it
changed, in memory or in torch's global state, goes with it: the notebook's objects are even further from a
trial than on copies.

No fork where it is not sound: outside Linux, once CUDA is initialised in the process (a forked child cannot
use it), under torch.distributed, or when ``NBCOMPILE_TRIAL_PROCESSES=1``. A child sets torch's intra-op
threads to one before anything else (GNU OpenMP's thread pool does not survive a fork: a child's first
parallel op would wait for it forever), and gives each open file a description of its own (``own_offsets``: a
trial that reads a batch file moves no position of the notebook's). A child that does not answer by its time
limit is killed, and its trial counts as not finished; nothing it did is kept.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import pickle
import select
import signal
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

#: The environment variable that caps how many trials run at once (1: never fork).
ENV = "NBCOMPILE_TRIAL_PROCESSES"
#: The most trials at once, whatever the core count: each child holds its own Dynamo state.
MAX_AT_ONCE = 4


def at_once() -> int:
    """How many trials may run at the same time here: the cores this process may use (at most
    ``MAX_AT_ONCE``), 1 where a fork is not sound (``why_not``)."""
    if why_not():
        return 1
    wanted = os.environ.get(ENV, "").strip()
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    limit = min(cores, MAX_AT_ONCE)
    if wanted:
        try:
            limit = min(limit, max(1, int(wanted)))
        except ValueError:
            limit = 1
    return max(1, limit)


def why_not() -> str:
    """Why trials must not be forked here, or ""."""
    if os.environ.get(ENV, "").strip() == "1":
        return f"{ENV}=1"
    if sys.platform != "linux" or not hasattr(os, "fork"):
        return "forking is only used on Linux"
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return "CUDA is initialised in this process (a forked child cannot use it)"
    distributed: Any = torch.distributed
    if distributed.is_available() and distributed.is_initialized():
        return "torch.distributed is initialised"
    return ""


@dataclasses.dataclass
class Child:
    """One forked trial: its process, the pipe it answers on, and when it must have answered."""

    pid: int
    fd: int
    limit: float
    data: bytearray = dataclasses.field(default_factory=bytearray)

    def answer(self) -> tuple[str, Any]:
        """``("ok", value)``, ``("error", "why")`` or ``("timeout", "")``: waits until the child answers or its
        limit passes (then it is killed). The child is always reaped."""
        try:
            while True:
                left = self.limit - time.perf_counter()
                if left <= 0:
                    return "timeout", ""
                ready, _, _ = select.select([self.fd], [], [], min(left, 1.0))
                if not ready:
                    continue
                chunk = os.read(self.fd, 1 << 20)
                if not chunk:
                    break
                self.data += chunk
            try:
                kind, value = pickle.loads(bytes(self.data))
            except Exception as exc:  # noqa: BLE001  # a child that died before answering in full
                return "error", f"the trial's process ended without an answer ({type(exc).__name__})"
            return kind, value
        finally:
            self.close()

    def close(self) -> None:
        """Kill the child if it still runs, reap it, close the pipe (idempotent)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.pid > 0:
            try:
                done, _ = os.waitpid(self.pid, os.WNOHANG)
                if done == 0:
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.pid = 0


def start(work: Callable[[], Any], limit: float) -> Child | None:
    """Run ``work()`` in a forked child; its return value (picklable) comes back through ``Child.answer``.
    ``limit``: the ``time.perf_counter()`` time by which it must have answered. None when the fork fails."""
    read_fd, write_fd = os.pipe()
    try:
        with warnings.catch_warnings():  # Python 3.12 warns about forking with threads: the child runs one
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return None
    if pid == 0:  # the child: never returns
        _child(work, read_fd, write_fd)
    os.close(write_fd)
    return Child(pid, read_fd, limit)


def own_offsets() -> None:
    """In a forked child: each regular file the process has open gets a file description of its own, at the same
    position and with the same flags (an append still appends), so what the child reads or seeks moves no
    offset of the parent's. A child shares its parent's descriptions: two trials side by side that read one batch
    file and put their positions back left the parent's at the next batch. A file that cannot be opened again
    (deleted, its permissions changed) stays shared."""
    from .audit import file_positions

    for fd, (path, position) in file_positions().items():
        if path.endswith(" (deleted)"):
            continue
        try:
            flags = fcntl.fcntl(fd, fcntl.F_GETFL) & ~(os.O_CREAT | os.O_TRUNC | os.O_EXCL)
            new = os.open(path, flags)
        except OSError:
            continue
        try:
            os.lseek(new, position, os.SEEK_SET)
            os.dup2(new, fd, inheritable=os.get_inheritable(fd))
        except OSError:
            pass
        finally:
            os.close(new)


def _child(work: Callable[[], Any], read_fd: int, write_fd: int) -> None:
    status = 0
    try:
        os.close(read_fd)
        torch.set_num_threads(1)  # before any parallel op: the parent's OpenMP pool did not come along
        own_offsets()  # the parent's open files keep their positions whatever the trial reads
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # what C code prints goes nowhere, not into the notebook's terminal
        os.dup2(devnull, 2)
        try:
            answer: tuple[str, Any] = ("ok", work())
        except BaseException as exc:  # noqa: BLE001  # every ending is answered
            answer = ("error", f"{type(exc).__name__}: {exc}")
        try:
            data = pickle.dumps(answer)
        except Exception as exc:  # noqa: BLE001
            data = pickle.dumps(("error", f"the trial's answer could not be sent ({type(exc).__name__}: {exc})"))
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view):]
    except BaseException:  # noqa: BLE001
        status = 1
    finally:
        os._exit(status)
