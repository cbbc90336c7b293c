"""`%nbcompile cache load` under hostile use (issue 21, point 1): a crafted artifact file writes nothing
outside torch's cache, a file without a matching manifest needs `--trust`, a load lists what it writes
before writing, never unpickles anything while loading, and a saved file loads warm."""

from __future__ import annotations

import hashlib
import json
import pickle

import pytest
import torch
from IPython.core.error import UsageError
from torch.compiler._cache import CacheArtifactFactory, CacheArtifactManager, _serialize_single_cache
from torch.utils._appending_byte_serializer import AppendingByteSerializer

from nbcompile.core.errors import NbcompileError

MAGIC = b"NBCOMPILE-CACHE 1\n"


def torch_payload(*entries: tuple[str, str, bytes]) -> bytes:
    """Bytes in torch's own artifact format (what torch.compiler.save_cache_artifacts returns), built
    with torch's own serializer, entries grouped by type in order."""
    CacheArtifactManager._ensure_cache_artifacts_registered()
    groups: dict[str, list] = {}
    for kind, key, content in entries:
        groups.setdefault(kind, []).append(CacheArtifactFactory.create(kind, key, content))
    serializer = AppendingByteSerializer(serialize_fn=_serialize_single_cache)
    serializer.extend(groups.items())
    return serializer.to_bytes()


def with_manifest(payload: bytes, entries: list[tuple[str, str, bytes]]) -> bytes:
    """A header and manifest an attacker can forge as well as `cache save` writes it (the manifest is
    integrity, not authorship): the sha256 and the entries list match the payload."""
    manifest = {"format": "nbcompile-compile-cache", "version": 1, "torch": torch.__version__,
                "bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest(),
                "entries": [{"type": k, "key": key, "bytes": len(c)} for k, key, c in entries]}
    return MAGIC + json.dumps(manifest).encode() + b"\n" + payload


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    """torch's cache in an empty directory of its own, and a stand-in for ~/.ipython/profile_default/startup."""
    root = tmp_path / "home" / "inductor-cache"
    root.mkdir(parents=True)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(root))
    startup = tmp_path / "home" / ".ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    return root, startup


def files_under(path) -> list:
    return sorted(p for p in path.rglob("*") if p.is_file())


def load_error(ip, line: str) -> str:
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("nbcompile", line)
    message = str(info.value)
    assert "\n" not in message, message
    return message


def test_a_crafted_file_with_an_absolute_key_writes_nothing_anywhere(ip, cache, tmp_path, capsys):
    root, startup = cache
    target = startup / "00-nbcompile.py"
    hostile = [("aot_autograd", "aciggubcbf6izuas6mi6c4mnlw", b"harmless"),
               ("autotune", str(target), b"open('/tmp/pwned', 'w')\n")]
    raw = tmp_path / "raw.bin"
    raw.write_bytes(torch_payload(*hostile))
    forged = tmp_path / "forged.bin"
    forged.write_bytes(with_manifest(torch_payload(*hostile), hostile))
    for line in (f"cache load {raw} --trust", f"cache load {forged}", f"cache load {forged} --trust",
                 f"cache list {forged}"):
        message = load_error(ip, line)
        assert f"entry 2 (autotune {str(target)!r}): its key is an absolute path" in message, message
        assert "nothing was written" in message
        assert not target.exists() and files_under(root) == [], line  # not even the harmless entry 1
    # without --trust a file with no manifest is refused from its head, before a byte of it is decoded (safer
    # than decoding it to name the key): the refusal says what is wrong and what would load it
    message = load_error(ip, f"cache load {raw}")
    assert "has no nbcompile manifest" in message and "--trust" in message, message
    assert not target.exists() and files_under(root) == []
    assert "loaded" not in capsys.readouterr().out


def test_a_crafted_file_with_a_climbing_key_writes_nothing(ip, cache, tmp_path):
    root, _ = cache
    for kind, key in (("aot_autograd", "../../escaped"), ("inductor", "../../../escaped"),
                      ("autotune", "ab/../../escaped.best_config"), ("precompile", "../../escaped")):
        hostile = [(kind, key, b"payload")]
        raw, forged = tmp_path / f"{kind}.bin", tmp_path / f"{kind}-forged.bin"
        raw.write_bytes(torch_payload(*hostile))
        forged.write_bytes(with_manifest(torch_payload(*hostile), hostile))
        for line in (f"cache load {raw} --trust", f"cache load {forged}"):  # raw without --trust: refused unread
            message = load_error(ip, line)
            assert f"entry 1 ({kind} {key!r}): its key climbs out of the cache directory (..)" in message, message
            assert files_under(root) == [] and not list(tmp_path.rglob("escaped*")), kind


def test_a_key_that_torch_would_join_outside_or_that_forges_lines_is_refused(ip, cache, tmp_path, capsys):
    root, _ = cache
    # FxGraphCache writes under fxgraph/key[1:3]/key: for "x/t-escape", key[1:3] is "/t", an absolute
    # part, so torch would write /t/x/t-escape: a relative key without "..", caught by where it lands
    for kind, key, why in (("inductor", "x/t-escape", "it would write /t/x/t-escape, outside torch's cache"),
                           ("aot_autograd", "ok\nloaded 9 MB: all fine", "its key holds a control character")):
        hostile = [(kind, key, b"payload")]
        path = tmp_path / "file.bin"
        path.write_bytes(with_manifest(torch_payload(*hostile), hostile))
        message = load_error(ip, f"cache load {path}")
        assert f"entry 1 ({kind} {key!r}): {why}" in message, message
        assert files_under(root) == [] and not (tmp_path / "t").exists()
    assert "all fine" not in capsys.readouterr().out


def test_a_file_without_a_matching_manifest_needs_trust(ip, cache, tmp_path, capsys):
    root, _ = cache
    entries = [("aot_autograd", "aqsafekey", b"not a pickle")]
    raw = tmp_path / "raw.bin"
    raw.write_bytes(torch_payload(*entries))
    message = load_error(ip, f"cache load {raw}")
    assert "has no nbcompile manifest" in message and "--trust" in message and "like a pickle" in message
    assert files_under(root) == []

    tampered = tmp_path / "tampered.bin"
    good = with_manifest(torch_payload(*entries), entries)
    header = good[:good.index(b"\n", len(MAGIC)) + 1]
    tampered.write_bytes(header + torch_payload(("aot_autograd", "aqsafekey", b"now a pickle")))  # crc fixed
    message = load_error(ip, f"cache load {tampered}")
    assert "does not match its manifest (sha256 differs" in message and files_under(root) == []

    listed = tmp_path / "listed.bin"
    other = [("aot_autograd", "aqotherkey", b"not a pickle")]
    listed.write_bytes(with_manifest(torch_payload(*entries), other))  # hash right, list wrong
    message = load_error(ip, f"cache load {listed}")
    assert "its entries differ from the manifest's list" in message and files_under(root) == []

    capsys.readouterr()
    ip.run_line_magic("nbcompile", f"cache load {raw} --trust")
    out = capsys.readouterr().out.splitlines()
    warnings = [line for line in out if line.startswith("warning:")]
    assert len(warnings) == 1 and "runs code" in warnings[0] and "like a pickle" in warnings[0]
    written = files_under(root)
    assert [p.relative_to(root).parts[:2] for p in written] == [("aotautograd", "aqsafekey")]
    assert written[0].read_bytes() == b"not a pickle"
    with pytest.raises(UsageError, match=r"usage: %nbcompile cache save PATH \| %nbcompile cache load PATH "
                                         r"\[--trust\]"):
        ip.run_line_magic("nbcompile", f"cache save {tmp_path / 'x.bin'} --trust")


class Marker:
    """Unpickling this creates a file: the stand-in for a pickle that runs code."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_load_lists_before_writing_and_unpickles_nothing(ip, cache, tmp_path, capsys):
    root, _ = cache
    marker = tmp_path / "unpickled"
    entries = [("inductor", "fsxyzsafekey", pickle.dumps(Marker(str(marker)))),
               ("aot_autograd", "aqsafekey", b"entry")]
    path = tmp_path / "file.bin"
    path.write_bytes(with_manifest(torch_payload(*entries), entries))

    capsys.readouterr()
    ip.run_line_magic("nbcompile", f"cache list {path}")
    out = capsys.readouterr().out
    assert "2 entries" in out and "fxgraph/sx/fsxyzsafekey/" in out and "aotautograd/aqsafekey/" in out
    assert str(root) in out and "nothing written" in out and files_under(root) == []

    ip.run_line_magic("nbcompile", f"cache load {path}")
    out = capsys.readouterr().out
    assert out.index("fxgraph/sx/fsxyzsafekey/") < out.index("loaded ")  # the listing comes first
    assert sorted(p.relative_to(root).parts[0] for p in files_under(root)) == ["aotautograd", "fxgraph"]
    assert not marker.exists(), "loading unpickled an entry (torch's Triton bundle emission ran at load)"


CELL_SOURCE = """\
def warm_fn(x):
    return (x.sin() * 2 + x.cos()).relu().sum() + 3.0
"""


def fresh_warm_fn():
    namespace: dict = {}
    exec(compile(CELL_SOURCE, "<cache-trust-cell>", "exec"), namespace)  # new code: Dynamo compiles it anew
    return namespace["warm_fn"]


@pytest.mark.slow  # Inductor
def test_save_then_load_into_an_empty_cache_starts_warm(ip, tmp_path, monkeypatch, capsys):
    from torch._dynamo.utils import counters

    x = torch.randn(64)
    expected = fresh_warm_fn()(x)
    torch.compile(fresh_warm_fn(), backend="inductor")(x)  # into the shared test cache, cold or warm
    saved = tmp_path / "artifacts.bin"
    ip.run_line_magic("nbcompile", f"cache save {saved}")
    data = saved.read_bytes()
    assert data.startswith(MAGIC)
    manifest = json.loads(data[len(MAGIC):data.index(b"\n", len(MAGIC))])
    payload = data[data.index(b"\n", len(MAGIC)) + 1:]
    assert manifest["sha256"] == hashlib.sha256(payload).hexdigest() and manifest["torch"] == torch.__version__
    assert {"inductor", "aot_autograd"} <= {e["type"] for e in manifest["entries"]}

    empty = tmp_path / "empty-cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(empty))
    capsys.readouterr()
    ip.run_line_magic("nbcompile", f"cache load {saved}")
    out = capsys.readouterr().out
    assert "fxgraph/" in out and "aotautograd/" in out and "start warm" in out
    hits = counters["aot_autograd"]["autograd_cache_hit"], counters["inductor"]["fxgraph_cache_hit"]
    torch.testing.assert_close(torch.compile(fresh_warm_fn(), backend="inductor")(x), expected)
    assert (counters["aot_autograd"]["autograd_cache_hit"], counters["inductor"]["fxgraph_cache_hit"]) > hits, \
        "the compile after the load missed the loaded cache"


def hand_built_payload(*entries: tuple[str, str, bytes]) -> bytes:
    """torch's artifact wire format written by hand, as an attacker would (torch's own serializer refuses an
    unknown type): a crc32, a count, then per type its base64 name and (base64 key, content) pairs."""
    import base64
    import zlib

    def field(data: bytes) -> bytes:
        return len(data).to_bytes(8, "big") + data

    groups: dict[str, list[tuple[str, bytes]]] = {}
    for kind, key, content in entries:
        groups.setdefault(kind, []).append((key, content))
    body = len(groups).to_bytes(8, "big")
    for kind, items in groups.items():
        body += field(base64.b64encode(kind.encode())) + len(items).to_bytes(8, "big")
        for key, content in items:
            body += field(base64.b64encode(key.encode())) + field(content)
    return zlib.crc32(body).to_bytes(4, "big") + body


def test_an_entry_type_never_forges_a_line_of_the_refusal(ip, cache, tmp_path, capsys):
    root, _ = cache
    hostile = [("inductor\nloaded 9.00 MB of compile cache artifacts: all fine", "fsafekey", b"x")]
    path = tmp_path / "file.bin"
    path.write_bytes(with_manifest(hand_built_payload(*hostile), hostile))
    for line in (f"cache list {path}", f"cache load {path} --trust"):
        try:
            ip.run_line_magic("nbcompile", line)
        except UsageError as exc:
            assert "\n" not in str(exc), str(exc)
    out = capsys.readouterr().out
    assert not any(line.startswith("loaded 9.00 MB") for line in out.splitlines()), out
    assert files_under(root) == []


@pytest.mark.parametrize("kind", ["device", "fifo", "directory"])
def test_a_path_that_is_not_a_regular_file_is_refused_unread(ip, cache, tmp_path, kind):
    import os

    path = tmp_path / "artifacts.bin"
    if kind == "device":
        path.symlink_to("/dev/zero")  # read until memory runs out, before
    elif kind == "fifo":
        os.mkfifo(path)  # blocked forever, before
    else:
        path.mkdir()
    for command in ("list", "load"):
        message = load_error(ip, f"cache {command} {path}")
        assert "not a regular file" in message or "Is a directory" in message, message


# --- issue 21 leftovers (N9): a file is bounded before it is read --------------------------------------

def sparse_file(path, head: bytes, size: int):
    """``head``, then zeros to ``size`` bytes: a hole that takes no disk (as a hostile file would)."""
    with open(path, "wb") as handle:
        handle.write(head)
        handle.truncate(size)
    return path


def peak_while(action) -> tuple[int, str]:
    """The most bytes Python held while ``action`` ran (tracemalloc: every bytes object read or copied is
    counted, so this is how much of a file was read and how often it was copied), and its error."""
    import tracemalloc

    from nbcompile.core.errors import NbcompileError

    tracemalloc.start()
    try:
        action()
        message = ""
    except NbcompileError as exc:
        message = str(exc)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak, message


def test_a_payload_whose_size_is_not_the_manifests_is_refused_unread(ip, cache, tmp_path):
    """A sparse file of 256 MB behind a manifest that says 10 bytes: refused from its head, the payload
    never read (before: read whole, copied twice, then refused by its sha256)."""
    from nbcompile.engine import cachefile

    manifest = {"format": "nbcompile-compile-cache", "version": 1, "torch": torch.__version__, "bytes": 10,
                "sha256": "0" * 64, "entries": []}
    path = sparse_file(tmp_path / "sparse.bin", MAGIC + json.dumps(manifest).encode() + b"\n", 256 << 20)
    peak, message = peak_while(lambda: cachefile.read(str(path)))
    assert "the manifest says 10 bytes of payload, the file holds" in message, message
    assert "--trust" in message
    assert peak < 4 << 20, f"{peak / 2**20:.0f} MB held to refuse a file by its manifest's size"
    message = load_error(ip, f"cache list {path}")
    assert "the manifest says 10 bytes of payload" in message and "not loaded" in message
    no_size = sparse_file(tmp_path / "no-size.bin", MAGIC + b'{"format":"nbcompile-compile-cache","version":1}\n',
                          256 << 20)
    peak, message = peak_while(lambda: cachefile.read(str(no_size)))
    assert "the manifest gives no size of payload" in message and peak < 4 << 20, (message, peak)


def test_a_file_over_the_limit_is_refused_by_its_size_naming_the_limit(ip, cache, tmp_path):
    from nbcompile.engine import cachefile

    assert cachefile.MAX_FILE_BYTES <= 512 << 20, "a compile cache file may take gigabytes of memory to refuse"
    path = sparse_file(tmp_path / "big.bin", MAGIC, cachefile.MAX_FILE_BYTES + 1)
    for trust in (False, True):
        peak, message = peak_while(lambda: cachefile.read(str(path), trust=trust))  # noqa: B023
        assert f"over the {cachefile.MAX_FILE_BYTES >> 20} MiB a cache file may hold; nothing was read" in message, \
            message
        assert peak < 1 << 20, f"{peak / 2**20:.0f} MB held to refuse a file by its size"
    assert "over the 512 MiB a cache file may hold" in load_error(ip, f"cache load {path} --trust")


def test_a_file_under_the_limit_is_read_once_not_copied_whole(cache, tmp_path):
    """A file whose manifest gives its size right but not its hash is refused after one read, never
    decoded (before: the file read into a buffer the size of the limit, the payload sliced off, the
    checksum's slice: three times the file). torch's own format (no manifest, read only to be refused
    or with --trust) is read once; torch_compat's checksum still slices it (twice the file)."""
    from nbcompile.engine import cachefile

    size = 32 << 20
    head = MAGIC + b'{"format":"nbcompile-compile-cache","version":1,"bytes":%d}\n'
    sized = sparse_file(tmp_path / "sized.bin", head % (size - len(head % size)), size)
    peak, message = peak_while(lambda: cachefile.read(str(sized)))
    assert "does not match its manifest (sha256 differs" in message and "not loaded" in message, message
    assert peak < 1.5 * size, f"{peak / size:.1f} times the file held while reading it"
    raw = sparse_file(tmp_path / "raw.bin", b"", size)
    peak, message = peak_while(lambda: cachefile.read(str(raw), trust=True))
    assert "is not a torch.compile cache artifact file (its checksum does not match" in message, message
    assert peak < 2.5 * size, f"{peak / size:.1f} times the file held while reading it"


# --- issue 21 leftovers (A5): refused before decoding, a bounded entry count, linear key checks -----------

@pytest.mark.parametrize("head", ["torch", MAGIC + b"{not json\n", MAGIC + b'{"format":"nbcompile-compile-cache",'
                                  b'"version":7}\n', b"", b"not a cache"],
                         ids=["no-manifest", "damaged-manifest", "other-version", "zeros", "text"])
def test_a_file_whose_head_fails_is_refused_unread_without_trust(cache, tmp_path, head):
    """A file whose head already says it has no matching manifest is refused from the head, its payload
    never read nor decoded (before: read whole and decoded, 82 s for 200,000 tiny entries, then refused);
    one whose first bytes are not torch's artifact format either is named so (not worth a --trust)."""
    from nbcompile.engine import cachefile

    if head == "torch":  # torch's own format, as save_cache_artifacts writes it: a cache, without a manifest
        head = torch_payload(*[("aot_autograd", f"aq{i:05d}", b"x") for i in range(100)])
    path = sparse_file(tmp_path / "head.bin", head, 32 << 20)
    peak, message = peak_while(lambda: cachefile.read(str(path)))
    if head.startswith(MAGIC) or len(head) > 100:
        assert "manifest" in message and "not loaded" in message and "--trust" in message, message
        assert "not a torch.compile cache artifact file" not in message, "it was decoded before it was refused"
    else:
        assert "is not a torch.compile cache artifact file (" in message and "--trust" not in message, message
    assert peak < 1 << 20, f"{peak / 2**20:.1f} MB held to refuse a file by its head"


def test_a_file_over_the_entry_limit_is_refused_trust_or_not_naming_the_limit(ip, cache, tmp_path):
    from nbcompile.engine import cachefile

    root, _ = cache
    limit = getattr(cachefile, "MAX_ENTRIES", 100_000)  # read so, the test also runs (and fails) on code without it
    assert limit <= 100_000
    entries = [("aot_autograd", f"aq{i:07d}", b"x") for i in range(limit + 1)]
    payload = torch_payload(*entries)
    raw, forged, lying = tmp_path / "raw.bin", tmp_path / "forged.bin", tmp_path / "lying.bin"
    raw.write_bytes(payload)
    forged.write_bytes(with_manifest(payload, entries))
    lying.write_bytes(with_manifest(payload, entries[:1]))  # the hash is right, the list says one entry
    for line in (f"cache load {raw} --trust", f"cache load {forged}", f"cache list {forged} --trust",
                 f"cache load {lying}", f"cache load {lying} --trust"):
        message = load_error(ip, line)
        assert f"over the {limit:,} entries a cache file may hold" in message, (line, message)
        assert "--trust or not" in message and "nothing was written" in message
        assert files_under(root) == [], line


def test_keys_are_judged_with_the_cache_directory_resolved_once_per_type(cache, tmp_path, monkeypatch):
    """Linear key checks: torch's place for a type and its real path are asked once, not per entry (before:
    two realpath()s and torch's cache_dir() per entry); a symlink in the cache that leads out is still
    refused, one that stays inside is followed."""
    import os

    from nbcompile.engine import cachefile

    root, _ = cache
    entries = [*(("aot_autograd", f"aq{i:05d}", b"a") for i in range(1500)),
               *(("inductor", f"f{i:05d}xyz", b"i") for i in range(1500)), ("autotune", "ab/cd.best_config", b"t")]
    path = tmp_path / "file.bin"
    path.write_bytes(with_manifest(torch_payload(*entries), entries))
    calls = []
    realpath = os.path.realpath
    monkeypatch.setattr(os.path, "realpath", lambda p, *a, **k: calls.append(p) or realpath(p, *a, **k))
    plan = cachefile.read(str(path))
    assert len(plan.written) == len(entries)
    assert len(calls) <= 3, f"{len(calls)} realpath() calls for {len(entries)} entries"

    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "aotautograd").symlink_to(outside)
    (root / "fxgraph").mkdir()
    (root / "elsewhere").mkdir()
    (root / "fxgraph" / "00").symlink_to(root / "elsewhere")  # inside the cache: followed, allowed
    calls.clear()
    with pytest.raises(NbcompileError) as info:
        cachefile.read(str(path))
    message = str(info.value)
    assert f"entry 1 (aot_autograd 'aq00000'): it would write {root / 'aotautograd' / 'aq00000'} (through the " \
           f"link {root / 'aotautograd'} to {outside}), outside torch's cache {root}" in message, message
    assert "(1499 more entries refused)" in message and len(calls) <= 6
    assert files_under(outside) == [] and files_under(root) == []
