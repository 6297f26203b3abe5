"""Refuse programs that mutate an input, until the mutation layers land.

Later layers (metadata-mutation, synthetic-base, the epilogue's mutation half)
make these programs work; until then the only acceptable answer is a clear
error naming the input, never a wrong result.
"""

from __future__ import annotations

from aot.errors import UnsupportedMutationError
from wrappers.base import Runtime, Stage

__all__ = ["RejectInputMutations"]


class RejectInputMutations:
    """Raises ``UnsupportedMutationError`` naming the first mutated input; otherwise the identity."""

    def pre_compile(self, outer: Stage) -> Stage:
        for info in outer.meta.input_info:
            if info.mutates:
                kind = "data" if info.mutates_data else "metadata (size/stride/offset)"
                raise UnsupportedMutationError(
                    f"the function mutates the {kind} of input '{info.name}'; input mutations are not "
                    "supported yet. Clone the input inside the function, or mutate it outside."
                )
        return outer

    def post_compile(self, inner: Runtime) -> Runtime:
        return inner
