"""Exception classes of aotfx, each subclassing the builtin a caller would catch."""

from meta.errors import AOTError, DoubleBackwardError, UnsupportedInputError, UnsupportedMutationError

__all__ = ["AOTError", "DoubleBackwardError", "UnsupportedInputError", "UnsupportedMutationError"]
