"""Index spaces of the layer stack, each its own type, and a typed map between them.

Every layer rewrites the calling convention of the flat function: the positions
of its arguments and outputs mean different things above and below it. A bare
``int`` crossing that boundary is the classic calling-convention bug, so each
space gets a ``NewType`` and the layers map between them with ``IndexMap``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NewType, TypeVar

__all__ = ["BaseArg", "BaseOut", "DedupedArg", "GraphArg", "GraphOut", "IndexMap", "IntermediateBase"]
__all__ += ["RestridedArg", "RestridedOut", "UserArg", "UserOut"]

# Inputs. UserArg: position among the tensors of the user's flattened call.
UserArg = NewType("UserArg", int)
# After the dedupe layer: one position per distinct tensor object.
DedupedArg = NewType("DedupedArg", int)
# After the metadata-mutation layer: no input's geometry changes (the bases of moved histories appended).
RestridedArg = NewType("RestridedArg", int)
# After the synthetic-base layer: aliased inputs merged into one base.
BaseArg = NewType("BaseArg", int)
# What the compiled graphs take (primals), below every layer.
GraphArg = NewType("GraphArg", int)

# Outputs. UserOut: position among the tensors of the user's flattened result.
UserOut = NewType("UserOut", int)
# After the metadata-mutation layer: the outputs it leaves to the layers below, then fresh storages' values.
RestridedOut = NewType("RestridedOut", int)
# After the synthetic-base layer: the outputs it leaves below, then the written members' new values.
BaseOut = NewType("BaseOut", int)
# What the compiled forward/inference graph returns, below the epilogue.
GraphOut = NewType("GraphOut", int)
# An intermediate that user outputs are views of, returned as a hidden output.
IntermediateBase = NewType("IntermediateBase", int)

K = TypeVar("K", bound=int)
V = TypeVar("V")
# A map whose key type names the index space it takes: ``IndexMap[UserOut, GraphOut]`` cannot be indexed by
# a ``UserArg`` under mypy, nor written (a layer builds a ``dict`` once, then only reads it).
IndexMap = Mapping[K, V]
