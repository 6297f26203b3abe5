"""Index spaces, the view-and-mutation meta, its collection, and alias analysis."""

from meta.alias import AliasAnalysis
from meta.collect import collect_meta
from meta.indices import IndexMap
from meta.view_and_mutation import InputAliasInfo, OutputAliasInfo, OutputType, ViewAndMutationMeta

__all__ = [
    "AliasAnalysis",
    "IndexMap",
    "InputAliasInfo",
    "OutputAliasInfo",
    "OutputType",
    "ViewAndMutationMeta",
    "collect_meta",
]
