"""Compile options shared by `%%compile`, sessions and ``nbcompile.inspect``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import NbcompileError
from .lazy import lazy_module

if TYPE_CHECKING:
    from . import dynconfig, torch_compat
else:  # loaded at their first use: `%load_ext nbcompile` and reading logs load no Dynamo
    dynconfig = lazy_module("nbcompile.core.dynconfig", globals(), "dynconfig")
    torch_compat = lazy_module("nbcompile.core.torch_compat", globals(), "torch_compat")

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: The styles an exported snippet is written in (``engine.snippet``).
STYLES = ("calls", "decorators")


@dataclass
class CompileOptions:
    backend: str = "inductor"
    mode: str | None = None
    fullgraph: bool = False
    dynamic: bool | None = None
    #: ``torch._dynamo.config`` values set around this session's compiles and calls only (``dynconfig``).
    dynamo_config: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> CompileOptions:
        valid = torch_compat.list_backends()
        if not isinstance(self.backend, str) or self.backend not in valid:
            raise NbcompileError(
                f"unknown backend {self.backend!r}; valid backends: {', '.join(valid)}"
            )
        if self.mode is not None and self.mode not in MODES:
            raise NbcompileError(f"unknown mode {self.mode!r}; valid modes: {', '.join(MODES)}")
        if not isinstance(self.fullgraph, bool):
            raise NbcompileError(f"fullgraph must be True or False, not {self.fullgraph!r}")
        if self.dynamic not in (None, True, False) or not isinstance(self.dynamic, (bool, type(None))):
            raise NbcompileError(f"dynamic must be None (automatic), True or False, not {self.dynamic!r}")
        self.dynamo_config = dynconfig.check_all(self.dynamo_config)
        return self

    def torch_compile_kwargs(self) -> dict[str, Any]:
        return {"fullgraph": self.fullgraph, "dynamic": self.dynamic}


@dataclass
class CellOptions(CompileOptions):
    """Everything a `%%compile` line can say."""

    entries: list[str] = field(default_factory=list)
    #: Library functions to track (module:function, module:Class.method).
    track: list[str] = field(default_factory=list)
    disable: list[str] = field(default_factory=list)
    allow: list[str] = field(default_factory=list)
    disallow: list[str] = field(default_factory=list)
    run: str | None = None
    bench: bool = False
    check: bool = True
    panel: bool = True

    def initial_toggles(self) -> list[tuple[str, str]]:
        return (
            [(n, "disable") for n in self.disable]
            + [(n, "allow_in_graph") for n in self.allow]
            + [(n, "disallow_in_graph") for n in self.disallow]
        )

    def compile_options(self) -> CompileOptions:
        return CompileOptions(self.backend, self.mode, self.fullgraph, self.dynamic, dict(self.dynamo_config))
