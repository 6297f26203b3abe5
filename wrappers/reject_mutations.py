"""Refuse programs that mutate an input, until the mutation layers land.

Later layers (metadata-mutation, synthetic-base, the epilogue's mutation half)
make these programs work; until then the only acceptable answer is a clear
error naming the inputs, never a wrong result.
"""

from __future__ import annotations

from aot.errors import UnsupportedMutationError
from wrappers.base import Runtime, Stage

__all__ = ["RejectInputMutations"]


class RejectInputMutations:
    """Raises ``UnsupportedMutationError`` naming every mutated input; otherwise the identity."""

    def pre_compile(self, outer: Stage) -> Stage:
        mutated = [
            f"'{info.name}' ({'data' if info.mutates_data else 'metadata: size/stride/offset'})"
            for info in outer.meta.input_info
            if info.mutates
        ]
        if mutated:
            raise UnsupportedMutationError(
                f"the function mutates input {', input '.join(mutated)}; input mutations are not supported "
                "yet. Clone the input inside the function, or mutate it outside the compiled function."
            )
        return outer

    def post_compile(self, inner: Runtime) -> Runtime:
        return inner
