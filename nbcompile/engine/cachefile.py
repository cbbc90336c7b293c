"""`%nbcompile cache save | load | list`: torch.compile's cache artifacts in a file with a manifest,
and the trust policy of loading one.

A cache file is code: Inductor's FX graphs, AOTAutograd's entries and Dynamo's PGO and precompile
entries are pickles that torch unpickles on a cache hit. So loading is safe by design:

- ``save`` writes a header line, a one-line JSON manifest (format version, torch version, the
  payload's size and sha256, the entries: type, key, bytes) and torch's payload after it;
- ``read`` decodes every entry without applying any, checks the manifest (a file without one, or
  whose hash or entries do not match, is refused unless ``trust``), and checks every entry's key:
  an absolute key, a ``..`` part, or a path that lands outside the directory torch writes that type
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


def _split(data: bytes) -> tuple[dict[str, object] | None, bytes, str | None]:
    """(manifest, payload, what is wrong with the manifest) of a file's bytes."""
    if not data.startswith(MAGIC):
        return None, data, "has no nbcompile manifest (not written by %nbcompile cache save)"
    end = data.find(b"\n", len(MAGIC), len(MAGIC) + MANIFEST_LIMIT)
    if end < 0:
        return None, data[len(MAGIC):], "has a damaged manifest (no end of line)"
    payload = data[end + 1:]
    try:
        manifest = json.loads(data[len(MAGIC):end])
    except ValueError:
        return None, payload, "has a damaged manifest (not JSON)"
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return None, payload, "has a damaged manifest (not nbcompile's)"
    if manifest.get("version") != VERSION:
        return manifest, payload, f"has manifest version {manifest.get('version')!r}; this nbcompile reads {VERSION}"
    if manifest.get("bytes") != len(payload) or manifest.get("sha256") != hashlib.sha256(payload).hexdigest():
        return manifest, payload, "does not match its manifest (sha256 differs: changed after it was saved)"
    return manifest, payload, None


#: The largest cache file read (a device, a FIFO or a runaway file is refused before it is read).
MAX_FILE_BYTES = 2 << 30


def _read_regular(path: str) -> bytes:
    """The bytes of ``path`` when it is a regular file under ``MAX_FILE_BYTES`` (checked on the open
    handle, so a swapped link changes nothing); else a one-line refusal. A FIFO is opened without
    blocking, and ``/dev/zero`` or a named pipe is never read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise NbcompileError(f"cannot read {path}: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise NbcompileError(f"cannot read {path}: not a regular file (a cache file is one written by "
                             "%nbcompile cache save)")
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > MAX_FILE_BYTES:
            raise NbcompileError(f"cannot read {path}: {_size(info.st_size)}, over the {_size(MAX_FILE_BYTES)} a "
                                 "cache file may hold")
        try:
            return handle.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise NbcompileError(f"cannot read {path}: {exc.strerror}") from None


def read(path: str, *, trust: bool = False) -> Plan:
    """Decode and check a cache file, writing nothing: the Plan to show and then ``apply``.

    Raises NbcompileError, one line: unreadable, not torch's format, no matching manifest (unless
    ``trust``), or an entry that would write outside torch's cache (always: ``trust`` is trust in the
    file's author, never permission to write anywhere)."""
    data = _read_regular(path)
    manifest, payload, problem = _split(data)
    try:
        entries = torch_compat.decode_compile_cache(payload)
    except NbcompileError as exc:
        raise NbcompileError(f"{path} is not a torch.compile cache artifact file ({exc})") from None
    checked = check_entries(path, entries)  # first: a file that writes outside the cache is refused as such
    if problem is None and manifest is not None:
        listed = [{"type": kind, "key": key, "bytes": len(content)} for kind, key, content in entries]
        if manifest.get("entries") != listed:
            problem = "does not match its manifest (its entries differ from the manifest's list)"
    warning = None
    if problem is not None:
        if not trust:
            raise NbcompileError(f"{path} {problem}; not loaded: {TRUST_WARNING}; if you trust it, "
                                 "%nbcompile cache load PATH --trust")
        warning = f"warning: {path} {problem}, loaded with --trust: {TRUST_WARNING}"
    return Plan(path, len(payload), checked, manifest, warning)


def apply(plan: Plan) -> int:
    """Write the plan's entries through torch's own writers; returns how many were written."""
    return torch_compat.write_compile_cache_entries([(e.kind, e.key, e.content) for e in plan.written])


def save(path: str) -> tuple[int, str]:
    """This process's cache artifacts written to ``path`` with their manifest: (payload bytes, what)."""
    payload = torch_compat.compile_cache_payload()
    entries = torch_compat.decode_compile_cache(payload)
    check_entries("the artifacts", entries)  # never write a file that load would refuse
    manifest = manifest_of(payload, entries)
    data = MAGIC + json.dumps(manifest, separators=(",", ":")).encode("utf-8") + b"\n" + payload
    partial = f"{path}.partial-{os.getpid()}"
    try:
        with open(partial, "wb") as handle:
            handle.write(data)
        os.replace(partial, path)  # a failed write leaves what was at path as it was
    except OSError as exc:
        if os.path.exists(partial):
            os.unlink(partial)
        raise NbcompileError(f"cannot write {path}: {exc.strerror}") from None
    counts: dict[str, int] = {}
    for kind, _, _ in entries:
        counts[kind] = counts.get(kind, 0) + 1
    return len(payload), ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in counts.items())
