"""Exception classes of aotfx, each subclassing the builtin a caller would catch (``meta.errors`` defines them)."""

from meta.errors import *  # noqa: F403
from meta.errors import __all__ as __all__
