"""The code a ``custom_op`` toggle exports: the same operator made in the user's file after the
function's ``def`` (schema, fake implementation, backward), under a library name of its own.
"""

from __future__ import annotations

import ast
import inspect as _inspect
from typing import Any

from .custom_op_backward import _op_register_autograd, _op_tensors, _op_vjp, backward_schema
from .custom_op_spec import OpSpec

#: The library name the exported code registers its operators under.
EXPORT_NAMESPACE = "notebook"


def export_namespace(spec: OpSpec) -> str:
    """The library name of an exported operator: ``notebook_<hash>``, from the operator's name and schema, so
    two cells' ``helper`` operators never replace one another in one process."""
    import hashlib

    return f"{EXPORT_NAMESPACE}_{hashlib.sha1(f'{spec.name}{spec.schema}'.encode()).hexdigest()[:8]}"


def export_code(spec: OpSpec) -> str:
    """Code that makes the same operator in the user's file, after the function's ``def``: the same
    parameters, defaults and keyword-only ones, so the function's calls run unchanged."""
    name = spec.name
    defaults = dict(spec.defaults)

    def declared(p: str) -> str:
        return f"{p}={defaults[p]}" if p in defaults else p

    positional = [p for p in spec.params if p not in spec.kwonly]
    params = ", ".join([declared(p) for p in positional] + (["*", *map(declared, spec.kwonly)] if spec.kwonly else []))
    call = ", ".join(positional + [f"{p}={p}" for p in spec.kwonly])
    args = ", ".join(spec.params)
    lines = [
        f"_{name}_eager = {name}",
        "",
        "",
        f"@torch.library.custom_op({export_namespace(spec) + '::' + name!r}, mutates_args=(), schema={spec.schema!r})",
        f"def {name}({params}):",
        f"    out = _{name}_eager({call})",
        "    # an operator returns new tensors: an output sharing an input's memory is copied",
        f"    shared = {{t.untyped_storage().data_ptr() for t in ({args},) if isinstance(t, torch.Tensor)}}",
    ]
    if spec.tuple_out:
        lines.append("    return tuple(o.clone() if o.untyped_storage().data_ptr() in shared else o for o in out)")
    else:
        lines.append("    return out.clone() if out.untyped_storage().data_ptr() in shared else out")
    lines += ["", "", f"@{name}.register_fake", f"def _({params}):"]
    if spec.fake == "itself":
        lines.append(f"    out = _{name}_eager({call})  # shapes only: it runs on fake tensors")
        lines.append("    return tuple(torch.empty_like(o) for o in out)" if spec.tuple_out
                     else "    return torch.empty_like(out)")
    else:
        outs = [f"torch.empty_like({p}, dtype={dtype})" if dtype else f"torch.empty_like({p})"
                for p, dtype in spec.like]
        lines.append(f"    return ({', '.join(outs)},)" if spec.tuple_out else f"    return {outs[0]}")
    if not spec.no_backward:
        lines += ["", ""] + _backward_code(spec, params, positional)
    return "\n".join(lines) + "\n"


def _backward_code(spec: OpSpec, params: str, positional: list[str]) -> list[str]:
    """The exported operator's backward: torch.func.vjp of the eager function, run by an operator of its
    own (the helpers are nbcompile's, as they run in the session)."""
    name = spec.name
    schema = backward_schema(spec)
    grads = schema[len("(Tensor[] "):].split(",", 1)[0].split(")", 1)[0]
    listed = f"[{', '.join(positional)}]"
    kwonly = "{" + ", ".join(f"{p!r}: {p}" for p in spec.kwonly) + "}"
    return [
        f"# {name}'s backward: torch.func.vjp of the eager function, an operator of its own (it may read values)",
        *_kit_source().splitlines(),
        "",
        "",
        f"@torch.library.custom_op({export_namespace(spec) + '::' + name + '_backward'!r}, mutates_args=(), "
        f"schema={schema!r})",
        f"def _{name}_backward({grads}, {params}):" if params else f"def _{name}_backward({grads}):",
        f"    return _op_vjp(_{name}_eager, {grads}, {listed}, {kwonly})",
        "",
        "",
        f"@_{name}_backward.register_fake",
        f"def _({grads}, {params}):" if params else f"def _({grads}):",
        f"    return [torch.empty_like(t) for t in _op_tensors({listed})]",
        "",
        "",
        f"_op_register_autograd({name}, _{name}_backward)",
    ]


def _kit_source() -> str:
    """The source of the backward's helpers, without annotations (the pasted code imports torch only)."""
    import textwrap

    texts = []
    for helper in (_op_tensors, _op_vjp, _op_register_autograd):
        tree = _Unannotate().visit(ast.parse(textwrap.dedent(_inspect.getsource(helper))))
        texts.append(ast.unparse(tree))
    return "\n\n\n".join(texts)


class _Unannotate(ast.NodeTransformer):
    """A function without its annotations: ``x: T = v`` becomes ``x = v``, ``def f(a: T) -> R`` ``def f(a)``
    (an annotation would need the names it uses)."""

    def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
        node.returns = None
        arguments = node.args
        for arg in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg):
            if arg is not None:
                arg.annotation = None
        self.generic_visit(node)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> Any:
        if node.value is None:
            return None
        return ast.copy_location(ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno), node)
