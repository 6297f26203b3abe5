"""Exception classes of aotfx, each subclassing the builtin a caller would catch.

They live at the bottom of the package graph so every layer can raise them; users
import them from ``aot.errors``.
"""

from __future__ import annotations

__all__ = [
    "AOTError",
    "BackendCompilerError",
    "DataDependentError",
    "DoubleBackwardError",
    "DynamicShapesUnsupportedError",
    "FakeKernelError",
    "UnsupportedHookError",
    "UnsupportedInputError",
    "UnsupportedMutationError",
    "UnsupportedOperatorError",
]


class AOTError(Exception):
    """Base of every aotfx error."""


class UnsupportedMutationError(AOTError, NotImplementedError):
    """The function mutates an input in a way the layer stack does not handle yet."""


class DynamicShapesUnsupportedError(AOTError, NotImplementedError):
    """A feature aotfx does not handle yet with symbolic sizes; compile with static shapes instead."""

    def __init__(self, feature: str) -> None:
        super().__init__(
            f"dynamic shapes: {feature}. aotfx does not handle this with symbolic sizes yet: compile this "
            "function with static shapes (dynamic=False, no dynamic_dims, no mark_dynamic)"
        )
        self.feature = feature


class DoubleBackwardError(AOTError, RuntimeError):
    """A second derivative was asked through a compiled function."""


class UnsupportedInputError(AOTError, TypeError):
    """An argument the compiled function cannot specialize on or trace."""


class UnsupportedHookError(AOTError, NotImplementedError):
    """A module or tensor hook inside the compiled region, which would run on fake tensors only."""


class DataDependentError(AOTError, RuntimeError):
    """An op whose result (a Python value or an output shape) depends on tensor data the trace does not have."""


class UnsupportedOperatorError(AOTError, NotImplementedError):
    """An op the fake tensors cannot run (a custom op without a fake kernel, say)."""


class FakeKernelError(AOTError, RuntimeError):
    """An op's fake (meta) kernel raised while tracing; eager's real kernel may accept the call."""


class BackendCompilerError(AOTError, RuntimeError):
    """The backend compiler raised on one of the graphs; the original exception is chained."""
