"""Why a frame recompiled, as a user would say it: ``x.shape[0]: 3 -> 5``, ``SCALE: 2.0 -> 3.0``.

Dynamo's recompile reasons name the failed guard of each cache entry (``tensor 'x' size mismatch at
index 0. expected 3, actual 5``, ``G['SCALE'] == 2.0``, ``___check_type_id(cfg, 9395...)``). Where
the text carries both values they are read from it; where it carries only the value the cached
code was compiled for, the value that failed it is read from the call's own arguments and globals,
which the trace handler sees while Dynamo logs the reasons. Values are read without running user
code (no properties, no ``__getattr__``) and kept as short strings: no user object is held.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect as _inspect
import re
import sys
from collections.abc import Callable, Container, Iterable, Mapping
from typing import Any

from ..core.text import NUMBER_READS, code_text, cut, mangled_names, plain_text
from ..model.report import Fix, FixAction, GuardChange, MarkKind
from .global_state import state_fixes

#: Most guard changes kept per recompile.
MAX_CHANGES = 8
#: Most characters of a value shown.
MAX_VALUE_CHARS = 60

MISSING = _MISSING = object()
#: The most characters of one failed guard read (torch's are a line; a longer one is a hostile log's).
MAX_GUARD_CHARS = 2000
_ENTRY = re.compile(r"^[ \t]*(?:-[ \t]*)?(?P<id>\d+/\d+):[ \t]*(?P<text>.*)$")
_TENSOR = re.compile(r"tensor '(?P<name>.+?)' (?P<what>size|stride) mismatch at index (?P<i>\d+)\. "
                     r"expected (?P<before>[^,]+), actual (?P<after>\S+)")
_TENSOR_PLAIN = re.compile(r"tensor '(?P<name>.+?)' (?P<what>rank|dtype|device) mismatch\. "
                           r"expected (?P<before>.+?), actual (?P<after>.+?)\.?$")
_REQUIRES_GRAD = re.compile(r"tensor '(?P<name>.+?)' requires_grad mismatch\. "
                            r"expected requires_grad=(?P<before>[01])")
_TYPE_ID = re.compile(r"___check_type_id\((?P<name>[^,]+), \d+\)(?:, type=<class '(?P<cls>[^']+)'>)?")
_OBJ_ID = re.compile(r"___check_obj_id\((?P<name>[^,]+), \d+\)")
_EQUALS = re.compile(r"^(?P<lhs>.+?) == (?P<rhs>.+)$")
_RANGE = re.compile(r"^(?:(?P<lo>-?\d+) <= )?(?P<expr>[^<>=]+?)(?: <= (?P<hi>-?\d+))?$")
_GLOBAL_STATE = re.compile(r"GLOBAL_STATE changed: (?P<what>.+)")
#: ``___dict_contains('key', L['d'])``: a key the compiled code found in a dict (``not ...``: did not find).
_DICT_CONTAINS = re.compile(r"^(?P<negated>not )?___dict_contains\((?P<key>'[^'\n]{0,200}'|\"[^\"\n]{0,200}\"|"
                            r"-?\d{1,30}), (?P<expr>[^\n]{1,300})\)$")
#: torch's text when a tensor argument's type changed (a plain tensor, then an ``nn.Parameter``): it names the new
#: type only (``failed_guards`` adds the one compiled for, where a compile's guards said it).
_TENSOR_TYPE_RAW = re.compile(r"expected type of '(?P<name>[^'\n]{1,300})' to be a tensor type, ' but found "
                              r"<class '(?P<cls>[\w.]{1,300})'>")
_TENSOR_TYPE = re.compile(r"^tensor '(?P<name>[^'\n]{1,300})' type mismatch\. expected (?P<before>[^,\n]{1,300}), "
                          r"actual (?P<after>[^,\n]{1,300})$")
#: What a tensor argument of unknown type was compiled for.
ANOTHER_TENSOR_TYPE = "another tensor type"
_DTYPES = {"Float": "torch.float32", "Double": "torch.float64", "Half": "torch.float16", "BFloat16": "torch.bfloat16",
           "Int": "torch.int32", "Long": "torch.int64", "Short": "torch.int16", "Char": "torch.int8",
           "Byte": "torch.uint8", "Bool": "torch.bool", "ComplexFloat": "torch.complex64",
           "ComplexDouble": "torch.complex128"}

Lookup = Callable[[str], Any]


def entry_ids(entries: Iterable[str]) -> list[str]:
    """The compile ids of the cache entries a ``recompile_reasons`` payload names (``0/1: ...``), newest first."""
    ids: list[str] = []
    for text in entries:
        for line in str(text).splitlines():
            match = _ENTRY.match(line)
            if match is not None and match["id"] not in ids:
                ids.append(match["id"])
    return ids


def failed_guards(reasons: Any) -> list[str]:
    """The failed-guard texts of a ``recompile_reasons`` payload (a string or a list, newest cache entry
    first), without the compile ids and the user stack traces Dynamo appends. A tensor argument whose type
    changed reads as torch's other tensor mismatches do, with the type compiled for where that compile's
    guards named it (``tensor_entries``)."""
    texts = [reasons] if isinstance(reasons, str) else [str(r) for r in reasons or []]
    out: list[str] = []
    for text in tensor_entries(texts):
        for line in text.splitlines():
            match = _ENTRY.match(line)
            if match is None:
                continue
            guard = match["text"].split("  #", 1)[0].strip()
            if guard and not guard.startswith(("User stack trace", "File ")):
                out.append(guard)
    return out


#: compile id -> {a tensor the frame reads, as the user names it: its class}, from each compile's guards
#: (``note_tensor_types``): what a later failed type check was compiled for (torch's text names only the new one).
_TENSOR_TYPES: dict[str, dict[str, str]] = {}
#: The most compiles (and tensors of one compile) whose types are kept.
MAX_NOTED = 256
MAX_NOTED_TENSORS = 64
_CHECK_TENSOR = re.compile(r"TENSOR_MATCH: check_tensor\(L\['(?P<name>[A-Za-z_]\w*)'\], (?P<cls>[A-Za-z_]\w*),")


def note_tensor_types(compile_id: str, tree: str) -> None:
    """Keep the types a compile's tensor arguments were guarded on (``dynamo_cpp_guards_str``); the newest
    ``MAX_NOTED`` compiles. A compile id torch gives again (after ``torch._dynamo.reset()``) replaces its types."""
    if not compile_id or "TENSOR_MATCH" not in tree:
        return
    found: dict[str, str] = {}
    for m in _CHECK_TENSOR.finditer(tree):
        found.setdefault(m["name"], m["cls"])
        if len(found) >= MAX_NOTED_TENSORS:
            break
    _TENSOR_TYPES.pop(compile_id, None)
    if found:
        _TENSOR_TYPES[compile_id] = found
    while len(_TENSOR_TYPES) > MAX_NOTED:
        del _TENSOR_TYPES[next(iter(_TENSOR_TYPES))]


def tensor_entries(texts: Iterable[str]) -> list[str]:
    """Each reason's text with a tensor type change said as torch says its other tensor mismatches:
    ``0/0: expected type of 'x' to be a tensor type, ' but found <class '...Parameter'>`` -> ``0/0: tensor 'x'
    type mismatch. expected Tensor, actual Parameter`` (the type compiled for as that compile's guards named it,
    else ``ANOTHER_TENSOR_TYPE``); any other text as it is."""
    out = []
    for text in texts:
        if "to be a tensor type" in text:
            text = "\n".join(_tensor_entry(line) for line in text.splitlines())
        out.append(text)
    return out


def _tensor_entry(line: str) -> str:
    entry = _ENTRY.match(line)
    found = _TENSOR_TYPE_RAW.search(line)
    if entry is None or found is None:
        return line
    after = found["cls"].rsplit(".", 1)[-1]
    before = _TENSOR_TYPES.get(entry["id"], {}).get(found["name"], ANOTHER_TENSOR_TYPE)
    if before == after:  # a compile id of another run (a log read since): not what this entry was compiled for
        before = ANOTHER_TENSOR_TYPE
    return f"{line[:entry.start('text')]}tensor '{found['name']}' type mismatch. expected {before}, actual {after}"


_GLOBAL = re.compile(r"\bG\['([A-Za-z_]\w*)'\]")


def global_names(guards: Iterable[str]) -> frozenset[str]:
    """The globals among failed guards' names (``G['SCALE']``), as against parameters (``L['n']``)."""
    return frozenset(m[1] for guard in guards for m in _GLOBAL.finditer(guard))


@functools.lru_cache(maxsize=8192)
def subject_of(expr: str) -> str:
    """Dynamo's source expression as the user writes it: ``G['SCALE']`` -> ``SCALE``,
    ``L['x'].size()[0]`` -> ``x.shape[0]``, ``self._modules['drop'].training`` -> ``self.drop.training``."""
    expr = mangled_names(expr.strip()) if "__" in expr else expr.strip()
    expr = re.sub(r"\bG\['([A-Za-z_]\w*)'\]", r"\1", expr)
    expr = re.sub(r"\bL\['([A-Za-z_]\w*)'\]", r"\1", expr)
    expr = re.sub(r"^kwargs\['([A-Za-z_]\w*)'\]", r"\1", expr)  # a keyword argument, as the call names it
    expr = re.sub(r"\._(?:modules|parameters|buffers)\['([A-Za-z_]\w*)'\]", r".\1", expr)
    expr = re.sub(r"\.size\(\)\[(\d+)\]", r".shape[\1]", expr)
    return expr


def change_of(guard: str, lookup: Lookup) -> GuardChange | None:
    """One failed guard as a ``GuardChange``; None for guards with no value to show. A guard longer than
    ``MAX_GUARD_CHARS`` (a hostile log's) is read cut: the patterns below stay linear in practice."""
    guard = guard[:MAX_GUARD_CHARS]
    if (m := _TENSOR.search(guard)) is not None:
        subject = f"{m['name']}.shape[{m['i']}]" if m["what"] == "size" else f"{m['name']}.stride()[{m['i']}]"
        return GuardChange(subject_of(subject), m["before"].strip(), m["after"].strip())
    if (m := _TENSOR_PLAIN.search(guard)) is not None:
        what = {"rank": "dim()", "dtype": "dtype", "device": "device"}[m["what"]]
        before, after = m["before"].strip(), m["after"].strip()
        if m["what"] == "dtype":
            before, after = _DTYPES.get(before, before), _DTYPES.get(after, after)
        return GuardChange(f"{subject_of(m['name'])}.{what}", before, after)
    if (m := _TENSOR_TYPE.search(guard)) is not None:
        return GuardChange(subject_of(m["name"]), m["before"].strip(), m["after"].strip())
    if (m := _TENSOR_TYPE_RAW.search(guard)) is not None:
        return GuardChange(subject_of(m["name"]), ANOTHER_TENSOR_TYPE, m["cls"].rsplit(".", 1)[-1])
    if (m := _DICT_CONTAINS.match(guard.strip())) is not None:
        expr = subject_of(m["expr"])
        where = f"vars({expr.removesuffix('.__dict__')})" if expr.endswith(".__dict__") else expr
        held = m["negated"] is None  # the guard held when compiled: the key was in (or, negated, was not)
        return GuardChange(f"{m['key']} in {where}", str(held), str(not held))
    if (m := _REQUIRES_GRAD.search(guard)) is not None:
        before = m["before"] == "1"
        return GuardChange(f"{subject_of(m['name'])}.requires_grad", str(before), str(not before))
    if (m := _TYPE_ID.search(guard)) is not None:
        name = subject_of(m["name"])
        before = (m["cls"] or "the type compiled for").rsplit(".", 1)[-1]
        value = evaluate(name, lookup)
        after = type(value).__name__ if value is not _MISSING else "another type"
        return GuardChange(f"type({name})", before, after)
    if (m := _OBJ_ID.search(guard)) is not None:
        name = subject_of(m["name"])
        value = evaluate(name, lookup)
        after = f"another {type(value).__name__}" if value is not _MISSING else "another object"
        return GuardChange(name, "the object compiled for", after)
    if (m := _GLOBAL_STATE.search(guard)) is not None:
        what = m["what"].strip()
        if what == "grad_mode":
            torch = sys.modules.get("torch")  # a trace log read from disk: no mode to read, and torch not loaded
            return GuardChange("torch.is_grad_enabled()", "the mode compiled for",
                               str(torch.is_grad_enabled()) if torch is not None else "changed")
        return GuardChange(what, "as compiled", "changed")
    if (m := _EQUALS.match(guard)) is not None:
        subject = subject_of(m["lhs"])
        value = evaluate(subject, lookup)
        return GuardChange(subject, cut(m["rhs"].strip(), MAX_VALUE_CHARS), _short(value))
    if (m := _RANGE.match(guard)) is not None and (m["lo"] or m["hi"]):
        subject = subject_of(m["expr"])
        bounds = " and ".join(b for b in (f">= {m['lo']}" if m["lo"] else "", f"<= {m['hi']}" if m["hi"] else "")
                              if b)
        return GuardChange(subject, bounds, _short(evaluate(subject, lookup)))
    return None


def changes(guards: Iterable[str], lookup: Lookup) -> list[GuardChange]:
    """The guard changes of a recompile from its failed guards (``failed_guards``, read once by the
    record), newest cache entry first, one per guarded expression (older entries failing on the same
    expression repeat it: ``x.shape[0]: 2 -> 9``, ``3 -> 9``, ...), at most ``MAX_CHANGES``."""
    out: list[GuardChange] = []
    seen: set[str] = set()
    for guard in guards:
        try:
            change = change_of(guard, lookup)
        except Exception:  # a reason text of a torch this code has not seen: keep the raw reason only
            change = None
        if change is None:
            continue
        if change.subject not in seen:
            seen.add(change.subject)
            out.append(change)
        if len(out) >= MAX_CHANGES:
            break
    return out


def frame_lookup(f_locals: Mapping[str, Any], f_globals: Mapping[str, Any]) -> Lookup:
    def lookup(name: str) -> Any:
        if name in f_locals:
            return f_locals[name]
        if name in f_globals:
            return f_globals[name]
        return _MISSING

    return lookup


def evaluate(expr: str, lookup: Lookup) -> Any:
    """The value of a guard's subject (``x.shape[0]``, ``self.drop.training``, ``len(xs)``, ``cfg['a']``),
    read without running user code; ``_MISSING`` when that cannot be done."""
    try:
        tree = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return _MISSING
    try:
        return _eval(tree, lookup)
    except Exception:
        return _MISSING


def _eval(node: ast.AST, lookup: Lookup) -> Any:
    import torch  # live values only: reading a trace log never loads torch

    if isinstance(node, ast.Name):
        value = lookup(node.id)
        if value is _MISSING:
            raise LookupError(node.id)
        return value
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Attribute):
        return _attribute(_eval(node.value, lookup), node.attr)
    if isinstance(node, ast.Subscript):
        base, key = _eval(node.value, lookup), _eval(node.slice, lookup)
        if isinstance(base, (list, tuple, dict, torch.Size, str)):
            return base[key]
        raise TypeError(type(base).__name__)
    if isinstance(node, ast.Call) and not node.keywords:
        if isinstance(node.func, ast.Name) and node.func.id in ("len", "type") and len(node.args) == 1:
            arg = _eval(node.args[0], lookup)
            if node.func.id == "type":
                return type(arg)
            if isinstance(arg, (list, tuple, dict, set, str, torch.Size)):
                return len(arg)
            raise TypeError(type(arg).__name__)
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("size", "stride", "dim") and not node.args:
            base = _eval(node.func.value, lookup)
            if isinstance(base, torch.Tensor):
                return getattr(base, node.func.attr)()
    raise TypeError(ast.dump(node)[:40])


_TENSOR_ATTRS = {"shape", "dtype", "device", "requires_grad", "ndim", "is_leaf", "layout"}


def _attribute(base: Any, name: str) -> Any:
    import torch  # live values only: reading a trace log never loads torch

    if isinstance(base, torch.Tensor) and name in _TENSOR_ATTRS:
        return getattr(base, name)
    if isinstance(base, torch.nn.Module):
        for table in ("_parameters", "_buffers", "_modules"):
            found = base.__dict__.get(table, {})
            if name in found:
                return found[name]
    value = _inspect.getattr_static(base, name)
    if isinstance(value, (property, staticmethod, classmethod)) or hasattr(type(value), "__get__") and \
            not isinstance(value, (int, float, str, bool, type(None))) and not callable(value):
        raise TypeError(f"{name} is a descriptor")
    return value


def _short(value: Any) -> str:
    import torch  # live values only: reading a trace log never loads torch

    if value is _MISSING:
        return "?"
    if isinstance(value, type):
        return value.__name__
    if isinstance(value, torch.Tensor):
        return f"Tensor(shape={tuple(value.shape)}, dtype={value.dtype})"
    text = repr(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 3] + "..."


def describe(changes_: Iterable[GuardChange]) -> str:
    """``x.shape[0]: 3 -> 5; SCALE: 2.0 -> 3.0``."""
    return "; ".join(f"{c.subject}: {c.before} -> {c.after}" for c in changes_)


def origin_line(source: str, function: str, subject: str) -> int | None:
    """Where the guarded name comes from in ``source``: the parameter of ``function`` it is, the
    assignment of ``self.attr`` in a class, or the module-level assignment of a global."""
    try:
        expr = ast.parse(subject, mode="eval").body
        tree = ast.parse(source)
    except SyntaxError:
        return None
    names = [n for n in ast.walk(expr) if isinstance(n, ast.Name) and n.id not in ("len", "type")]
    if not names:
        return None
    root = names[0].id
    attribute = next((n.attr for n in ast.walk(expr) if isinstance(n, ast.Attribute)
                      and isinstance(n.value, ast.Name) and n.value.id == root), None)
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == function]
    if any(isinstance(n, ast.Call) and not (isinstance(n.func, ast.Name) and n.func.id in ("len", "type"))
           for n in ast.walk(expr)):  # a value the function works out (``w.sum().item()``): the line that does
        wanted = ast.dump(expr)
        return next((node.lineno for fn in functions for node in ast.walk(fn)
                     if isinstance(node, ast.expr) and ast.dump(node) == wanted), None)
    for fn in functions:
        params = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs,
                  *([fn.args.vararg] if fn.args.vararg else []), *([fn.args.kwarg] if fn.args.kwarg else [])]
        for param in params:
            if param.arg == root and not (root == "self" and attribute):
                return param.lineno
    if root == "self" and attribute:
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr == attribute and \
                        isinstance(target.value, ast.Name) and target.value.id == "self":
                    return int(getattr(node, "lineno", 0)) or None
        return None
    for node in tree.body:  # a global: its assignment at the top level
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        if any(isinstance(t, ast.Name) and t.id == root for t in targets):
            return node.lineno
    return None


_SELF_ATTR = re.compile(r"^self\.[A-Za-z_]\w*$")


def _number(text: str, ints: bool = False) -> bool:
    """Whether a guard value as shown (``"2.0"``, ``"-3"``) is a Python int (or float)."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return False
    kinds = (int,) if ints else (int, float)
    return isinstance(value, kinds) and not isinstance(value, bool)


_SHAPE = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)\.shape\[(?P<dim>\d+)\]$")


def _dynamic_fixes(change: GuardChange, shape: re.Match[str]) -> tuple[Fix, Fix]:
    """``--dynamic`` and ``maybe_mark_dynamic(name, dim)`` for a size that keeps changing."""
    return (Fix("--dynamic", "torch.compile(dynamic=True): sizes are symbolic from the first compile",
                action=FixAction("dynamic")),
            Fix(f"torch._dynamo.maybe_mark_dynamic({shape['name']}, {shape['dim']})",
                f"before the call: {change.subject} compiled as a dynamic size (maybe_ rather than "
                "mark_dynamic: torch specialises it instead of raising where the code needs a fixed size)",
                action=_mark(shape, "maybe_mark_dynamic")))


def _mark(shape: re.Match[str], how: MarkKind) -> FixAction:
    """``torch._dynamo.<how>(name, dim)`` on the parameter ``shape`` names, before each call."""
    return FixAction("mark", mark=how, param=shape["name"], dim=int(shape["dim"]))


def _as_tensor(subject: str) -> FixAction:
    """``subject = torch.tensor(subject)``: the number a global or ``self.attr`` holds, as a 0-dim tensor."""
    return FixAction("as_tensor", subject=subject)


def _config(name: str, value: bool | int | float | str) -> FixAction:
    """``torch._dynamo.config.<name> = <value>`` around the compiles."""
    return FixAction("config", config=name, value=value)


def _global_fix(subject: str, before: str) -> Fix:
    kind = ("torch.compile specialises the Python ints it reads from globals, dynamic=True included"
            if isinstance(ast.literal_eval(before), int) else
            "a float global compiles once more and then as a dynamic float, unless dynamic=False")
    return Fix(f"{subject} = torch.tensor({subject})",
               f"wherever {subject} is assigned: a 0-dim tensor is data, not a guard, so a new value reuses the "
               f"compiled code ({kind}); a value used as a size or in an `if` must stay a Python number",
               action=_as_tensor(subject))


def _attribute_fixes(subject: str) -> list[Fix]:
    """An int attribute of a module (``self.k``): unspecialised by a config flag, or held as a tensor."""
    return [Fix("torch._dynamo.config.allow_unspec_int_on_nn_module = True",
                f"{subject} is an int attribute of the module, which torch.compile treats as static; this flag "
                "lets a new value compile once as a dynamic int (set it before the first call)",
                action=_config("allow_unspec_int_on_nn_module", True)),
            Fix(f"{subject} = torch.tensor({subject})",
                f"in __init__: {subject} held as a 0-dim tensor is data, not a guard", action=_as_tensor(subject)),
            Fix("", f"or keep {subject} constant while the model runs")]


def _float(text: str) -> bool:
    """Whether a guard value as shown (``"0.1"``) is a Python float."""
    try:
        return isinstance(ast.literal_eval(text), float)
    except (ValueError, SyntaxError):
        return False


def _read_fixes(subject: str) -> list[Fix]:
    """A number read from a tensor inside the compiled code (``w.sum().item()``): guarded, so each new value
    compiles again. ``capture_scalar_outputs`` keeps it in the graph as a symbol; a trial proves it."""
    tensor = subject.removesuffix(".item()")
    return [Fix("torch._dynamo.config.capture_scalar_outputs = True",
                f"{subject} is read as a Python number inside the compiled code, so each new value is a failed "
                "guard; with this flag the number stays in the graph as a symbol: no break at .item(), no "
                "recompile", action=_config("capture_scalar_outputs", True)),
            Fix("", f"or keep it a tensor: use {tensor} (a 0-dim tensor) in the tensor math instead of {subject}")]


def _float_fixes(subject: str) -> list[Fix]:
    """A Python float passed in (a scheduler's learning rate, a ``loss.item()``): specialised on its value."""
    return [Fix("--dynamic", f"torch.compile(dynamic=True): the Python float {subject} is a symbol from the first "
                             "compile, so a new value reuses the compiled code", action=FixAction("dynamic")),
            Fix("", f"or pass {subject} as a 0-dim tensor (torch.tensor({subject}) at the call, e.g. "
                    "torch.tensor(sched.get_last_lr()[0])): a tensor is data, not a guard; a change to your call, "
                    "not tried by nbcompile")]


_TYPE_NAME = re.compile(r"^[A-Z]\w{0,100}$")


def _tensor_kind(change: GuardChange) -> bool:
    """A tensor argument that was one kind of tensor when compiled and is another now (``x: Tensor ->
    Parameter``), as ``change_of`` reads torch's text."""
    sides = {change.before, change.after}
    return bool(sides & {"Tensor", "Parameter"}) and all(
        side == ANOTHER_TENSOR_TYPE or (_TYPE_NAME.match(side) and side not in ("True", "False", "None"))
        for side in sides)


def _tensor_kind_fix(change: GuardChange) -> Fix:
    s, before, after = change.subject, change.before, change.after
    return Fix("", f"{s} was {_a(before)} when compiled and is {_a(after)} now: Dynamo compiles each kind of "
                   f"tensor apart, once each (not once per call). To compile once, give {s} one kind at every "
                   "call: a Parameter's .detach() (the same data as a plain tensor; no gradient flows back to the "
                   "Parameter through it), or an nn.Parameter every time")


def _a(kind: str) -> str:
    return kind if kind == ANOTHER_TENSOR_TYPE else f"a{'n' if kind[:1] in 'AEIOU' else ''} {kind}"


def _value_fixes(change: GuardChange, globals_: Container[str]) -> list[Fix]:
    """Fixes for a value the compiled code was specialised on: a number read with ``.item()``, a float passed
    in, a tensor of another kind. Empty for any other change."""
    if change.subject.endswith(NUMBER_READS) and _number(change.before):
        return _read_fixes(change.subject)
    if change.subject.isidentifier() and change.subject not in globals_ and _float(change.before):
        return _float_fixes(change.subject)
    if _tensor_kind(change):
        return [_tensor_kind_fix(change)]
    return []


def limit_fixes(changes_: list[GuardChange], globals_: Container[str] = ()) -> list[Fix]:
    """What keeps a frame under ``recompile_limit``, from the guard that keeps failing."""
    fixes: list[Fix] = []
    for change in changes_[:1]:
        shape = _SHAPE.match(change.subject)
        stated = state_fixes(change)
        if stated:
            fixes.extend(stated)
        elif shape is not None:
            dynamic, mark = _dynamic_fixes(change, shape)
            fixes.extend([mark, dynamic])
        elif change.subject in globals_ and _number(change.before):
            fixes.append(_global_fix(change.subject, change.before))
        elif _SELF_ATTR.match(change.subject) and _number(change.before, ints=True):
            fixes.extend(_attribute_fixes(change.subject)[:2])
        else:
            fixes.extend(f for f in _value_fixes(change, globals_) if f.action is not None)
    fixes.append(Fix("torch._dynamo.config.recompile_limit = 16",
                     "more cache entries, where each variant is worth its own compiled code",
                     action=_config("recompile_limit", 16)))
    return fixes


def recompile_fixes(changes_: list[GuardChange], globals_: Container[str] = ()) -> list[Fix]:
    """The changes that would remove a recompile, from what changed (the newest entry's guard)."""
    fixes: list[Fix] = []
    for change in changes_[:1]:
        shape = _SHAPE.match(change.subject)
        stated = state_fixes(change)
        if stated:
            fixes.extend(stated)
        elif shape is not None:
            fixes.extend(_dynamic_fixes(change, shape))
            if change.before.startswith(">="):
                fixes.append(Fix(f"torch._dynamo.decorators.mark_unbacked({shape['name']}, {shape['dim']})",
                                 "sizes 0 and 1 are specialised; an unbacked size covers them too",
                                 action=_mark(shape, "mark_unbacked")))
                fixes.append(Fix(f"torch._dynamo.mark_static({shape['name']}, {shape['dim']})",
                                 "if this size should never vary, say so: a static size raises no dynamic guard",
                                 action=_mark(shape, "mark_static")))
        elif change.subject in globals_ and _number(change.before):
            fixes.append(_global_fix(change.subject, change.before))
        elif change.subject in globals_:
            fixes.append(Fix("", f"the global {change.subject} is read by the compiled code and guarded: every new "
                                 "value compiles again; pass it as an argument, or keep it constant"))
        elif _SELF_ATTR.match(change.subject) and _number(change.before, ints=True):
            fixes.extend(_attribute_fixes(change.subject))
        elif value_fixes := _value_fixes(change, globals_):
            fixes.extend(value_fixes)
        elif change.subject.endswith(".training"):
            fixes.append(Fix("", "train and eval are compiled apart: expect one recompile per mode, not more"))
    return fixes



# --- torch's internal names, as the user wrote them ----------------------------------------------------

_LOCATION = re.compile(r":\d+ in \S+\s*$")
#: The count ``parse_recompile_reasons`` appends, matched only from the last ``(and `` (the whitespace before it
#: is found with ``rstrip``: a regex starting with ``\s*`` and searched tried every start in a run of spaces).
_MORE = re.compile(r"\(and \d+ earlier cache entr(?:y|ies) failed too\)")
#: `` in fn`` after torch's ``file:line``: the whitespace run before it is found from its last character, so a
#: search is linear where ``\s+in \S`` retried the whole run from each of its spaces.
_IN_FUNCTION = re.compile(r"\sin \S")


def _split_more(summary: str) -> tuple[str, str]:
    """``summary`` without the trailing ``(and N earlier cache entries failed too)`` and the whitespace before
    it, and that tail ("" when there is none); linear in the summary's length."""
    end = len(summary) - 1 if summary.endswith("\n") else len(summary)  # as ``$`` matches before a last newline
    if not summary.endswith("failed too)", 0, end):
        return summary, ""
    at = summary.rfind("(and ", 0, end)
    if at < 0 or _MORE.fullmatch(summary, at, end) is None:
        return summary, ""
    start = len(summary[:at].rstrip())
    return summary[:start], summary[start:end]


def _without_function(where: str) -> str:
    """``file.py:12 in fn`` -> ``file.py:12`` (one line): cut at the whitespace run before the first
    `` in <name>``."""
    found = _IN_FUNCTION.search(where)
    return where if found is None else where[:found.start()].rstrip()


def stack_expressions(source: str, lineno: int) -> dict[str, str]:
    """``___stack0`` -> the expression on line ``lineno`` of ``source`` whose value a resume function
    receives as that stack slot (``z = step * 2 + helper(y)`` broken at ``helper(y)``: ``___stack0`` is
    ``step * 2``). Python leaves on the stack, at a call, the operands evaluated before it; a slot is
    named only when every call of the statement agrees on it (else it is left out: never a guess).

    Worked out once per source text and line: every resume frame of a library file asks again (one fix
    search on a two-layer BERT parsed ``modeling_bert.py`` 58 times, 1.8 s of its 54 s)."""
    key = (hashlib.blake2b(source.encode(errors="surrogatepass"), digest_size=16).digest(), lineno)
    found = _STACKS.get(key)
    if found is None:
        found = _STACKS[key] = _stack_expressions(source, lineno)
        while len(_STACKS) > 512:
            del _STACKS[next(iter(_STACKS))]
    return dict(found)


#: (the source's digest, line) -> its stack slots' names, oldest first.
_STACKS: dict[tuple[bytes, int], tuple[tuple[str, str], ...]] = {}


def _stack_expressions(source: str, lineno: int) -> tuple[tuple[str, str], ...]:
    tree = _parsed(source)
    if tree is None:
        return ()
    statements = [n for n in ast.walk(tree) if isinstance(n, ast.stmt)
                  and n.lineno <= lineno <= (n.end_lineno or n.lineno)]
    if not statements:
        return ()
    stmt = min(statements, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
    stacks: list[list[ast.expr]] = []
    # Dynamo breaks at a value read (``w.sum().item()``), not at the tensor calls of what it reads (``w.sum()``,
    # traced into the graph before it): those calls' stacks are not where a resume function starts.
    read = [n for n in ast.walk(stmt) if isinstance(n, ast.Call) and not n.args and not n.keywords
            and isinstance(n.func, ast.Attribute) and f".{n.func.attr}()" in NUMBER_READS]
    inside_reads = {id(c) for r in read if isinstance(r.func, ast.Attribute)
                    for c in ast.walk(r.func.value) if isinstance(c, ast.Call)}

    def walk(node: ast.expr, pending: list[ast.expr]) -> None:
        if isinstance(node, ast.Call):
            walk(node.func, pending)
            before: list[ast.expr] = [node.func]
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                walk(arg, pending + before)
                before.append(arg)
            if id(node) not in inside_reads:
                stacks.append([*pending, node])
        elif isinstance(node, ast.BinOp):
            walk(node.left, pending)
            walk(node.right, [*pending, node.left])
        elif isinstance(node, ast.Compare):
            walk(node.left, pending)
            for other in node.comparators:
                walk(other, [*pending, node.left])
        elif isinstance(node, ast.Subscript):
            walk(node.value, pending)
            walk(node.slice, [*pending, node.value])
        elif isinstance(node, (ast.Tuple, ast.List)):
            done: list[ast.expr] = []
            for elt in node.elts:
                walk(elt, pending + done)
                done.append(elt)
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    walk(child, pending)

    if isinstance(stmt, ast.AugAssign):
        walk(stmt.value, [stmt.target])
    elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Expr, ast.Return)):
        if stmt.value is not None:
            walk(stmt.value, [])
    else:
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.expr):
                walk(child, [])
    names: dict[str, str] = {}
    for i in range(max((len(s) for s in stacks), default=0)):
        found = {ast.unparse(s[i]) for s in stacks if len(s) > i}
        if len(found) == 1:
            names[f"___stack{i}"] = found.pop()
    return tuple(names.items())


def _parsed(source: str) -> ast.Module | None:
    """One parse per source text while lines of it are asked in turn (read only, never changed)."""
    global _LAST_PARSE
    if _LAST_PARSE is not None and _LAST_PARSE[0] == source:
        return _LAST_PARSE[1]
    try:
        tree: ast.Module | None = ast.parse(source)
    except SyntaxError:
        tree = None
    _LAST_PARSE = (source, tree)
    return tree


_LAST_PARSE: tuple[str, ast.Module | None] | None = None


def plain_subject(subject: str, stack: Mapping[str, str], where: str) -> str:
    """A guard change's subject with a stack slot named: the expression, else "a value on ``where``"."""
    if "___stack" not in subject:
        return subject
    out: list[str] = []
    at = 0
    for match in _SLOT.finditer(subject):
        said = stack.get(match[0])
        follows = subject[match.end():match.end() + 1]
        if said is None or (said.endswith(NUMBER_READS) and follows in (".", "[")):  # ``loss.item()``: a number
            return f"a value on {where}" if where else "a value on the stack"
        if follows in (".", "[") and not _PRIMARY.fullmatch(said):
            said = f"({said})"  # ``(step * 2).shape[0]``
        out.append(subject[at:match.start()] + said)
        at = match.end()
    return "".join(out) + subject[at:]


_SLOT = re.compile(r"___stack\d+\b")
#: An expression an attribute or an index reads without brackets around it (``w.sum()``, ``xs[0]``).
_PRIMARY = re.compile(r"\w+(?:\.\w+|\([^()]*\)|\[[^\[\]]*\])*")


#: torch's reason when a cache entry's guarded object was freed (``Cache line invalidated because opt got
#: deallocated``): the entry was for an object that no longer exists.
_DEALLOCATED = re.compile(r"Cache line invalidated because (?P<name>[^\n]{1,200}?) got deallocated$")


def stated_reason(stated: list[GuardChange], summary: str) -> str:
    """A recompile's reason from the global state's changes (``torch function mode: none -> MyMode``), with
    the count of earlier entries that failed too, as torch's summary gives it."""
    _, more = _split_more(summary)
    text = "; ".join(f"{c.subject}: {c.before} -> {c.after}" for c in stated)
    return f"{text} {more.strip()}" if more.strip() else text


def plain_reason(summary: str, stack: Mapping[str, str]) -> str:
    """A recompile reason as the user reads it: the failed guard with the names they wrote, where it
    was installed (``cell line 9: z = ...``) and how many earlier entries failed, without torch's
    internal names (``G['SCALE']``, ``___stack0``, resume functions, the cell's temporary file)."""
    body, more = _split_more(summary)
    first, *_ = body.splitlines() or [""]
    gone = _DEALLOCATED.match(first.strip())
    if gone is not None:
        name = plain_text(gone["name"], stack)
        return (f"{name} of the previous compile is gone (the compile was guarded on that object): compiled again "
                f"for the {name} of this call. nbcompile's toggles re-run --run on copies of your objects, so the "
                "first call after a toggle does this once; so does a new model or optimizer"
                + more)
    other = _OBJ_ID.match(first.strip())
    if other is not None and other["name"].strip().endswith(".__code__"):  # a function defined again
        name = plain_text(other["name"].strip().removesuffix(".__code__"), stack)
        return (f"{name} was defined again since the previous compile (its code is another object): compiled "
                f"again for the new {name}" + more)
    if other is not None:  # the same name holds another object than the one compiled for
        name = plain_text(other["name"].strip(), stack)
        return (f"{name} is another object than the one the previous compile was guarded on: compiled again for "
                f"the {name} of this call. nbcompile's toggles re-run --run on copies of your objects (kept from "
                "toggle to toggle), so your first call after a toggle does this once; so does a new model or "
                "optimizer" + more)
    typed = _TENSOR_TYPE.match(first.strip()) or _TENSOR_TYPE_RAW.search(first)
    if typed is not None:
        name = plain_text(subject_of(typed["name"]), stack)
        before = typed["before"] if "before" in typed.groupdict() else ANOTHER_TENSOR_TYPE
        after = typed["after"] if "after" in typed.groupdict() else typed["cls"].rsplit(".", 1)[-1]
        return (f"{name} is {_a(after)}, compiled for {_a(before)}: Dynamo compiles each kind of tensor apart (a "
                "plain tensor and an nn.Parameter too)" + more)
    guard, *comments = first.split("  #")
    guard = plain_text(guard.strip(), stack)
    where = ""
    if comments and _LOCATION.search(comments[-1]):  # torch's "# <source line>  # <file>:<line> in <fn>"
        # the function named after the location is the recompile's own
        where = _without_function(plain_text(comments.pop().strip(), stack))
    code = "  #".join(comments).strip().removeprefix("#").strip()
    said = guard
    if where or code:
        said += f" ({where}{': ' if where and code else ''}{code_text(code, 80) if code else ''})"
    return cut(said, 400) + more
