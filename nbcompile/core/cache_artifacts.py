"""torch.compile's cache artifacts as plain data, in pure Python (no torch API): an artifact file read
into entries (``decode``), and where torch writes each type of entry (``CacheLayout``).

The bytes are read without applying anything; ``head_problem`` judges a file by its first bytes.
What only torch knows (its format version, its path functions) is handed in by ``torch_compat``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any

from .errors import NbcompileError

#: One entry of a cache artifact file: (type, key, content), in file order.
CacheEntry = tuple[str, str, bytes]


#: Bytes of a file's head that tell whether it can start torch's artifact format (a crc32, then the version).
ARTIFACT_HEAD = 12


def head_problem(head: bytes, version: int) -> str | None:
    """Why a file whose first bytes are ``head`` cannot be torch's artifact format (too short, another
    format version, not torch's at all), or None: read off its first ``ARTIFACT_HEAD`` bytes, nothing
    decoded (the checksum covers the whole file: only ``decode`` checks it)."""
    if len(head) < ARTIFACT_HEAD:
        return f"{len(head)} bytes, too short for torch's artifact header"
    found = int.from_bytes(head[4:ARTIFACT_HEAD], "big")
    if found == version:
        return None
    if found < 1 << 16:
        return f"torch's artifact format version {found}; this torch reads version {version}"
    return "its first bytes are not torch's artifact header (damaged, or another kind of file)"


class TooManyEntries(NbcompileError):
    """An artifact file holds more entries than the caller's bound (its message says how many were read)."""

    def __init__(self, bound: int, pos: int, size: int) -> None:
        #: What the file holds, in words: "more than N entries (read up to byte P of S)".
        self.holds = f"more than {bound:,} entries (read up to byte {pos:,} of {size:,})"
        super().__init__(f"it holds {self.holds}")


def decode(data: bytes, version: int, max_entries: int | None = None) -> list[CacheEntry]:
    """The entries of torch's artifact bytes, read without applying anything (torch's own reader trusts
    lengths and writes as it reads). Raises NbcompileError saying how the bytes are damaged, and
    ``TooManyEntries`` as soon as an entry past ``max_entries`` starts (None: no bound)."""
    import base64
    import binascii
    import zlib

    if len(data) < 12:
        raise NbcompileError(f"{len(data)} bytes, too short for torch's artifact header")
    if zlib.crc32(memoryview(data)[4:]).to_bytes(4, "big") != data[:4]:
        raise NbcompileError("its checksum does not match its contents (damaged, or not torch's artifact format)")
    pos = 4

    def uint() -> int:
        nonlocal pos
        if pos + 8 > len(data):
            raise NbcompileError(f"it ends inside a length at byte {pos}")
        pos += 8
        return int.from_bytes(data[pos - 8:pos], "big")

    def raw() -> bytes:
        nonlocal pos
        size = uint()
        if size > len(data) - pos:
            raise NbcompileError(f"it ends inside a field of {size} bytes at byte {pos}")
        pos += size
        return data[pos - size:pos]

    def text() -> str:
        try:
            return base64.b64decode(raw(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise NbcompileError(f"a name before byte {pos} is not base64 UTF-8 text") from None

    found = uint()
    if found != version:
        raise NbcompileError(f"torch's artifact format version {found}; this torch reads version {version}")
    entries: list[CacheEntry] = []
    while pos < len(data):
        kind = text()
        for _ in range(uint()):
            if max_entries is not None and len(entries) >= max_entries:
                raise TooManyEntries(max_entries, pos, len(data))
            key = text()
            entries.append((kind, key, raw()))
    return entries


@dataclasses.dataclass(frozen=True)
class CacheLayout:
    """Where torch writes the entries of one type: ``root``, the directory it writes under, and
    ``place(key)``, the path it writes for a key (a file, or the directory whose file it adds; None when
    torch writes nothing for it here: local PGO off)."""

    root: str
    place: Callable[[str], str | None]


#: Keys torch's path functions are checked against once per type: a plain one, and one whose ``key[1:3]``
#: is an absolute part (so the join nbcompile repeats is proved to be torch's, absolute parts included).
LAYOUT_PROBES = ("fprobekey0123", "x/t-probe")


def cache_dir_env_kept() -> Any:
    """torch's ``cache_dir()`` sets ``TORCHINDUCTOR_CACHE_DIR`` when it is unset: put it back as it was."""
    @contextlib.contextmanager
    def kept() -> Iterator[None]:
        before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    return kept()


def asked(where: Callable[[str], str | None]) -> Callable[[str], str | None]:
    """``where`` asked for each key, torch's cache directory variable left as it was."""
    def place(key: str) -> str | None:
        with cache_dir_env_kept():
            path = where(key)
        return None if path is None else str(path)
    return place


def joined(torch_place: Callable[[str], Any], join: Callable[[str], str]) -> Callable[[str], str | None]:
    """``join`` when it gives what torch's ``torch_place`` gives on every probe key, else torch's, per key."""
    if all(str(torch_place(probe)) == join(probe) for probe in LAYOUT_PROBES):
        return join
    return asked(torch_place)
