"""The global state a bundle was captured under, recorded at export and checked per call.

Dynamo guards each graph on the state it was traced under and retraces when it
changes; a bundle cannot retrace, so the runtime refuses a call under a state that
would make eager compute something else (AmbientStateError), and says what to change:

- autocast: a graph traced under autocast holds its casts, one traced outside holds
  none; the call's autocast state (for the bundle's device type) must be the export's.
- the default dtype: tensors made inside forward took it at export.
- deterministic algorithms: on at the call but off at export, the graphs may use
  kernels eager would refuse or replace.
- torch-function modes: a mode active at the call would see every op in eager; the
  graphs bypass it.
- grad mode: an inference graph gives outputs without autograd history, so a call
  with grad on and an input that requires grad is refused (eager would record one);
  likewise an input of a forward+backward bundle that did not require grad at export.
"""

from __future__ import annotations

import torch

from aotc import _torch_compat as tc
from aotc.bundle.schema import AmbientState
from aotc.errors import AmbientStateError

_DEVICE_TYPES = ("cpu", "cuda")


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def current() -> AmbientState:
    """The state now (export records it before capture)."""
    return AmbientState(
        grad_enabled=torch.is_grad_enabled(),
        autocast={d: _name(torch.get_autocast_dtype(d)) for d in _DEVICE_TYPES if torch.is_autocast_enabled(d)},
        default_dtype=_name(torch.get_default_dtype()),
        deterministic=torch.are_deterministic_algorithms_enabled(),
        torch_function_modes=[type(m).__qualname__ for m in tc.torch_function_modes()],
    )


class AmbientGuard:
    """The per-call check of a loaded bundle: one C call (Dynamo's GlobalStateGuard) when
    the state is one the full check accepted before."""

    def __init__(self, state: AmbientState | None, device_type: str, bundle: str):
        self.active = state is not None
        if state is None:  # exported before aotc recorded it: nothing to compare with
            return
        self.device_type = device_type
        self.bundle = bundle
        autocast = state.autocast.get(device_type)
        self.autocast = None if autocast is None else getattr(torch, autocast)
        self.default_dtype = getattr(torch, state.default_dtype)
        self.deterministic = state.deterministic
        self.modes = len(state.torch_function_modes)
        self._accepted: list = []  # global states the full check passed, as C++ guards

    def check(self) -> None:
        for state in self._accepted:
            if state.check() and tc.torch_function_mode_count() <= self.modes:
                return
        self._check()
        if len(self._accepted) < 4:
            self._accepted.append(tc.global_state_guard())

    def _check(self) -> None:
        now = torch.get_autocast_dtype(self.device_type) if torch.is_autocast_enabled(self.device_type) else None
        if now != self.autocast:
            said = "outside autocast" if self.autocast is None else f"under autocast to {_name(self.autocast)}"
            called = "outside autocast" if now is None else f"under autocast to {_name(now)}"
            raise AmbientStateError(
                f"'{self.bundle}' was exported {said} ({self.device_type}) and is called {called}; its graphs "
                "hold the casts of export, so eager would compute something else. Call it as exported "
                f"(e.g. with torch.autocast('{self.device_type}', enabled=False)), or export it again in the "
                "autocast state you call it in."
            )
        if torch.get_default_dtype() != self.default_dtype:
            raise AmbientStateError(
                f"the default dtype is {_name(torch.get_default_dtype())}; '{self.bundle}' was exported with "
                f"{_name(self.default_dtype)}, which tensors made in forward took. Set "
                f"torch.set_default_dtype(torch.{_name(self.default_dtype)}) around the call, or export again."
            )
        if torch.are_deterministic_algorithms_enabled() and not self.deterministic:
            raise AmbientStateError(
                f"deterministic algorithms are on, but '{self.bundle}' was exported with them off: its kernels "
                "were not chosen to be deterministic. Export it again under "
                "torch.use_deterministic_algorithms(True)."
            )
        if tc.torch_function_mode_count() > self.modes:
            modes = ", ".join(type(m).__qualname__ for m in tc.torch_function_modes())
            raise AmbientStateError(
                f"torch-function modes are active ({modes}); in eager they would see every op of the model, "
                f"but '{self.bundle}' runs compiled graphs that bypass them. Call it outside the mode."
            )


def check_inference_grad(flat, bundle: str, names) -> None:
    """An inference graph under grad mode: refuse inputs that require grad."""
    for name, t in zip(names, flat):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            raise AmbientStateError(
                f"input '{name}' requires grad and grad mode is on, but '{bundle}' has an inference graph: "
                "its outputs would have no autograd history, where eager's would. Call it under "
                "torch.no_grad() (or detach the input), or export forward+backward graphs (--autograd) "
                "and load with mode='train'."
            )


def check_traced_without_grad(flat, positions, bundle: str, checks) -> None:
    """A forward+backward graph computes no gradient for an input exported without one."""
    for i in positions:
        t = flat[i]
        if isinstance(t, torch.Tensor) and t.requires_grad:
            raise AmbientStateError(
                f"input '{checks[i].name}' requires grad, but '{bundle}' was exported with it not requiring "
                "grad: its backward graph computes no gradient for it, where eager would. Export with an "
                "example input that requires grad, or detach it."
            )
