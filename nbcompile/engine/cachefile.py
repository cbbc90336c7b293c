"""`%nbcompile cache save | load | list`: torch.compile's cache artifacts in a file with a manifest,
and the trust policy of loading one.

A cache file is code: Inductor's FX graphs, AOTAutograd's entries and Dynamo's PGO and precompile
entries are pickles that torch unpickles on a cache hit. So loading is safe by design:

- ``save`` writes a header line, a one-line JSON manifest (format version, torch version, the
  payload's size and sha256, the entries: type, key, bytes) and torch's payload after it;
- ``read`` is bounded before it reads: a regular file of at most ``MAX_FILE_BYTES``, its manifest line
  read in chunks; without ``trust``, a file whose head already fails (no manifest, a damaged one, another
  version, a payload whose size is not the manifest's) is refused unread, and one whose sha256 is not
  the manifest's refused undecoded; the payload is read once, never copied whole here. It decodes at
  most ``MAX_ENTRIES`` entries (more is refused, ``trust`` or not) without applying any, checks the
  manifest's list of entries, and checks every entry's key: an absolute key, a ``..`` part, or a path
  that lands outside the directory torch writes that type under (a symlink in it included) is refused,
  with or without ``trust``, and then nothing at all is written. The checks are linear: torch's place
  for each type and its real path are asked once, each key is judged by its string, and each directory
  a key passes through is looked at once;
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
from collections.abc import Mapping
from typing import BinaryIO

import torch

from ..core import torch_compat
from ..core.errors import NbcompileError
from ..core.text import cut

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
                lines.append(f"  {entry.kind:<13} {cut(entry.key, 60)}  skipped: torch writes nothing for it here "
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


def manifest_of(payload: bytes, entries: list[torch_compat.CacheEntry],
                key_parts: Mapping[str, Mapping[str, tuple[str, str]]] | None = None) -> dict[str, object]:
    manifest: dict[str, object] = {
        "format": FORMAT,
        "version": VERSION,
        "torch": torch.__version__,
        "bytes": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(),
        "entries": [{"type": kind, "key": key, "bytes": len(content)} for kind, key, content in entries],
    }
    if key_parts:  # the parts of the FX graph keys this process saw: a later miss can say what differed
        manifest["key_parts"] = {key: {label: list(part) for label, part in parts.items()}
                                 for key, parts in key_parts.items()}
    return manifest


def key_parts_of(manifest: Mapping[str, object] | None) -> dict[str, dict[str, tuple[str, str]]]:
    """A manifest's ``key_parts`` as data, bounded and checked (a file's text: never trusted to be well formed);
    malformed parts are left out."""
    found = manifest.get("key_parts") if manifest else None
    out: dict[str, dict[str, tuple[str, str]]] = {}
    if not isinstance(found, dict):
        return out
    for key, parts in list(found.items())[:MAX_ENTRIES]:
        if not isinstance(key, str) or not isinstance(parts, dict):
            continue
        kept = {label[:120]: (str(part[0])[:64], str(part[1])[:400]) for label, part in list(parts.items())[:200]
                if isinstance(label, str) and isinstance(part, list) and len(part) == 2}
        out[key[:200]] = kept
    return out


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


class _Tree:
    """The checks below one type's cache directory, asked of the disk once each: its real path (symlinks
    resolved once, not once per key), and every directory a key passes through, looked at once however
    many keys pass through it (a key is judged by its string against them: linear in the entries)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.real = os.path.realpath(root)
        self._prefix = os.path.join(self.root, "")
        #: Paths under ``root`` looked at: True, a directory or file there (or a link that stays inside);
        #: False, nothing there (so nothing under it); a str, the link there and where it leads outside.
        self._seen: dict[str, bool | str] = {}

    def escape(self, target: str) -> str | None:
        """Where ``target`` lands when it lands outside this tree (None: inside). Lexically first (a key that
        torch joins outside, an absolute part included), then each existing part of it below the root: a
        symlink there must lead inside the root's real path."""
        path = os.path.abspath(target)
        if not path.startswith(self._prefix) or path == self.root:
            return path
        at = len(self._prefix)
        while at <= len(path):
            cut = path.find(os.sep, at)
            part = path if cut < 0 else path[:cut]
            state = self._seen.get(part)
            if state is None:
                state = self._seen[part] = self._look(part)
            if state is False:
                return None  # nothing exists here, so nothing below it: no link to follow
            if isinstance(state, str):
                return f"{path} ({state})"
            if cut < 0:
                return None
            at = cut + 1
        return None

    def _look(self, part: str) -> bool | str:
        try:
            info = os.lstat(part)
        except OSError:
            return False
        if not stat.S_ISLNK(info.st_mode):
            return True
        real = os.path.realpath(part)
        inside = real != self.real and os.path.commonpath([real, self.real]) == self.real
        return True if inside else f"through the link {part} to {real}"


def check_entries(path: str, entries: list[torch_compat.CacheEntry]) -> list[Entry]:
    """Every entry checked: its key by its string (``key_problem``), where torch writes it asked of torch
    once per type (``torch_compat.compile_cache_layout``), and that place against the type's cache
    directory, whose real path is resolved once; one line naming the first refused (and how many more)
    when any is."""
    layouts: dict[str, tuple[torch_compat.CacheLayout, _Tree] | NbcompileError] = {}
    checked: list[Entry] = []
    refused: list[str] = []
    for index, (kind, key, content) in enumerate(entries, 1):
        problem = key_problem(key)
        if problem is None:
            if kind not in layouts:
                try:
                    layout = torch_compat.compile_cache_layout(kind)
                    layouts[kind] = (layout, _Tree(layout.root))
                except NbcompileError as exc:
                    layouts[kind] = exc
            found = layouts[kind]
            if isinstance(found, NbcompileError):
                problem = str(found)
            else:
                layout, tree = found
                target = layout.place(key)
                outside = None if target is None else tree.escape(target)
                if outside is None:
                    checked.append(Entry(index, kind, key, content, layout.root, target))
                    continue
                problem = f"it would write {outside}, outside torch's cache {layout.root}"
        refused.append(f"{Entry(index, kind, key, content).label}: {problem}")
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
#: The most entries a cache file may hold (a large model's compile cache holds hundreds): past it a file is
#: refused, ``--trust`` or not, as soon as its manifest or its decoding says so (each entry is checked and
#: listed, and a load writes one file or more per entry).
MAX_ENTRIES = 100_000


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
    #: Without a manifest, why its first bytes cannot be torch's artifact format either (None: they can).
    not_torch: str | None = None


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
        return _Head(None, 0, size, "has no nbcompile manifest (not written by %nbcompile cache save)",
                     not_torch=torch_compat.compile_cache_head_problem(magic[:torch_compat.ARTIFACT_HEAD]))
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
    ``trust``: refused from the file's head, before its payload is read or decoded), over
    ``MAX_ENTRIES`` entries, or an entry that would write outside torch's cache (both always: ``trust``
    is trust in the file's author, never permission to write anywhere or without bound)."""
    handle, size = _open_regular(path)
    with handle:
        head = _read_head(handle, size)
        if head.not_torch is not None and not trust:  # neither nbcompile's nor torch's: not worth a --trust
            raise NbcompileError(f"{path} is not a torch.compile cache artifact file ({head.not_torch})")
        if head.problem is not None and not trust:  # refused from its head: the payload is never read
            raise NbcompileError(_refusal(path, head.problem))
        listed = head.manifest.get("entries") if head.manifest is not None else None
        if isinstance(listed, list) and len(listed) > MAX_ENTRIES:
            raise NbcompileError(_too_many(path, f"its manifest lists {len(listed):,} entries"))
        payload = _read_payload(path, handle, head)
    manifest, problem = head.manifest, head.problem
    if problem is None and manifest is not None and manifest.get("sha256") != hashlib.sha256(payload).hexdigest():
        problem = "does not match its manifest (sha256 differs: changed after it was saved)"
        if not trust:  # not what was saved: refused without decoding it
            raise NbcompileError(_refusal(path, problem))
    try:
        entries = torch_compat.decode_compile_cache(payload, max_entries=MAX_ENTRIES)
    except torch_compat.TooManyEntries as exc:
        raise NbcompileError(_too_many(path, str(exc))) from None
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


def _too_many(path: str, what: str) -> str:
    return (f"{path}: {what}, over the {MAX_ENTRIES:,} entries a cache file may hold (a large model's compile "
            "cache holds hundreds); not loaded, --trust or not, and nothing was written")


def _refusal(path: str, problem: str | None) -> str:
    return (f"{path} {problem}; not loaded: {TRUST_WARNING}; if you trust it, "
            "%nbcompile cache load PATH --trust")


def apply(plan: Plan) -> int:
    """Write the plan's entries through torch's own writers; returns how many were written."""
    return torch_compat.write_compile_cache_entries([(e.kind, e.key, e.content) for e in plan.written])


def save(path: str, key_parts: Mapping[str, Mapping[str, tuple[str, str]]] | None = None) -> tuple[int, str]:
    """This process's cache artifacts written to ``path`` with their manifest: (payload bytes, what).
    ``key_parts``: the parts of FX graph keys seen in this process; those of the saved entries go in the
    manifest."""
    payload = torch_compat.compile_cache_payload()
    try:
        entries = torch_compat.decode_compile_cache(payload, max_entries=MAX_ENTRIES)
    except torch_compat.TooManyEntries as exc:  # never write a file that load would refuse
        raise NbcompileError(f"not saved: the artifacts hold {exc.holds}") from None
    check_entries("the artifacts", entries)
    saved_keys = {key for _, key, _ in entries}
    parts = {key: value for key, value in (key_parts or {}).items() if key in saved_keys}
    head = MAGIC + json.dumps(manifest_of(payload, entries, parts), separators=(",", ":")).encode("utf-8") + b"\n"
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
