"""Small text helpers every view shares: plural words, function labels, torch's internal names as the
user wrote them, code quoted without its comment, escaped HTML tables (a leaf)."""

from __future__ import annotations

import html
import io
import re
import sys
import tokenize
from collections.abc import Iterable, Mapping
from typing import Any

_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<fn>.+)_at_(?P<line>\d+)$")
_RESUME_ANY = re.compile(r"\btorch_dynamo_resume_in_(?P<fn>\w+?)_at_(?P<line>\d+)\b")
#: A notebook cell's file: IPython's ``<ipython-input-N-hash>``, ipykernel's ``/tmp/ipykernel_123/456.py``.
#: A path starts at a token's start (after a space, a quote or a bracket), so a long run of slashes is
#: scanned once, not once per character.
_CELL_FILE = r"(?:<ipython-input-\d+-[0-9a-f]+>|(?<![^\s\"'(\[])[^\s\"'<>]*[/\\]ipykernel_\d+[/\\]-?\d+\.py)"
_CELL_FRAME = re.compile(rf'File "{_CELL_FILE}", line (?P<line>\d+)')
_CELL_AT = re.compile(rf"{_CELL_FILE}:(?P<line>\d+)")
_CELL_NAME = re.compile(_CELL_FILE)
_SOURCE = re.compile(r"\b(?P<scope>[GL])\['(?P<name>[A-Za-z_]\w*)'\]")
_STACK = re.compile(r"\b(?:L\['|)(?P<name>___stack\d+)(?:'\]|)")
#: Where a text is cut, this ends it: a cut text never looks whole.
ELLIPSIS = "…"
#: The most characters of one torch text ``plain_text`` reads (a reason, a hint, an error message).
MAX_PLAIN_CHARS = 20_000


def function_label(name: str) -> str:
    """``torch_dynamo_resume_in_f_at_5`` -> ``f (after line 5)``: the part of ``f`` Dynamo compiled
    after the graph break at line 5."""
    m = _RESUME.match(name)
    return f"{m.group('fn')} (after line {m.group('line')})" if m else name


def user_function(name: str) -> str:
    """The user's function a frame belongs to: ``torch_dynamo_resume_in_f_at_5`` -> ``f``."""
    m = _RESUME.match(name)
    return m.group("fn") if m else name


def plain_text(text: str, stack: Mapping[str, str] | None = None) -> str:
    """torch's text with its internal names as the user wrote them: ``G['SCALE']`` -> ``SCALE``,
    ``L['x']`` -> ``x``, ``___stack0`` -> the expression ``stack`` gives for it (else "a value on the
    stack"), ``torch_dynamo_resume_in_f_at_5`` -> ``f (after line 5)``, a cell's temporary file and
    line -> ``cell line 5``. A text over ``MAX_PLAIN_CHARS`` (a hostile log's) is cut first, with an
    ellipsis: what a view shows is bounded, and so is the time spent rewriting it."""
    text = cut(text, MAX_PLAIN_CHARS)
    if "ipykernel_" in text or "<ipython-input-" in text:
        text = _CELL_FRAME.sub(lambda m: f"cell line {m['line']}", text)
        text = _CELL_AT.sub(lambda m: f"cell line {m['line']}", text)
        text = _CELL_NAME.sub("the cell", text)
    text = _RESUME_ANY.sub(lambda m: f"{m['fn']} (after line {m['line']})", text)
    text = _STACK.sub(lambda m: _slot_name(m, stack or {}), text)
    if _MANGLED_HINT.search(text):  # Dynamo's aliases of builtins and modules, before their ``G[...]`` goes
        text = mangled_names(text)
    text = _SOURCE.sub(lambda m: m["name"], text)
    return guard_helpers_text(text) if _HELPER_HINT.search(text) else text


def _slot_name(m: re.Match[str], stack: Mapping[str, str]) -> str:
    """A stack slot's expression; one that reads a number (``loss.item()``) only where the slot stands as that
    number (``___stack0 == 2.0``), never where an attribute or index of it is read (a tensor's)."""
    said = stack.get(m["name"])
    if said is None or (said.endswith(NUMBER_READS) and m.string[m.end():m.end() + 1] in (".", "[")):
        return "a value on the stack"
    return said


#: Calls that read a tensor's value as a Python number: a stack slot named by one holds that number.
NUMBER_READS = (".item()",)

# --- torch's guard helpers and mangled globals, as what they check -------------------------------------------

#: ``G['__builtins_dict___3']['len']`` (Dynamo's alias of the builtins), ``G['__import_torch_dot_nn']`` (of an
#: imported module), ``G['___module_math_1401_c3']`` (of a module by id): the names a user wrote.
_BUILTINS_ITEM = re.compile(r"(?:\bG\['|\b)__builtins_dict___\d+(?:'\])?\['(?P<name>[A-Za-z_]\w*)'\]")
_BUILTINS = re.compile(r"(?:\bG\['|\b)__builtins_dict___\d+(?:'\])?")
_IMPORTED = re.compile(r"(?:\bG\['|\b)__import_(?P<module>[A-Za-z_]\w*)(?:'\])?")
_MODULE_BY_ID = re.compile(r"(?:\bG\['|\b)___module_(?P<name>[A-Za-z_]\w*?)_\d+_c\d+(?:'\])?")
_UNNAMED_SCOPE = re.compile(r"(?:\bG\['|\b)___unnamed_scope_\d+_c\d+(?:'\])?")
#: Where one of them may be (a cheap look first).
_MANGLED_HINT = re.compile(r"__builtins_dict___|__import_|___module_|___unnamed_scope_")


def mangled_names(text: str) -> str:
    """``G['__builtins_dict___3']['len']`` -> ``len``, ``G['__import_torch_dot_nn']`` -> ``torch.nn``: Dynamo's
    aliases of what the user's code reads, as they wrote it."""
    text = _BUILTINS_ITEM.sub(lambda m: m["name"], text)
    text = _BUILTINS.sub("builtins", text)
    text = _IMPORTED.sub(lambda m: m["module"].replace("_dot_", "."), text)
    text = _MODULE_BY_ID.sub(lambda m: m["name"], text)
    return _UNNAMED_SCOPE.sub("globals()", text)


#: Where a guard helper or a structure of Dynamo's may be in a text (a cheap look before the rewriting).
_HELPER_HINT = re.compile(r"___|check_tensor\(|_dynamo_\w{0,20}_indices|\._(?:modules|parameters|buffers)\[|"
                          r"dict\(type\(|__builtins_dict|__import_|__math_isnan|__numpy_isnan")
_SUBMODULE = re.compile(r"\._(?:modules|parameters|buffers)\['(?P<name>[A-Za-z_]\w*)'\]")
_CLASS_ATTR = re.compile(r"\bdict\(type\((?P<expr>[^()\n]{1,300}(?:\([^()\n]{0,300}\))?)\)\.__dict__\)"
                         r"\['(?P<name>[A-Za-z_]\w*)'\]")
_TYPE_SUFFIX = re.compile(r", type=<class '(?P<cls>[\w.]{1,300})'>")
#: ``hasattr(x, '_dynamo_dynamic_indices') == False``: the dimension marks a tensor does not carry.
_MARKS = {"dynamic": "mark_dynamic", "weak_dynamic": "maybe_mark_dynamic", "unbacked": "mark_unbacked",
          "strict_unbacked": "mark_unbacked(strict=True)", "static": "mark_static"}
_MARK_GUARD = re.compile(r"hasattr\((?P<expr>[^()\n]{1,300}(?:\([^()\n]{0,300}\))?[^()\n]{0,300}), "
                         r"'_dynamo_(?P<mark>\w{1,20}?)_indices'\) == (?P<has>True|False)")
#: What the rest of torch's guard helpers do, once their arguments are read (``_helper_call``).
_HELPERS = ("___dict_contains", "___check_obj_id", "___check_type_id", "check_tensor", "___tuple_iterator_len",
            "___tuple_iterator_getitem", "___odict_getitem", "___key_to_id", "___dict_version", "__math_isnan",
            "__numpy_isnan", "___check_global_state", "___check_torch_function_mode_stack")
_HELPER_CALL = re.compile(r"(?<![\w.])(?P<negated>not )?(?P<name>" + "|".join(_HELPERS) + r")\(")
#: A leftover helper's underscores (one torch adds later): ``___check_metadata_x(...)`` -> ``check_metadata_x(...)``.
_LEFTOVER = re.compile(r"(?<![\w.])___(?=[a-z]\w{0,100}\()")


def guard_helpers_text(text: str) -> str:
    """A guard (a failed one, a line of the Guards tab) with torch's helpers said as what they check, the
    names already as the user wrote them: ``___dict_contains('k', d)`` -> ``'k' in d``,
    ``not ___dict_contains('k', obj.__dict__)`` -> ``'k' not in vars(obj)``, ``___check_obj_id(F, 1401)``
    -> ``F is the same object``, ``___check_type_id(d, 9), type=<class 'dict'>`` -> ``type(d) is dict``,
    ``check_tensor(x, Tensor, DispatchKeySet(..), torch.float32, device=None, requires_grad=False, size=[4],
    stride=[1])`` -> ``x is a Tensor of torch.float32, size [4], stride [1], requires_grad=False``,
    ``hasattr(x, '_dynamo_dynamic_indices') == False`` -> ``x is not marked with
    torch._dynamo.mark_dynamic``, ``net._modules['lin']._parameters['bias']`` -> ``net.lin.bias``."""
    return _helpers_text(text, 0)


def _helpers_text(text: str, depth: int) -> str:
    text = _SUBMODULE.sub(lambda m: f".{m['name']}", text)
    if "dict(type(" in text:
        text = _CLASS_ATTR.sub(lambda m: f"type({m['expr']}).{m['name']}", text)
    if "_indices'" in text:
        text = _MARK_GUARD.sub(lambda m: f"{m['expr']} is {'' if m['has'] == 'True' else 'not '}marked with "
                                         f"torch._dynamo.{_MARKS.get(m['mark'], m['mark'])}", text)
    out: list[str] = []
    at = 0
    for count, m in enumerate(_HELPER_CALL.finditer(text)):
        if count >= _MAX_HELPER_CALLS:
            break  # a hostile text's: what is left stays as torch wrote it
        if m.start() < at:
            continue  # inside a call already said
        args, end = _call_args(text, m.end())
        if args is None:
            continue
        if depth < _MAX_NESTING:  # a helper in a helper's arguments (a hostile text's nesting is left as it is)
            args = [_helpers_text(a, depth + 1) if _HELPER_HINT.search(a) else a for a in args]
        # torch names the type an id check is for after the call: ``___check_type_id(d, 9), type=<class 'dict'>``
        suffix = _TYPE_SUFFIX.match(text, end) if m["name"] in ("___check_obj_id", "___check_type_id") else None
        said = _helper_call(m["name"], args, bool(m["negated"]), suffix["cls"].rsplit(".", 1)[-1] if suffix else "")
        if said is None:
            continue
        end = suffix.end() if suffix is not None else end
        out.append(text[at:m.start()] + said)
        at = end
    text = "".join(out) + text[at:]
    return _LEFTOVER.sub("", text) if "___" in text else text


def _helper_call(name: str, args: list[str], negated: bool, cls: str = "") -> str | None:
    """One helper call as what it checks (``args`` as written in the guard, ``cls`` the type an id check
    names after it); None to leave it as it is."""
    if name == "___dict_contains" and len(args) == 2:
        where = f"vars({args[1].removesuffix('.__dict__')})" if args[1].endswith(".__dict__") else args[1]
        return f"{args[0]} {'not in' if negated else 'in'} {where}"
    said: str | None = None
    if name == "___check_obj_id" and len(args) == 2:
        said = f"{args[0]} is the same object" + (f" (a {cls})" if cls and not args[0].endswith("__code__") else "")
    elif name == "___check_type_id" and len(args) == 2:
        said = f"type({args[0]}) is {cls or 'the same type'}"
    elif name == "check_tensor" and len(args) >= 2:
        said = _tensor_check(args)
    elif name == "___tuple_iterator_len" and len(args) == 1:
        said = f"len({args[0]})"
    elif name == "___tuple_iterator_getitem" and len(args) == 2:
        said = f"list({args[0]})[{args[1]}]"
    elif name == "___odict_getitem" and len(args) == 2:
        said = f"{args[0]}[{args[1]}]"
    elif name == "___key_to_id" and len(args) == 1:
        said = f"list({args[0]}.keys())"
    elif name == "___dict_version" and len(args) == 1:
        said = f"the version of dict {args[0]}"
    elif name in ("__math_isnan", "__numpy_isnan") and len(args) == 1:
        said = f"{'math' if name == '__math_isnan' else 'numpy'}.isnan({args[0]})"
    elif name == "___check_global_state" and not args:
        said = "torch's global state (grad mode, default dtype, ...) is as compiled"
    elif name == "___check_torch_function_mode_stack" and not args:
        said = "the torch function modes are as compiled"
    if said is None:
        return None
    return f"not {said}" if negated else said


def _tensor_check(args: list[str]) -> str:
    """``check_tensor(x, Tensor, DispatchKeySet(...), torch.float32, device=None, requires_grad=False, size=[4],
    stride=[1])`` -> ``x is a Tensor of torch.float32, size [4], stride [1], requires_grad=False``."""
    named = dict(a.split("=", 1) for a in args[2:] if "=" in a and a.split("=", 1)[0].isidentifier())
    plain = [a for a in args[2:] if a not in (f"{k}={v}" for k, v in named.items()) and not a.startswith("DispatchKey")]
    parts = [f"{args[0]} is a {args[1]}" + (f" of {plain[0]}" if plain else "")]
    parts += [f"{key} {named[key]}" for key in ("size", "stride") if key in named]
    if named.get("device", "None") != "None":
        parts.append(f"on device {named['device']}")
    if "requires_grad" in named:
        parts.append(f"requires_grad={named['requires_grad']}")
    return ", ".join(parts)


#: The most characters of one helper call's arguments read (a guard's are a line), and the most calls said in
#: one text: a hostile one's rewriting stays bounded.
_MAX_ARGS = 2000
_MAX_HELPER_CALLS = 100
_MAX_NESTING = 8


def _call_args(text: str, start: int) -> tuple[list[str] | None, int]:
    """The arguments of the call whose ``(`` ends at ``start``, split at its top-level commas (brackets and
    quotes respected), and the index after its ``)``; (None, start) when it does not close in reach."""
    args: list[str] = []
    depth, quote, begin, escaped = 0, "", start, False
    for i in range(start, min(len(text), start + _MAX_ARGS)):
        ch = text[i]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                if ch != ")":
                    return None, start
                last = text[begin:i].strip()
                return ([*args, last] if last or args else args), i + 1
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(text[begin:i].strip())
            begin = i + 1
    return None, start


_INSTALLED = re.compile(r"^.*[/\\](?:site|dist)-packages[/\\]")


def short_path(filename: str) -> str:
    """A file as a user names it: an installed package's file from the package down
    (``torch/optim/optimizer.py``), never the virtual environment's absolute path."""
    return _INSTALLED.sub("", filename)


def cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters; a cut one ends with an ellipsis."""
    return text if len(text) <= limit else text[: max(0, limit - 1)].rstrip() + ELLIPSIS


def code_text(source_line: str, limit: int = 60) -> str:
    """A source line as a fix quotes it: its code without the trailing comment, cut with an ellipsis."""
    code = source_line.strip()
    comment = None
    try:  # one line of a longer statement ends in an open bracket: the tokens before the error still count
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type == tokenize.COMMENT:
                comment = token.start[1]
                break
    except (tokenize.TokenError, SyntaxError):
        pass
    if comment is not None:
        code = code[:comment].rstrip()
    return cut(code, limit)


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 break``, ``2 breaks`` (``many``: the plural where it is not the word with an s: "remedies")."""
    if n == 1:
        return f"{n} {word}"
    if many is not None:
        return f"{n} {many}"
    return f"{n} {word}es" if word.endswith(("sh", "ch")) else f"{n} {word}s"


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


_CELL_STYLE = "text-align:left;vertical-align:top"


def _table(headers: Iterable[str], rows: Iterable[Iterable[Any]], raw_cols: tuple[int, ...] = ()) -> str:
    # Left-aligned and top-aligned inline: notebook HTML exports right-align table cells, which
    # makes a column of reasons unreadable.
    head = "".join(f"<th style='{_CELL_STYLE}'>{_e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(
            f"<td style='{_CELL_STYLE}'>{cell if i in raw_cols else _e(cell)}</td>" for i, cell in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table class='nbcompile-table'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def callable_name(fn: Any) -> str:
    """``print``, ``warnings.warn``, ``logging.Logger.info``: how code names ``fn`` (a notebook's own function
    by its name in the notebook)."""
    module = getattr(fn, "__module__", None) or ""
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
    if module.startswith("_") and getattr(sys.modules.get(module[1:]), str(qualname), None) is fn:
        module = module[1:]  # warnings.warn is _warnings.warn
    return str(qualname) if module in ("builtins", "", "__main__") else f"{module}.{qualname}"


def config_value_text(value: Any) -> str:
    """A ``torch._dynamo.config`` value as code: ``True``, ``{print, warnings.warn}``."""
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(callable_name(v) for v in value)) + "}"
    return repr(value)
