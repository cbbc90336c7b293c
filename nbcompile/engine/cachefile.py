"""`%nbcompile cache save | load | list`: torch.compile's cache artifacts in a file with a manifest,
and the trust policy of loading one.

A cache file is code: Inductor's FX graphs, AOTAutograd's entries and Dynamo's PGO and precompile
entries are pickles that torch unpickles on a cache hit. So loading is safe by design:

- ``save`` writes a header line, a one-line JSON manifest (format version, torch version, the
  payload's size and sha256, the entries: type, key, bytes) and torch's payload after it;
- ``read`` is bounded before it reads: a regular file of at most ``MAX_FILE_BYTES``, its manifest line
  read in chunks, a payload whose size is not the manifest's refused unread and one whose sha256 is
  not refused undecoded (both unless ``trust``); the payload is read once, never copied whole here.
  It decodes every entry without applying any, checks the manifest (a file without one, or whose
  hash or entries do not match, is refused unless ``trust``), and checks every entry's key: an
  absolute key, a ``..`` part, or a path that lands outside the directory torch writes that type
  under is refused, with or without ``trust``, and then nothing at all is written;
- ``apply`` writes the entries the plan listed, through torch's own writers (bytes only: nothing
  from the file is unpickled while loading).

The manifest proves a file is whole and is what ``cache save`` wrote, not who wrote it: trust in
its author is the user's to give (the README's "Trust model of cache files").
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
from typing import BinaryIO

import torch

from ..core import torch_compat
from ..core.errors import NbcompileError

MAGIC = b"NBCOMPILE-CACHE 1\n"
FORMAT = "nbcompile-compile-cache"
VERSION = 1
#: The manifest line ends within this many bytes of the header (a longer one is damage).
MANIFEST_LIMIT = 64 * 2**20
#: Lines of the listing shown before the rest is counted.
LISTED = 40
TRUST_WARNING = ("a cache file runs code when torch uses it (its entries are pickles), like a pickle: "
                 "load only files from people you trust")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One entry of a cache file and where torch would write it."""

    index: int
    kind: str
    key: str
    content: bytes = dataclasses.field(repr=False)
    root: str = ""
    target: str | None = None  # None: torch writes nothing for it here (skipped)

    @property
    def label(self) -> str:
        key = self.key if len(self.key) <= 200 else self.key[:120] + "..." + self.key[-77:]
        kind = self.kind if self.kind.isidentifier() else repr(self.kind[:40])  # a type never forges a line
        return f"entry {self.index} ({kind} {key!r})"


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a cache file would write, checked and not yet written."""

    path: str
    size: int
    entries: list[Entry]
    manifest: dict[str, object] | None
    warning: str | None = None  # the --trust warning, one line, when the manifest did not match

    @property
    def written(self) -> list[Entry]:
        return [e for e in self.entries if e.target is not None]

    def what(self) -> str:
        counts: dict[str, int] = {}
        for entry in self.written:
            counts[entry.kind] = counts.get(entry.kind, 0) + 1
        return ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in counts.items()) or "no entries"

    def lines(self) -> list[str]:
        """The listing: every file or directory the load writes, before it writes any."""
        roots = sorted({e.root for e in self.written})
        lines = [f"{self.path}: {len(self.written)} entries ({self.what()}, {_size(self.size)}) into "
                 f"{', '.join(roots) or 'torch cache'}:"]
        saved = self.manifest.get("torch") if self.manifest else None
        if isinstance(saved, str) and saved.isprintable() and saved != torch.__version__:
            lines.append(f"  note: saved by torch {saved}, this is torch {torch.__version__}: torch's keys hold "
                         "its version, so these entries will likely not be hit")
        for entry in self.entries[:LISTED]:
            if entry.target is None:
                lines.append(f"  {entry.kind:<13} {entry.key[:60]}  skipped: torch writes nothing for it here "
                             "(its local cache of this type is off)")
                continue
            where = os.path.relpath(entry.target, entry.root)
            lines.append(f"  {entry.kind:<13} {where}{os.sep if entry.kind in ('inductor', 'aot_autograd') else ''}"
                         f"  {_size(len(entry.content))}")
        if len(self.entries) > LISTED:
            lines.append(f"  ... and {len(self.entries) - LISTED} more entries, all inside {', '.join(roots)}")
        return lines


def _size(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def manifest_of(payload: bytes, entries: list[torch_compat.CacheEntry]) -> dict[str, object]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "torch": torch.__version__,
        "bytes": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(),
        "entries": [{"type": kind, "key": key, "bytes": len(content)} for kind, key, content in entries],
    }


def key_problem(key: str) -> str | None:
    """Why a key may not name a place in torch's cache, or None: absolute, climbing out (``..``),
    empty, or holding a control character (a newline would forge lines of the listing). Checked for
    every type, before the type's own path is asked."""
    if not key:
        return "its key is empty"
    if not key.isprintable():
        return "its key holds a control character"
    if os.path.isabs(key) or key.startswith(("/", "\\")):
        return "its key is an absolute path"
    parts = key.replace("\\", "/").split("/")
    if ".." in parts or ".." in os.path.normpath(key).split(os.sep):
        return "its key climbs out of the cache directory (..)"
    return None


def _inside(path: str, root: str) -> bool:
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real != real_root and os.path.commonpath([real, real_root]) == real_root


def check_entry(index: int, kind: str, key: str, content: bytes) -> Entry:
    """The entry with where torch would write it; NbcompileError naming it when that is not safe."""
    entry = Entry(index, kind, key, content)
    problem = key_problem(key)
    if problem is not None:
        raise NbcompileError(f"{entry.label}: {problem}")
    try:
        root, target = torch_compat.compile_cache_target(kind, key)
    except NbcompileError as exc:
        raise NbcompileError(f"{entry.label}: {exc}") from None
    if target is not None and not _inside(target, root):
        raise NbcompileError(f"{entry.label}: it would write {target}, outside torch's cache {root}")
    return dataclasses.replace(entry, root=root, target=target)


def check_entries(path: str, entries: list[torch_compat.CacheEntry]) -> list[Entry]:
    """Every entry checked; one line naming the first refused (and how many more) when any is."""
    checked: list[Entry] = []
    refused: list[str] = []
    for index, (kind, key, content) in enumerate(entries, 1):
        try:
            checked.append(check_entry(index, kind, key, content))
        except NbcompileError as exc:
            refused.append(str(exc))
    if refused:
        more = f" ({len(refused) - 1} more entries refused)" if len(refused) > 1 else ""
        raise NbcompileError(f"{path}: {refused[0]}{more}; nothing was written: a cache file may write only inside "
                             "torch's cache directory, --trust or not")
    return checked


#: The largest cache file read (a device, a FIFO or a runaway file is refused before it is read). A
#: compile cache of a large model is tens of MB; a load holds the payload and its entries (twice the file).
MAX_FILE_BYTES = 512 << 20
#: Bytes of the header read at a time while looking for the manifest's end of line.
HEAD_CHUNK = 1 << 16


def _limit() -> str:
    return f"{MAX_FILE_BYTES / 2**20:g} MiB" if MAX_FILE_BYTES >= 2**20 else f"{MAX_FILE_BYTES:,} bytes"


@dataclasses.dataclass(frozen=True)
class _Head:
    """What a cache file's head says, read before its payload: the manifest (None: none, or damaged),
    where the payload starts, its size, and what is wrong with the manifest (None: nothing yet; the
    sha256 and the entries are checked on the payload)."""

    manifest: dict[str, object] | None
    start: int
    size: int
    problem: str | None
    #: The manifest's ``bytes`` is not the payload's size: refused (without ``trust``) before it is read.
    size_differs: bool = False


def _open_regular(path: str) -> tuple[BinaryIO, int]:
    """An open handle on ``path`` and its size, when it is a regular file of at most ``MAX_FILE_BYTES``
    (checked on the open handle, so a swapped link changes nothing); else a one-line refusal. A FIFO is
    opened without blocking, and ``/dev/zero`` or a named pipe is never read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise NbcompileError(f"cannot read {path}: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise NbcompileError(f"cannot read {path}: not a regular file (a cache file is one written by "
                             "%nbcompile cache save)")
    if info.st_size > MAX_FILE_BYTES:
        os.close(fd)
        raise NbcompileError(f"cannot read {path}: {_size(info.st_size)}, over the {_limit()} a cache file may "
                             "hold; nothing was read")
    return os.fdopen(fd, "rb"), info.st_size


def _read_head(handle: BinaryIO, size: int) -> _Head:
    """The magic line and the manifest line, read a chunk at a time up to the manifest's end of line (at
    most ``MANIFEST_LIMIT`` bytes), and the payload's size checked against the manifest's ``bytes``: all
    before a byte of the payload is read."""
    magic = handle.read(len(MAGIC))
    if magic != MAGIC:
        return _Head(None, 0, size, "has no nbcompile manifest (not written by %nbcompile cache save)")
    chunks: list[bytes] = []
    held = 0
    while held < MANIFEST_LIMIT and (chunk := handle.read(min(HEAD_CHUNK, MANIFEST_LIMIT - held))):
        end = chunk.find(b"\n")
        if end >= 0:
            chunks.append(chunk[:end])
            held += end
            break
        chunks.append(chunk)
        held += len(chunk)
    else:
        return _Head(None, len(MAGIC), size - len(MAGIC), "has a damaged manifest (no end of line)")
    start = len(MAGIC) + held + 1
    payload = size - start
    try:
        manifest = json.loads(b"".join(chunks))
    except (ValueError, RecursionError):
        return _Head(None, start, payload, "has a damaged manifest (not JSON)")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return _Head(None, start, payload, "has a damaged manifest (not nbcompile's)")
    if manifest.get("version") != VERSION:
        return _Head(manifest, start, payload,
                     f"has manifest version {manifest.get('version')!r:.40}; this nbcompile reads {VERSION}")
    said = manifest.get("bytes")
    if said != payload:
        sized = isinstance(said, int) and not isinstance(said, bool) and 0 <= said < 1 << 63
        says = f"says {said:,} bytes" if sized else "gives no size" if said is None else "gives no usable size"
        return _Head(manifest, start, payload, f"does not match its manifest (the manifest {says} of payload, the "
                                               f"file holds {payload:,}: changed after it was saved)",
                     size_differs=True)
    return _Head(manifest, start, payload, None)


def _read_payload(path: str, handle: BinaryIO, head: _Head) -> bytes:
    """The payload, read once (no copy kept besides it); the file's size was checked when it was opened."""
    try:
        handle.seek(head.start)
        payload = handle.read(head.size + 1)
    except OSError as exc:
        raise NbcompileError(f"cannot read {path}: {exc.strerror}") from None
    if len(payload) != head.size:
        raise NbcompileError(f"cannot read {path}: it changed while it was read ({head.size:,} bytes of payload "
                             f"expected, {len(payload):,} read)")
    return payload


def read(path: str, *, trust: bool = False) -> Plan:
    """Decode and check a cache file, writing nothing: the Plan to show and then ``apply``.

    Raises NbcompileError, one line: unreadable, not torch's format, no matching manifest (unless
    ``trust``), or an entry that would write outside torch's cache (always: ``trust`` is trust in the
    file's author, never permission to write anywhere)."""
    handle, size = _open_regular(path)
    with handle:
        head = _read_head(handle, size)
        if head.size_differs and not trust:  # refused from its head: the payload is never read
            raise NbcompileError(_refusal(path, head.problem))
        payload = _read_payload(path, handle, head)
    manifest, problem = head.manifest, head.problem
    if problem is None and manifest is not None and manifest.get("sha256") != hashlib.sha256(payload).hexdigest():
        problem = "does not match its manifest (sha256 differs: changed after it was saved)"
        if not trust:  # not what was saved: refused without decoding it
            raise NbcompileError(_refusal(path, problem))
    try:
        entries = torch_compat.decode_compile_cache(payload)
    except NbcompileError as exc:
        raise NbcompileError(f"{path} is not a torch.compile cache artifact file ({exc})") from None
    checked = check_entries(path, entries)  # before the list: a file that writes outside is refused as such
    if problem is None and manifest is not None:
        listed = [{"type": kind, "key": key, "bytes": len(content)} for kind, key, content in entries]
        if manifest.get("entries") != listed:
            problem = "does not match its manifest (its entries differ from the manifest's list)"
    warning = None
    if problem is not None:
        if not trust:
            raise NbcompileError(_refusal(path, problem))
        warning = f"warning: {path} {problem}, loaded with --trust: {TRUST_WARNING}"
    return Plan(path, len(payload), checked, manifest, warning)


def _refusal(path: str, problem: str | None) -> str:
    return (f"{path} {problem}; not loaded: {TRUST_WARNING}; if you trust it, "
            "%nbcompile cache load PATH --trust")


def apply(plan: Plan) -> int:
    """Write the plan's entries through torch's own writers; returns how many were written."""
    return torch_compat.write_compile_cache_entries([(e.kind, e.key, e.content) for e in plan.written])


def save(path: str) -> tuple[int, str]:
    """This process's cache artifacts written to ``path`` with their manifest: (payload bytes, what)."""
    payload = torch_compat.compile_cache_payload()
    entries = torch_compat.decode_compile_cache(payload)
    check_entries("the artifacts", entries)  # never write a file that load would refuse
    head = MAGIC + json.dumps(manifest_of(payload, entries), separators=(",", ":")).encode("utf-8") + b"\n"
    if len(head) + len(payload) > MAX_FILE_BYTES:
        raise NbcompileError(f"not saved: the artifacts are {_size(len(head) + len(payload))}, over the {_limit()} "
                             "a cache file may hold (a load would refuse the file)")
    partial = f"{path}.partial-{os.getpid()}"
    try:
        with open(partial, "wb") as handle:
            handle.write(head)
            handle.write(payload)  # not joined to the head: no copy of the payload
        os.replace(partial, path)  # a failed write leaves what was at path as it was
    except OSError as exc:
        if os.path.exists(partial):
            os.unlink(partial)
        raise NbcompileError(f"cannot write {path}: {exc.strerror}") from None
    counts: dict[str, int] = {}
    for kind, _, _ in entries:
        counts[kind] = counts.get(kind, 0) + 1
    return len(payload), ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in counts.items())
