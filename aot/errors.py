"""Exception classes of aotfx, each subclassing the builtin a caller would catch."""

from meta.errors import (
    AOTError,
    BackendCompilerError,
    DataDependentError,
    DoubleBackwardError,
    DynamicShapesUnsupportedError,
    FakeKernelError,
    UnsupportedHookError,
    UnsupportedInputError,
    UnsupportedMutationError,
    UnsupportedOperatorError,
)

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
