"""The compile cache, three rooms: keys, the on-disk store, whole entries.

- :mod:`aot.cache.keys`: a graph's canonical form and key, the in-process cache,
  :func:`compile` (every backend compile goes through it), trace reuse;
- :mod:`aot.cache.store`: one file per key in a user-private directory;
- :mod:`aot.cache.entries`: whole compiled entries of GraphModule programs on disk.

The keys module's public names are importable from here (``aot.cache.clear()``,
``aot.cache.stats()``, ``aot.cache.disabled()``, ``aot.cache.ENV_DIR``).
"""

from __future__ import annotations

from aot.cache.keys import (
    BUILTIN_SERIALIZERS,
    ENV_DIR,
    CacheStats,
    Identity,
    KeyContext,
    Serializer,
    Uncacheable,
    canonical_graph,
    canonical_text,
    clear,
    compile,
    disabled,
    function_identity,
    graph_key,
    remember_trace,
    reuse_trace,
    stats,
)

__all__ = [
    "BUILTIN_SERIALIZERS",
    "ENV_DIR",
    "CacheStats",
    "Identity",
    "KeyContext",
    "Serializer",
    "Uncacheable",
    "canonical_graph",
    "canonical_text",
    "clear",
    "compile",
    "disabled",
    "function_identity",
    "graph_key",
    "remember_trace",
    "reuse_trace",
    "stats",
]
