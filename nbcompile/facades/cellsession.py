"""A ``%%compile`` cell's session made: the cell planned from its source, its body run, its entries found,
the session it replaces retired, and the sessions whose names it takes over made stale."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.errors import NbcompileError
from ..core.names import is_torch_name
from ..core.options import CellOptions
from ..engine import library
from ..engine.cellplan import _default_entries, _resolve_entries, _tracked_objects, cell_key, plan_cell
from .session import Session, session_of_cell, sessions

__all__ = ["create_session"]


def create_session(
    namespace: dict[str, Any],
    body: str,
    options: CellOptions,
    *,
    cache_source: Callable[[str], str],
    label: str = "",
    cell_id: str | None = None,
    after_body: Callable[[], None] | None = None,
) -> Session | None:
    """Check the cell, retire its previous session, run the body and set up the new session.

    ``body`` is Python (IPython syntax already transformed). ``cache_source``
    registers the source with the shell (so tracebacks and
    ``inspect.getsource`` see it) and returns the filename to compile it
    under. The magic line is kept as a blank first line, so line numbers in
    the compiled code are the cell's lines as displayed. Returns None (and
    says so) when the cell defines nothing to compile.
    """
    source = "\n" + body
    filename = cache_source(source)
    code = compile(source, filename, "exec")  # SyntaxError: as Python gives it, nothing has run
    cell = plan_cell(body, options, namespace)
    key = cell_key(namespace, cell, cell_id, body, options.entries)
    previous = session_of_cell(key)
    if previous is not None:
        previous.reset()
    exec(code, namespace)
    if after_body is not None:
        after_body()
    tracked = _tracked_objects(namespace, cell, filename)
    if options.entries:
        entries = _resolve_entries(options.entries, namespace, tracked)
    else:
        entries = _default_entries(namespace, cell, tracked)
    session_tracked = dict(tracked)
    for name in options.track:
        session_tracked[name] = library.resolve(name)[1]
    tracked = session_tracked
    for name, _mode in options.initial_toggles():
        if not is_torch_name(name) and name not in tracked:
            raise NbcompileError(f"{name} is not a function nbcompile can track (a def of this cell, a method "
                                 "of an nn.Module subclass of this cell, or a name the cell binds to a function "
                                 "its own code made)")
    if not entries:
        print(f"%%compile: nothing to compile: this cell defines no function or nn.Module subclass to compile"
              f"{' (defined: ' + ', '.join(cell.names) + ')' if cell.names else ''}; give --entry NAME to compile "
              "a function or an nn.Module instance defined elsewhere")
        return None
    session = Session(namespace, source=source, filename=filename, options=options, cell=cell,
                      tracked=tracked, entries=entries, label=label, cell_key=key)
    for older in sessions():
        if older.namespace is namespace and older is not session:
            taken = [n for n in session.engine.bindings if n in older.engine.bindings]
            if taken:
                older.mark_stale(f"{', '.join(taken[:3])} {'was' if len(taken) == 1 else 'were'} taken over by "
                                  f"%%compile cell {label}".rstrip())
    session.start()
    return session
