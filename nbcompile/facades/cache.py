"""The compile cache for a warm start (``%nbcompile cache save | load | list``): torch.compile's cache
artifacts written to a file with a manifest (``engine/cachefile.py``), and a saved file listed (each
entry checked, nothing written) or loaded (listed first, then written through torch's own writers, and
its keys' parts handed to the hub, which explains a later cache miss against them). Each says what it
did in lines handed to ``say``; a refusal is an ``NbcompileError`` in one line."""

from __future__ import annotations

from collections.abc import Callable

from ..capture.hub import HUB
from ..engine import cachefile


def save(path: str, *, say: Callable[[str], None] = print) -> None:
    """This process's compile cache artifacts written to ``path`` with a manifest (sha256)."""
    size, what = cachefile.save(path, HUB.keys.known())
    say(f"saved {size / 1e6:.2f} MB of compile cache artifacts to {path} ({what}), with a manifest (sha256)")


def listing(path: str, *, trust: bool = False, say: Callable[[str], None] = print) -> cachefile.Plan:
    """What a load of ``path`` would write, every entry checked, said; nothing is written. Without
    ``trust``, a file whose manifest does not match is refused."""
    plan = cachefile.read(path, trust=trust)  # checks every entry; writes nothing
    if plan.warning:
        say(plan.warning)
    say("\n".join(plan.lines()))
    return plan


def show(path: str, *, trust: bool = False, say: Callable[[str], None] = print) -> None:
    """``listing``, and that it wrote nothing."""
    listing(path, trust=trust, say=say)
    say("nothing written (list); %nbcompile cache load PATH writes these")


def load(path: str, *, trust: bool = False, say: Callable[[str], None] = print) -> None:
    """The artifacts of ``path`` listed, then written: the next compiles of the same code start warm. The
    hub learns the saved keys' parts, so a later miss is explained against them."""
    plan = listing(path, trust=trust, say=say)
    cachefile.apply(plan)
    saved = plan.manifest.get("torch") if plan.manifest else None
    HUB.keys.loaded(path, saved if isinstance(saved, str) else "",
                    frozenset(e.key.rsplit("/", 1)[-1] for e in plan.written),
                    cachefile.key_parts_of(plan.manifest))
    say(f"loaded {plan.size / 1e6:.2f} MB of compile cache artifacts from {path} ({plan.what()}): the next "
        "compiles of the same code start warm")
