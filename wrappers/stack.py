"""The one place that says which layers run, outermost first."""

from __future__ import annotations

from wrappers.base import Layer
from wrappers.dedupe import Dedupe
from wrappers.metadata_mutation import MetadataMutation
from wrappers.runtime_epilogue import RuntimeEpilogue
from wrappers.synthetic_base import SyntheticBase

__all__ = ["default_layers"]


def default_layers() -> list[Layer]:
    """Fresh layer instances for one compile, outermost first."""
    return [Dedupe(), MetadataMutation(), SyntheticBase(), RuntimeEpilogue()]
