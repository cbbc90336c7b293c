"""The run audit: what a run on copies may not do, and what it did anyway.

While the eager reference (or a run on copies) runs, an audit hook stops the first attempt to reach
outside the process's Python objects (write a file, start a process, use the network) before it happens
(``OutsideEffect``). The attributes of the user's modules the run reaches are watched too
(``_ModuleAudit``): what it rebinds that no copy holds is put back, what it changes in place, a first
import of a user module, a change to ``os.environ`` is named when the run ends; and a change to the
user's own objects made through something the copies share with them. The processes a run starts (a
``DataLoader``'s workers, which hand their batches over through multiprocessing's own sockets: not the
outside world) do not outlive it: they are shut down when it ends, and named when they had to be terminated
(``_Children``). The check (``check.judge``), the trials and the timing runs all run inside
``no_outside_effects``.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import inspect
import multiprocessing
import os
import stat
import sys
import threading
import time
import traceback
import types
from collections.abc import Hashable
from typing import Any

import torch

from ..core import torch_compat
from ..core.paths import installed_file
from . import fingerprint
from .replay import Replay
from .usercode import torch_owned, user_modules
from .usercode import user_code as _user_code


class OutsideEffect(Exception):
    """The run tried to change something outside the process's Python objects (``outside``), or a
    module attribute that none of its copies holds."""

    def __init__(self, what: str, *, outside: bool = True) -> None:
        super().__init__(what)
        self.outside = outside


_GUARD = threading.local()
_HOOKED = False
#: Audit events that reach outside Python objects (files, processes, the network).
_OUTSIDE = {"os.remove": "removes a file", "os.rename": "renames a file", "os.rmdir": "removes a directory",
            "os.mkdir": "makes a directory", "os.system": "runs a shell command",
            "subprocess.Popen": "starts a process",
            "socket.connect": "opens a connection", "socket.sendto": "sends over the network",
            "shutil.rmtree": "removes a directory", "os.truncate": "truncates a file"}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not getattr(_GUARD, "on", False):
        return
    what = None
    if event == "open" and len(args) >= 2 and isinstance(args[1], str) and any(c in args[1] for c in "wax+"):
        what = f"writes to a file ({args[0]!s:.60})"
    elif (event == "open" and len(args) >= 3 and isinstance(args[2], int) and args[1] is None
          and args[2] & (os.O_WRONLY | os.O_RDWR)):
        what = f"writes to a file ({args[0]!s:.60})"
    elif event in _OUTSIDE and not (event == "socket.connect" and _within_own_processes()):
        what = _OUTSIDE[event]
    if what is None or (getattr(_GUARD, "compiler_may", False) and _compiling()):
        return
    _GUARD.on = False
    raise OutsideEffect(what)


def _saving(path: str) -> None:
    """``torch.save`` to ``path``: stopped like any other write to a file."""
    _audit("open", (path, "wb"))


def _compiling() -> bool:
    """Whether the current call comes from torch.compile compiling a frame (its caches, its workers),
    not from the user's code running."""
    here = inspect.currentframe()
    frame: types.FrameType | None = here.f_back.f_back if here is not None and here.f_back is not None else None
    while frame is not None:
        name = frame.f_code.co_filename
        if name.endswith(_CONVERT_FRAME) or (name.startswith(_TORCH_DIR) and _INDUCTOR_DIR in name):
            return True
        frame = frame.f_back
    return False


def _within_own_processes() -> bool:
    """Whether the current call is multiprocessing talking to a process of this process's own tree: its
    resource sharer fetching a file descriptor another process of the tree pickled (a ``DataLoader`` worker
    hands its batches' tensors over so), or its fork server. Not the outside world: the processes a run
    starts are the audit's to end (``_Children``)."""
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_code.co_filename in _MP_IPC:
            return True
        frame = frame.f_back
    return False


#: multiprocessing's modules that connect to the processes of this process's tree only.
_MP_IPC = frozenset(os.path.join(os.path.dirname(multiprocessing.__file__), name)
                    for name in ("resource_sharer.py", "forkserver.py"))
_CONVERT_FRAME = os.path.join("_dynamo", "convert_frame.py")
#: Inductor compiles a training graph's backward at the first backward call, outside any frame conversion:
#: its code cache, its build directories and its compile workers are the compiler's too.
_TORCH_DIR = os.path.dirname(inspect.getfile(torch))
_INDUCTOR_DIR = os.sep + "_inductor" + os.sep


@contextlib.contextmanager
def no_outside_effects(compiler_may: bool = False, watch: Replay | None = None) -> Any:
    """The eager run may not write files, start processes or use the network: an audit hook stops the
    first attempt (before it happens), and the check says it could not compare. ``compiler_may``: a
    compiled run, in which torch.compile itself may write its caches while it compiles.

    ``watch``: the copies the run was given. The attributes of the user's modules it reaches (a global,
    an import inside a function) are watched too: an attribute the run rebinds that no copy holds is
    put back, a container no copy holds that it changes in place is named, a user module it imports
    for the first time is named, and ``OutsideEffect`` says so when the run ends."""
    global _HOOKED
    if not _HOOKED:
        sys.addaudithook(_audit)  # process-wide and permanent: it does nothing unless a check is running
        _HOOKED = True
    modules = _ModuleAudit(watch) if watch is not None and watch.refused is None else None
    children = _Children() if watch is not None else None
    _GUARD.on, _GUARD.compiler_may = True, compiler_may
    failed = False
    try:
        with torch_compat.torch_saves_reported(_saving):  # torch's C++ writer raises no `open` audit event
            yield
    except BaseException as exc:
        failed = True
        _GUARD.on, _GUARD.compiler_may = False, False
        left = children.settle(exc) if children is not None else ""
        note = getattr(exc, "add_note", None)  # Python 3.11: shown under the error's traceback
        if left and note is not None:
            note(f"nbcompile: the run on copies {left}")
        raise
    finally:
        _GUARD.on, _GUARD.compiler_may = False, False
        left = children.settle(None) if children is not None and not failed else ""
        effect = modules.settle() if modules is not None else ""
        if left:  # first: a process left running says more than what it may have changed meanwhile
            effect = left + (f"; it also {effect}" if effect else "")
        if effect and not failed:
            raise OutsideEffect(effect, outside=False)


def file_positions() -> dict[int, tuple[str, int]]:
    """The process's open regular files past stdin, stdout and stderr (Linux's /proc/self/fd): fd -> (path,
    position). torch's own cache files are left out (a compile may write them). Empty where /proc is not."""
    out: dict[int, tuple[str, int]] = {}
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except (OSError, ValueError):
        return out
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or "/torchinductor_"
    std = set()  # the files behind stdout and stderr (a capture's file, nohup's): their other fds move with them
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            info = os.fstat(fd)
            std.add((info.st_dev, info.st_ino))
    for fd in fds:
        if fd <= 2:
            continue
        with contextlib.suppress(OSError):
            info = os.fstat(fd)
            if (info.st_dev, info.st_ino) in std:
                continue
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if not path.startswith("/") or path.startswith(("/dev/", "/proc/", "/sys/")) or cache in path:
            continue
        position = _position(fd, path)
        if position is not None:
            out[fd] = (path, position)
    return out


def _size(fd: int) -> int | None:
    with contextlib.suppress(OSError):
        return os.fstat(fd).st_size
    return None


def _position(fd: int, path: str) -> int | None:
    """The position of ``fd`` when it is still the regular file ``path`` (a file closed and its fd reused is
    another file: None)."""
    try:
        if os.readlink(f"/proc/self/fd/{fd}") != path or not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.lseek(fd, 0, os.SEEK_CUR)
    except OSError:
        return None


#: How long the audit waits for the processes a run on copies started to end by themselves (a DataLoader's
#: workers, their iterator shut down) before it terminates them.
_PROCESS_WAIT_S = 2.0


class _Children:
    """The child processes a run on copies starts (multiprocessing's: a ``DataLoader``'s workers, a ``Process``
    of the user's), ended when the run ends: none of them may go on after it. A ``DataLoader`` iterator shuts
    its own workers down when it is dropped (its ``__del__``): the frames of the error the run ended with, which
    hold it, are cleared and the garbage collected first; the processes still running then are terminated and
    named (``settle``)."""

    def __init__(self) -> None:
        self.before = {p.pid for p in multiprocessing.active_children()}  # also reaps those that ended

    def _started(self) -> list[multiprocessing.process.BaseProcess]:
        return [p for p in multiprocessing.active_children() if p.pid not in self.before]

    def settle(self, error: BaseException | None) -> str:
        """End what the run left running; say what had to be terminated ("" when nothing was)."""
        started = self._started()
        if not started:
            return ""
        if error is not None and error.__traceback__ is not None:
            traceback.clear_frames(error.__traceback__)  # an iterator the error's frames hold (its workers)
        gc.collect()  # an iterator no one holds any more shuts its workers down
        _shut_down_holders(self._started())  # one still held (a copy of a persistent loader's) is asked to
        deadline = time.monotonic() + _PROCESS_WAIT_S
        for process in self._started():
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        left = [p for p in self._started() if p.is_alive()]
        for process in left:
            process.terminate()
        for process in left:
            process.join(timeout=1.0)
            if process.is_alive():
                process.kill()
                process.join(timeout=1.0)
        if not left:
            return ""
        names = ", ".join(repr(p.name) for p in left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
        one = len(left) == 1
        return (f"starts the process{'' if one else 'es'} {names}, which still ran when it ended (nbcompile "
                f"terminated {'it' if one else 'them'})")


def _shut_down_holders(processes: list[multiprocessing.process.BaseProcess]) -> None:
    """Shut down what still holds ``processes`` in a list and ends them itself when it is dropped: a
    ``DataLoader`` iterator (its ``__del__`` stops its workers and forgets their pids, idempotent). Terminating
    a worker from outside instead would make torch's SIGCHLD handler raise in this process."""
    for process in processes:
        for held in gc.get_referrers(process):
            if type(held) is not list:
                continue
            for owner in gc.get_referrers(held):
                # an instance's attributes: the instance itself, or its __dict__ once one was made
                objs = [o for o in gc.get_referrers(owner) if getattr(o, "__dict__", None) is owner] \
                    if type(owner) is dict else [owner]
                for obj in objs:
                    close = getattr(type(obj), "__del__", None)
                    if close is not None and type(obj).__module__.startswith("torch.utils.data"):
                        with contextlib.suppress(Exception):
                            close(obj)


#: How long the audit waits for the threads a run on copies started before it judges what they changed.
_THREAD_WAIT_S = 2.0
_SHALLOW_ITEMS = 1 << 20  # a container larger than this is compared by its length and ends only


class _Shallow:
    """One namespace's names that no copy holds, by their shallow contents: a list's, dict's, set's or deque's
    items, an object's or a user class's attributes (and their containers one level down), a tensor's
    version. ``settle`` puts back what a run changed and names it."""

    def __init__(self, space: dict[str, Any], held: set[str]) -> None:
        self.space = space
        self.before: list[tuple[str, Any, Any]] = []  # (label, the object, its shallow state)
        for key, value in torch_compat.namespace_items(space):
            if key in held or key.startswith("_") or key in ("In", "Out", "get_ipython", "exit", "quit"):
                continue
            self._watch(key, value, 0)

    def _watch(self, label: str, value: Any, depth: int) -> None:
        if type(value) is types.FunctionType:  # (nothing below watches a function: a cell of 500 of them, fast)
            return
        if value is self.space or type(value).__module__.startswith("nbcompile") or \
                isinstance(value, type) and value.__module__.startswith("nbcompile") or torch_owned(value):
            return  # the namespace itself (the run's copies are swapped into it), nbcompile's own objects and
            # torch's (``counters`` imported by name: compiling changes it by design)
        if isinstance(value, (list, dict, set, bytearray, collections.deque)):
            if len(value) <= _SHALLOW_ITEMS:
                self.before.append((label, value, _contents(value)))
        elif isinstance(value, torch.Tensor):
            self.before.append((label, value, torch_compat.tensor_version(value)))
        elif depth == 0 and (isinstance(value, type) and _user_class(value) or
                             not isinstance(value, type) and _user_class(type(value))):
            attrs = vars(value)
            self.before.append((label, value, dict(attrs) if not isinstance(value, type) else None))
            for name, item in list(attrs.items()):
                if not name.startswith("__") and not callable(item):
                    self._watch(f"{label}.{name}", item, depth + 1)

    def settle(self, *, put_back: bool = True) -> list[str]:
        """What changed, named; put back unless ``put_back`` is False (a thread of the user's ran meanwhile:
        the change may be its own)."""
        effects = []
        back = "put back" if put_back else "a thread of yours ran too, so it was left as it is"
        for label, value, was in self.before:
            if isinstance(value, torch.Tensor):
                if torch_compat.tensor_version(value) != was:
                    effects.append(f"changes your {label} in place (a function the copies hold reaches it)")
                continue
            if was is None:
                continue
            if isinstance(was, dict) and not isinstance(value, dict):  # an object's attributes
                now = vars(value)
                if now.keys() != was.keys() or any(now[k] is not v for k, v in was.items()):
                    if put_back:
                        now.clear()
                        now.update(was)
                    effects.append(f"sets an attribute of your {label} ({back})")
                continue
            if not _same_contents(value, was):
                if put_back:
                    _put_back(value, was)
                effects.append(f"changes your {label} in place (a function the copies hold reaches it; {back})")
        return effects


def _user_threads_alive() -> bool:
    """Whether a thread running the user's code is alive beside this one (its target is a function of the
    user's files: a background loader, a timer)."""
    me = threading.current_thread()
    return any(thread is not me and thread.is_alive() and _runs_user_code(thread) for thread in threading.enumerate())


def _runs_user_code(thread: threading.Thread) -> bool:
    """Whether ``thread``'s target is a function of the user's files (or a subclass's ``run`` the user wrote)."""
    target = getattr(thread, "_target", None)
    if target is None and type(thread).run is not threading.Thread.run:
        target = type(thread).run
    code = getattr(target, "__code__", None)
    return code is not None and _user_code(code)


def _user_class(cls: type) -> bool:
    """A class the user wrote: in the notebook, or in a module of the user's files."""
    if cls.__module__ in ("__main__", "__mp_main__"):
        return True
    module = sys.modules.get(cls.__module__)
    return module is not None and bool(cls.__flags__ & (1 << 9)) and _user_file(module)


def _contents(value: Any) -> Any:
    if isinstance(value, dict):
        return list(value.items())
    return list(value)


def _same_contents(value: Any, was: Any) -> bool:
    now = _contents(value)
    return len(now) == len(was) and all(
        (a is b) if not isinstance(a, tuple) else a[0] is b[0] and a[1] is b[1] for a, b in zip(now, was, strict=True))


def _put_back(value: Any, was: Any) -> None:
    if isinstance(value, dict):
        value.clear()
        value.update(was)
    elif isinstance(value, (list, bytearray)):
        value[:] = was
    elif isinstance(value, (set, collections.deque)):
        value.clear()
        (value.update if isinstance(value, set) else value.extend)(was)


class _ModuleAudit:
    """The attributes of the user's modules a run can reach, before it: what it changes that is not one
    of its copies is put back (a rebinding) or named (a change in place anywhere below it, by a deep
    ``fingerprint``; a first import). A module whose state is too large to fingerprint whole is named
    too: the audit does not vouch for what it cannot see."""

    def __init__(self, replay: Replay) -> None:
        held = {(id(slot.owner), slot.key) for slot in replay.slots.values()}
        self.before: list[tuple[types.ModuleType, dict[str, Any], dict[str, Hashable]]] = []
        spaces = [slot.owner for slot in replay.slots.values() if isinstance(slot.owner, dict)]
        named = list(replay.modules)  # and every other user module: importlib, sys.modules, __import__
        others = [m for m in user_modules(exclude=spaces) if not any(m is r for r in named)]
        self.unseen: list[str] = []
        self.budgets: list[tuple[int, int]] = []
        #: Names bound, before the run, to torch's own state (not watched: compiling changes it by design).
        self.torchs: dict[int, set[str]] = {}
        for module in named + others:
            space = vars(module)
            watched = {k: v for k, v in space.items() if not k.startswith("__") and (id(space), k) not in held
                       and not torch_owned(v)}  # torch's own state imported by name changes as torch compiles
            self.torchs[id(space)] = {k for k, v in space.items() if k not in watched and torch_owned(v)}
            budget = ((fingerprint.MAX_NODES, fingerprint.MAX_BUFFER_BYTES) if any(module is m for m in named)
                      else (fingerprint.OTHER_NODES, fingerprint.OTHER_BUFFER_BYTES))
            walk = fingerprint.Walk(*budget)
            prints = {k: walk.of(v, module.__name__) for k, v in watched.items()}
            if not walk.complete and budget[0] == fingerprint.MAX_NODES:  # a module the run names: not vouched for
                self.unseen.append(module.__name__)
            self.before.append((module, watched, prints))
            self.budgets.append(budget)
        self.held = held
        self.replay = replay
        # the user's own objects, marked now (``reals_moved`` compares): a run on the copies never changes them
        self.reals = replay._real_fingerprint()  # noqa: SLF001  # the marks reals_moved takes back
        self.imports = {name for name in replay.imports if name not in sys.modules}
        self.environ = dict(os.environ)  # the process's environment: no copy of it is made either
        self.files = file_positions()  # open files: a run that reads or writes one moves its position
        self.sizes = {fd: _size(fd) for fd in self.files}  # an append moves a file's end with its position
        # the user's names no copy holds (a list a forward hook appends to, a class attribute, a bound method's
        # object): each one's shallow contents, put back and named if a run on the copies changes them
        main = replay.namespace  # the notebook's names, when the run's caller gave them
        if isinstance(main, dict) and not any(main is space for space in spaces):
            spaces = [*spaces, main]
        # put back only when no thread of the user's runs beside it (its changes are the user's, not the run's)
        self.put_back = not _user_threads_alive()
        self.spaces = [_Shallow(space, {key for owner, key in held if owner == id(space)}) for space in spaces]
        self.threads = set(threading.enumerate())  # a thread the run starts may go on with the user's objects

    def settle(self) -> str:
        effects: list[str] = []
        moved = self.replay.reals_moved(self.reals)
        if moved is not None:  # through something the copies share with the user's objects (not a module's)
            return (f"changed your {moved} in place although it ran on copies (something the copies hold "
                    "reaches your objects: a second run would change it again)")
        for (module, watched, prints), budget in zip(self.before, self.budgets, strict=True):
            after = fingerprint.Walk(*budget)  # the same bounds: what was cut before is cut again
            space = vars(module)
            for key in [k for k in space if not k.startswith("__") and k not in watched
                        and k not in self.torchs.get(id(space), ())
                        and (id(space), k) not in self.held and not isinstance(space[k], types.ModuleType)]:
                del space[key]
                effects.append(f"sets {module.__name__}.{key}")
            for key, value in watched.items():
                now = space.get(key, _GONE)
                if now is not value and callable(value) and callable(now):
                    continue  # a function rebound to a wrapper: nbcompile's own toggles (given back by them)
                if now is not value:
                    space[key] = value
                    effects.append(f"sets {module.__name__}.{key}")
                elif after.of(value, module.__name__) != prints[key]:
                    effects.append(f"changes {module.__name__}.{key} in place")
        started = [t for t in threading.enumerate() if t not in self.threads and t.is_alive()]
        for thread in started:  # what it does next to the user's names is seen below (and put back)
            thread.join(timeout=max(0.0, _THREAD_WAIT_S / len(started)))
        # a library's own thread that ended with the run (multiprocessing's queue feeder, a DataLoader's) is not
        # the run's to name: only one still running, or one that ran the user's code
        started = [t for t in started if t.is_alive() or _runs_user_code(t)]
        if started:
            still = [t.name for t in started if t.is_alive()]
            effects.append(f"starts the thread {started[0].name!r}" + (", which still runs on your objects"
                                                                       if still else ""))
        for shallow in self.spaces:
            effects.extend(shallow.settle(put_back=self.put_back))
        for fd, (path, was) in self.files.items():
            now = _position(fd, path)
            if now is not None and now != was and path.endswith(" (deleted)") and self.sizes.get(fd) == was \
                    and _size(fd) == now:  # appended to a file no name reaches (a log handler's old capture file)
                continue
            if now is not None and now != was:  # os.read, a file object's read or write: the stream moved
                with contextlib.suppress(OSError):
                    os.lseek(fd, was, os.SEEK_SET)
                verb = "reads" if now > was else "moves"
                effects.append(f"{verb} the open file {path} ({now - was:+,} bytes: a second run would read or write "
                               "other bytes; its position was put back)")
        now_env = dict(os.environ)
        for key in sorted(set(now_env) | set(self.environ), key=str):
            if now_env.get(key) != self.environ.get(key):
                if key in self.environ:
                    os.environ[key] = self.environ[key]
                else:
                    del os.environ[key]
                effects.append(f"sets os.environ[{key!r:.60}]")
        for name in sorted(self.imports):
            imported = sys.modules.get(name)
            if imported is not None and _user_file(imported):
                effects.append(f"imports {name} for the first time (its code ran)")
        if self.unseen and not effects:
            names = ", ".join(self.unseen[:2]) + (f" and {len(self.unseen) - 2} more" if len(self.unseen) > 2 else "")
            holds = "holds" if len(self.unseen) == 1 else "hold"
            return (f"may change {names}, which {holds} more state than nbcompile watches (over "
                    f"{fingerprint.MAX_NODES:,} objects or {fingerprint.MAX_BUFFER_BYTES // 2**20} MB of arrays; "
                    "no copy of it was made)")
        if not effects:
            return ""
        more = f" and {len(effects) - 2} more" if len(effects) > 2 else ""
        return ", ".join(effects[:2]) + more + " (no copy of it was made; what it rebound was put back)"


_GONE = object()


def _user_file(module: types.ModuleType) -> bool:
    path = str(getattr(module, "__file__", "") or "")
    return bool(path) and not installed_file(path)
