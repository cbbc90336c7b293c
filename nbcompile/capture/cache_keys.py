"""Why a compile missed torch's FX graph (or AOTAutograd) cache: its key's parts against the nearest key of the
same graph looked up before in this process (``Report.cache``).

Inductor's ``fx_graph_cache_miss`` artifact lists the parts of the key it computed, each with its hash
(``[hash] example_inputs[0]: TensorMetadata(dtype=..., shape=torch.Size([8]), ...)``, ``[hash]
inductor_config: ...``, ``[hash] torch_version: ...``). torch stores no such list beside a cache entry, so a
miss is explained against the keys this process saw (its own earlier lookups); a graph looked up for the
first time is said to be so. AOTAutograd lists no parts: its misses are counted, not explained.
"""

from __future__ import annotations

import collections
import re

from ..core.text import cut
from .records import CacheLookup

#: Most keys remembered.
MAX_KEYS = 512
_PART = re.compile(r"^\[(?P<hash>[^\]]*)\] (?P<label>[^:]+): ?(?P<value>.*)$", re.S)
_FIELD = re.compile(r"(\w+)=")


#: Characters of a part's value kept (a ``gm`` part is the whole graph's code: its hash says enough).
MAX_VALUE = 400
#: Parts kept per key.
MAX_PARTS = 200


def parts(components: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    """label -> (hash, value, cut to ``MAX_VALUE``) of a key's listed parts."""
    out: dict[str, tuple[str, str]] = {}
    for text in components[:MAX_PARTS]:
        m = _PART.match(text[:MAX_VALUE + 300])
        if m is not None:
            out[cut(m["label"].strip(), 120)] = (m["hash"][:64], m["value"].strip()[:MAX_VALUE])
    return out


def _fields(value: str) -> dict[str, str]:
    """``TensorMetadata(dtype=a, shape=torch.Size([8]), ...)`` -> {dtype: a, shape: torch.Size([8]), ...}."""
    inner = value[value.find("(") + 1:value.rfind(")")] if "(" in value else value
    marks = list(_FIELD.finditer(inner))
    out = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(inner)
        out[m[1]] = inner[m.end():end].rstrip().rstrip(",")
    return out


def _difference(label: str, before: str, after: str) -> str:
    was, now = _fields(before), _fields(after)
    if was and now and set(was) == set(now):
        changed = [f"{label}.{k}: {cut(was[k], 40)} -> {cut(now[k], 40)}" for k in was if was[k] != now[k]]
        if changed:
            return "; ".join(changed[:3])
    if label in ("gm", "torch_version", "system_info") or len(before) > 80 or len(after) > 80:
        return f"{label} differs"
    return f"{label}: {cut(before, 40)} -> {cut(after, 40)}"


class KeyBook:
    """The keys of the lookups seen in this process, newest last, and each miss's reason."""

    def __init__(self, where: str = "in this process") -> None:
        self.where = where
        #: The last ``%nbcompile cache load``: (its path, the torch that saved it, its entries' keys).
        self.load: tuple[str, str, frozenset[str]] | None = None
        #: Keys whose parts came from a loaded cache file's manifest.
        self._loaded_keys: set[str] = set()
        self._seen: collections.OrderedDict[str, tuple[str, dict[str, tuple[str, str]]]] = collections.OrderedDict()

    def note(self, lookup: CacheLookup, compile_id: str) -> str | None:
        """Remember ``lookup``'s key; for a miss, the line saying what differed (None for a hit or a bypass)."""
        mine = parts(lookup.components)
        again = bool(lookup.key) and lookup.key in self._seen
        reason = None
        if lookup.state == "miss":
            reason = (f"{'FX graph' if lookup.cache == 'fx_graph' else 'AOTAutograd'} cache miss [{compile_id}]: "
                      "the same key missed before here (its entry was not written, or was removed since)"
                      if again else self._reason(lookup, mine, compile_id))
        if lookup.key:
            self._seen[lookup.key] = (lookup.cache, mine)
            self._seen.move_to_end(lookup.key)
            while len(self._seen) > MAX_KEYS:
                self._seen.popitem(last=False)
        return reason

    def loaded(self, path: str, saved: str, keys: frozenset[str],
               parts: dict[str, dict[str, tuple[str, str]]] | None = None) -> None:
        """A ``%nbcompile cache load`` of ``keys``, saved by torch ``saved``: misses after it say whether the file
        held their key and a torch version that differs; with the manifest's key ``parts`` (what the saving
        process saw), what differed from the nearest saved key of the same graph."""
        self.load = (path, saved, keys)
        for key, mine in (parts or {}).items():
            if key not in self._seen:
                self._seen[key] = ("fx_graph", mine)
                self._loaded_keys.add(key)
        while len(self._seen) > MAX_KEYS:
            gone, _ = self._seen.popitem(last=False)
            self._loaded_keys.discard(gone)

    def parts_of(self, keys: set[str]) -> dict[str, dict[str, tuple[str, str]]]:
        """The parts of those of ``keys`` seen here (``%nbcompile cache save`` writes them in its manifest)."""
        return {key: self._seen[key][1] for key in keys if key in self._seen}

    def known(self) -> dict[str, dict[str, tuple[str, str]]]:
        """Every FX graph key seen here, with its parts."""
        return {key: parts for key, (cache, parts) in self._seen.items() if cache == "fx_graph" and parts}

    def _loaded(self, key: str) -> str:
        return _loaded_note(self.load, key)

    def _reason(self, lookup: CacheLookup, mine: dict[str, tuple[str, str]], compile_id: str) -> str:
        which = "FX graph" if lookup.cache == "fx_graph" else "AOTAutograd"
        head = f"{which} cache miss [{compile_id}]"
        if not mine:
            return f"{head}: torch lists no parts of this key, so what differed is not known"
        graph = mine.get("gm", ("", ""))[0]
        same_graph = [(key, theirs) for key, (cache, theirs) in self._seen.items()
                      if cache == lookup.cache and key != lookup.key and theirs.get("gm", ("", ""))[0] == graph]
        if not same_graph:
            return (f"{head}: a graph not looked up before {self.where} (torch keeps no list of a cached entry's key "
                    f"parts, so a cache written elsewhere cannot be compared){self._loaded(lookup.key)}")
        best_key, best = min(same_graph, key=lambda kv: _differing(kv[1], mine))
        labels = [label for label in sorted(set(best) | set(mine))
                  if best.get(label, ("",))[0] != mine.get(label, ("",))[0]]
        if not labels:
            return f"{head}: the same key parts as a key seen before (an entry written by another torch or removed)"
        said = [_difference(label, best.get(label, ("", "(none)"))[1], mine.get(label, ("", "(none)"))[1])
                for label in labels[:4]]
        more = f" and {len(labels) - 4} more" if len(labels) > 4 else ""
        before = (f"an entry of the cache loaded from {cut(self.load[0], 80)}" if best_key in self._loaded_keys
                  and self.load is not None else "before")
        return f"{head}: the same graph as {before}, with {'; '.join(said)}{more}"


def _loaded_note(load: tuple[str, str, frozenset[str]] | None, key: str) -> str:
    if load is None:
        return ""
    import torch  # a cache loaded in this process: torch is loaded

    path, saved, keys = load
    held = "holds" if key in keys else "does not hold"
    note = f"; the cache loaded from {cut(path, 80)} ({len(keys)} entries) {held} this key"
    if saved and saved != torch.__version__:
        note += f", and was saved by torch {cut(saved, 40)} where this is torch {torch.__version__} (its version is " \
                "part of every key)"
    return note


def _differing(a: dict[str, tuple[str, str]], b: dict[str, tuple[str, str]]) -> int:
    return sum(1 for label in set(a) | set(b) if a.get(label, ("",))[0] != b.get(label, ("",))[0])
