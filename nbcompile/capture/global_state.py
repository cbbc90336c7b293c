"""The global state a compiled frame is guarded on, recorded at each compile, so a recompile whose reason is
internal (``GLOBAL_STATE changed: grad_mode``, ``___check_torch_function_mode_stack()``) or empty still says
what changed: ``torch.is_grad_enabled(): True -> False``, ``torch function mode: none -> MyMode``.

Dynamo checks this state before any guard of a cache entry (``GlobalStateGuard``: grad mode, autocast, the
default dtype, deterministic algorithms, ...) and the torch function mode stack as a guard of its own; its
reason names the part that failed, never its values. The values are read here, where the compile and the
call that failed are: at ``dynamo_start`` (the compile runs inside the call that needs it) and while Dynamo
logs why it recompiles.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..model.report import Fix, GuardChange

#: Subjects, as a user would call them.
GRAD = "torch.is_grad_enabled()"
DEFAULT_DTYPE = "torch.get_default_dtype()"
DEFAULT_DEVICE = "torch.get_default_device()"
#: The function mode ``torch.set_default_device`` pushes: said as the default device, not as a mode.
_DEVICE_MODE = "DeviceContext"
DETERMINISTIC = "torch.are_deterministic_algorithms_enabled()"
FUNCTION_MODE = "torch function mode"
DISPATCH_MODE = "torch dispatch mode"

#: The parts of a failed guard that name this state, not a value of the user's.
_INTERNAL = re.compile(r"GLOBAL_STATE changed|___check_torch_function_mode_stack|___check_global_state"
                       r"|TorchFunctionMode|torch_function_mode_stack")


def autocast_subject(device: str) -> str:
    return f"torch.is_autocast_enabled({device!r})"


@dataclass(frozen=True)
class GlobalState:
    """What Dynamo's global-state guard and mode-stack guard check, as short strings and flags."""

    grad: bool
    autocast: tuple[tuple[str, bool, str], ...]
    default_dtype: str
    deterministic: bool
    function_modes: tuple[str, ...] | None
    dispatch_modes: tuple[str, ...] | None
    default_device: str = ""

    @classmethod
    def now(cls) -> GlobalState:
        import torch  # a live state: reading a trace log never loads torch

        from ..core import torch_compat

        stacks = torch_compat.mode_stacks()
        return cls(
            grad=torch.is_grad_enabled(),
            autocast=torch_compat.autocast_states(),
            default_dtype=str(torch.get_default_dtype()),
            deterministic=torch.are_deterministic_algorithms_enabled(),
            function_modes=tuple(m for m in stacks[0] if m != _DEVICE_MODE) if stacks is not None else None,
            dispatch_modes=stacks[1] if stacks is not None else None,
            default_device=str(torch.get_default_device()) if hasattr(torch, "get_default_device") else "",
        )

    def changes(self, after: GlobalState) -> list[GuardChange]:
        """What differs from this state (a compile's) to ``after`` (the call that failed its guards)."""
        out: list[GuardChange] = []
        if self.grad != after.grad:
            out.append(GuardChange(GRAD, str(self.grad), str(after.grad)))
        before_autocast = {device: (on, dtype) for device, on, dtype in self.autocast}
        for device, on, dtype in after.autocast:
            was = before_autocast.get(device)
            if was is None:
                continue
            if was[0] != on:
                out.append(GuardChange(autocast_subject(device), str(was[0]), str(on)))
            elif on and was[1] != dtype:
                out.append(GuardChange(f"torch.get_autocast_dtype({device!r})", was[1], dtype))
        if self.default_dtype != after.default_dtype:
            out.append(GuardChange(DEFAULT_DTYPE, self.default_dtype, after.default_dtype))
        if self.default_device != after.default_device and self.default_device and after.default_device:
            out.append(GuardChange(DEFAULT_DEVICE, self.default_device, after.default_device))
        if self.deterministic != after.deterministic:
            out.append(GuardChange(DETERMINISTIC, str(self.deterministic), str(after.deterministic)))
        for subject, stacks in ((FUNCTION_MODE, (self.function_modes, after.function_modes)),
                                (DISPATCH_MODE, (self.dispatch_modes, after.dispatch_modes))):
            was_modes, now_modes = stacks
            if was_modes is not None and now_modes is not None and was_modes != now_modes:
                out.append(GuardChange(subject, _modes(was_modes), _modes(now_modes)))
        return out


def _modes(stack: tuple[str, ...]) -> str:
    return " > ".join(stack) if stack else "none"


def is_internal(guard: str) -> bool:
    """Whether a failed guard names the global state or the mode stacks (not a value of the user's)."""
    return bool(_INTERNAL.search(guard))


def state_fixes(change: GuardChange) -> list[Fix]:
    """What removes a recompile that a change of the global state made."""
    stance = ("torch.compiler.set_stance('eager_on_recompile')", "or run the other state eagerly instead of "
              "compiling it again (set around the calls, or %nbcompile stance eager_on_recompile)")
    if change.subject == GRAD:
        return [Fix("", f"the code was compiled with grad mode {change.before} and called with {change.after}: "
                        "each grad mode compiles its own code; call it under the mode it was compiled for "
                        "(torch.no_grad() around both calls, or neither), or expect one recompile per mode"),
                Fix(stance[0], stance[1])]
    if change.subject == FUNCTION_MODE:
        return [Fix("", f"the call runs under {change.after} where the code was compiled under {change.before}: "
                        "enter the mode before the first call, so the code is compiled under it, or call the "
                        "function outside it"), Fix(stance[0], stance[1])]
    if change.subject == DISPATCH_MODE:
        return [Fix("", "a TorchDispatchMode is active: Dynamo does not compile under it; exit it around "
                        "compiled calls")]
    if change.subject.startswith("torch.is_autocast_enabled") or change.subject.startswith("torch.get_autocast"):
        return [Fix("", "autocast differs between the compile and this call: compile and call inside the same "
                        "torch.autocast(...) block"), Fix(stance[0], stance[1])]
    if change.subject in (DEFAULT_DTYPE, DETERMINISTIC, DEFAULT_DEVICE):
        setter = {DEFAULT_DTYPE: "torch.set_default_dtype(...)", DEFAULT_DEVICE: "torch.set_default_device(...)",
                  DETERMINISTIC: "torch.use_deterministic_algorithms(...)"}[change.subject]
        return [Fix("", f"{change.subject} changed from {change.before} to {change.after} between the compile and "
                        f"this call: set {setter} once, before the first compiled call")]
    return []
