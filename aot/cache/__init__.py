"""The compile cache, three rooms: keys, the on-disk store, whole entries.

- :mod:`aot.cache.keys`: a graph's canonical form and key, the in-process cache,
  :func:`compile` (every backend compile goes through it), trace reuse;
- :mod:`aot.cache.store`: one file per key in a user-private directory;
- :mod:`aot.cache.entries`: whole compiled entries of GraphModule programs on disk.

What a user needs is importable from here: ``aot.cache.clear()``, ``aot.cache.stats()``,
``aot.cache.disabled()``, ``aot.cache.ENV_DIR``; the rest lives in its room.
"""

from __future__ import annotations

from aot.cache.keys import ENV_DIR, CacheStats, clear, disabled, stats

__all__ = ["ENV_DIR", "CacheStats", "clear", "disabled", "stats"]
