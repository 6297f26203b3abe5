"""Exception classes of aotfx, each subclassing the builtin a caller would catch.

They live at the bottom of the package graph so every layer can raise them; users
import them from ``aot.errors``.
"""

from __future__ import annotations

__all__ = ["AOTError", "DoubleBackwardError", "UnsupportedInputError", "UnsupportedMutationError"]


class AOTError(Exception):
    """Base of every aotfx error."""


class UnsupportedMutationError(AOTError, NotImplementedError):
    """The function mutates an input in a way the layer stack does not handle yet."""


class DoubleBackwardError(AOTError, RuntimeError):
    """A second derivative was asked through a compiled function."""


class UnsupportedInputError(AOTError, TypeError):
    """An argument the compiled function cannot specialize on or trace."""
