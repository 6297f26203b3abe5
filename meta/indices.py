"""Index spaces of the layer stack, each its own type, and a typed map between them.

Every layer rewrites the calling convention of the flat function: the positions
of its arguments and outputs mean different things above and below it. A bare
``int`` crossing that boundary is the classic calling-convention bug, so each
space gets a ``NewType`` and the layers map between them with ``IndexMap``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Generic, NewType, TypeVar

__all__ = [
    "BaseArg",
    "DedupedArg",
    "GraphArg",
    "GraphOut",
    "IndexMap",
    "IntermediateBase",
    "UserArg",
    "UserOut",
]

# Inputs. UserArg: position among the tensors of the user's flattened call.
UserArg = NewType("UserArg", int)
# After the dedupe layer: one position per distinct tensor object.
DedupedArg = NewType("DedupedArg", int)
# After the synthetic-base layer: aliased inputs merged into one base.
BaseArg = NewType("BaseArg", int)
# What the compiled graphs take (primals), below every layer.
GraphArg = NewType("GraphArg", int)

# Outputs. UserOut: position among the tensors of the user's flattened result.
UserOut = NewType("UserOut", int)
# What the compiled forward/inference graph returns, below the epilogue.
GraphOut = NewType("GraphOut", int)
# An intermediate that user outputs are views of, returned as a hidden output.
IntermediateBase = NewType("IntermediateBase", int)

K = TypeVar("K", bound=int)
V = TypeVar("V")


class IndexMap(Generic[K, V]):
    """An immutable map whose key type names the index space it takes.

    ``IndexMap[UserOut, GraphOut]`` cannot be indexed by a ``UserArg`` under
    mypy.
    """

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self._items: dict[K, V] = dict(items)

    def __getitem__(self, key: K) -> V:
        return self._items[key]

    def get(self, key: K) -> V | None:
        return self._items.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IndexMap) and self._items == other._items

    def __hash__(self) -> int:
        return hash(tuple(self._items.items()))

    def __repr__(self) -> str:
        return f"IndexMap({self._items!r})"

    def keys(self) -> Iterable[K]:
        return self._items.keys()

    def values(self) -> Iterable[V]:
        return self._items.values()

    def items(self) -> Iterable[tuple[K, V]]:
        return self._items.items()
