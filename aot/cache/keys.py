"""The compile cache: one backend compile per distinct graph.

Every graph aotfx hands a backend goes through :func:`compile`. It computes the
graph's *canonical form* -- a deterministic text equal for structurally equal
graphs (positional value names, no stack traces or user names, constants by
metadata and content hash, placeholder shapes/strides/dtypes/devices/
``requires_grad``, shape symbols named by first appearance with their ranges,
op overloads) followed by the *key context* (decompositions,
partitioner, the compiler's identity and config, torch/aotfx/Python versions)
-- hashes it with sha256, and reuses the compiled callable of an earlier graph
with the same key. Twelve identical transformer blocks, or the cells of an
unrolled loop, thus cost one backend compile.

Two graphs that differ in anything that changes the compiled result never share
a key; a graph whose canonical form cannot be written without guessing (a
fake constant, an unknown argument type) is compiled without
the cache rather than risking a wrong hit.

A compiler's identity is its declared ``cache_key`` (a string, or a callable
returning one), else ``module.qualname`` plus a hash of its code object. Local
functions, lambdas, ``functools.partial`` and callable objects without
``cache_key`` are identified by object identity: they share entries in this
process only (the cache holds a reference, so the identity is never reused)
and are never persisted.

Entries can also persist on disk (``aot.cache.store``): opt in with
``cache_dir=`` or ``AOTFX_CACHE_DIR``, for compilers that can serialize what
they compile (see :data:`BUILTIN_SERIALIZERS`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import math
import operator
import os
import pathlib
import pickle
import sys
import threading
import time
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensor

from aot.backends import boxed_nop, eager, nop
from aot.cache import store

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

log = logging.getLogger("aot.cache")

ENV_DIR = "AOTFX_CACHE_DIR"
MAX_ENTRIES = 1024  # in-process entries kept (least recently used dropped first)


class Uncacheable(Exception):
    """The graph or its context has no canonical form we trust; compile it without the cache."""


# --------------------------------------------------------------------------------------------
# Identity of functions (compilers, partitioners, decompositions)


@dataclass(frozen=True)
class Identity:
    """How a function is named in a key; ``stable`` when the name means the same in another process."""

    text: str
    stable: bool


def _const_bytes(const: Any) -> bytes:
    # Stable across processes: a nested code object's repr holds an address, a frozenset's order the hash seed.
    if isinstance(const, types.CodeType):
        return _code_bytes(const)
    if isinstance(const, frozenset):
        return b"{" + b",".join(sorted(_const_bytes(item) for item in const)) + b"}"
    if isinstance(const, tuple):
        return b"(" + b",".join(_const_bytes(item) for item in const) + b")"
    return repr(const).encode()


def _code_bytes(code: types.CodeType) -> bytes:
    return code.co_code + b"#" + _const_bytes(code.co_consts) + b"#" + repr(code.co_names).encode()


def _code_hash(fn: Any) -> str | None:
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return None
    # An edited function must not reuse another version's persisted compile.
    return hashlib.sha256(_code_bytes(code)).hexdigest()[:16]


def function_identity(fn: Any) -> Identity:
    """The name of ``fn`` in a key: declared ``cache_key``, else qualname (+ code hash), else object identity."""
    declared = getattr(fn, "cache_key", None)
    if declared is not None:
        return Identity(f"key:{declared() if callable(declared) else declared}", True)
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if isinstance(fn, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return Identity(f"op:{fn}", True)
    owner = getattr(fn, "__self__", None)
    bound = owner is not None and not isinstance(owner, types.ModuleType)
    if module and qualname and "<locals>" not in qualname and "<lambda>" not in qualname and not bound:
        return Identity(f"{module}.{qualname}#{_code_hash(fn)}", True)
    # A closure, lambda, bound method, partial or object: its name says nothing about its state.
    return Identity(f"obj:{type(fn).__qualname__}:{qualname}@{id(fn):x}", False)


@functools.cache
def package_source_hash() -> str:
    """A hash of aotfx's own source as installed: an edit anywhere in it (a partitioner's helper, a
    functionalization rule) must not reuse a compile persisted before it."""
    return source_hash(pathlib.Path(__file__).resolve().parents[2])


def source_hash(root: pathlib.Path) -> str:
    """A hash of the ``aot/``, ``meta/`` and ``wrappers/`` sources under ``root``."""
    digest = hashlib.sha256()
    for package in ("aot", "meta", "wrappers"):
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class KeyContext:
    """What besides the graph decides a compiled result: decompositions, partitioner, versions."""

    decompositions: tuple[str, ...]
    partitioner: str
    versions: str
    stable: bool
    # The functions named by object identity: held by every entry keyed with this context, so
    # their ids are not reused while such an entry lives.
    keepalive: tuple[Any, ...] = field(default=(), compare=False, repr=False)

    @staticmethod
    def of(decompositions: Mapping[Any, Callable[..., Any]], partition_fn: Any) -> KeyContext:
        """The context of one ``aot_function`` configuration."""
        decomps = [(str(op), function_identity(fn)) for op, fn in decompositions.items()]
        decomps.sort(key=lambda pair: pair[0])
        partitioner = function_identity(partition_fn)
        unstable = [fn for fn in decompositions.values() if not function_identity(fn).stable]
        unstable += [] if partitioner.stable else [partition_fn]
        aot_module = sys.modules.get("aot")
        versions = (
            f"torch {torch.__version__}; aotfx {getattr(aot_module, '__version__', '?')} "
            f"({package_source_hash()}); python {sys.version_info.major}.{sys.version_info.minor}"
        )
        return KeyContext(
            decompositions=tuple(f"{op}={ident.text}" for op, ident in decomps),
            partitioner=partitioner.text,
            versions=versions,
            stable=not unstable,
            keepalive=tuple(unstable),
        )


# --------------------------------------------------------------------------------------------
# Canonical form


def _float(value: float) -> str:
    # hex: exact, and -0.0 differs from 0.0; NaN/inf have no hex form.
    return f"f:{value.hex()}" if math.isfinite(value) else f"f:{value!r}"


def _tensor_text(tensor: torch.Tensor) -> str:
    """Metadata and a content hash: two constants with equal text hold equal values."""
    if isinstance(tensor, FakeTensor) or tensor.is_meta:
        raise Uncacheable("a constant tensor has no data (fake or meta)")
    if tensor.layout is not torch.strided or tensor.is_quantized:
        raise Uncacheable(f"a constant tensor has layout {tensor.layout}")
    data = tensor.detach().to("cpu").contiguous()
    digest = hashlib.sha256(bytes(data.untyped_storage())[: data.nbytes]).hexdigest()[:32]
    return (
        f"tensor({tuple(tensor.shape)}, {tuple(tensor.stride())}, {tensor.dtype}, {tensor.device}, "
        f"off={tensor.storage_offset()}, rg={tensor.requires_grad}, sha={digest})"
    )


def _arg_text(value: Any, names: Mapping[fx.Node, str]) -> str:
    """One argument in canonical form; raises ``Uncacheable`` on anything it cannot name exactly."""
    if isinstance(value, fx.Node):
        return names[value]
    if value is None or isinstance(value, bool | int | str):
        return repr(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, complex):
        return f"c({_float(value.real)}, {_float(value.imag)})"
    if isinstance(value, torch.dtype | torch.device | torch.layout | torch.memory_format):
        return repr(value)
    if isinstance(value, torch.Tensor):
        return _tensor_text(value)
    if isinstance(value, torch._ops.OpOverload):  # an op a higher-order op runs (a replayed draw's)
        return f"op:{value}"
    if isinstance(value, tuple | list):
        inner = ", ".join(_arg_text(item, names) for item in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise Uncacheable("a dict argument with non-string keys")
        return "{" + ", ".join(f"{k}={_arg_text(value[k], names)}" for k in sorted(value)) + "}"
    if isinstance(value, slice):
        return f"slice({_arg_text(value.start, names)}, {_arg_text(value.stop, names)}, {_arg_text(value.step, names)})"
    raise Uncacheable(f"argument of type {type(value).__qualname__}")


def _target_text(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return f"op:{target}"
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"hop:{target.name()}"  # type: ignore[no-untyped-call]
    module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if module and qualname and "<locals>" not in qualname and "<lambda>" not in qualname:
        return f"{module}.{qualname}"
    raise Uncacheable(f"call target {target!r} has no stable name")


class _Symbols:
    """Names the shape symbols of one graph by where they first appear (``c0``, ``c1`` ...), so that graphs
    equal up to their symbols have one text, whatever the ShapeEnv called them, in any process."""

    def __init__(self) -> None:
        self.names: dict[Any, Any] = {}  # sympy symbol -> its canonical symbol
        self.ranges: list[str] = []

    def text(self, value: Any) -> str:
        if not isinstance(value, torch.SymInt):
            return str(int(value))
        import sympy

        node = value.node
        expr = node.expr
        for symbol in sorted(expr.free_symbols - self.names.keys(), key=str):
            canonical = self.names[symbol] = sympy.Symbol(f"c{len(self.names)}", integer=True)
            # What the backend may assume of the symbol: its value range.
            bounds = node.shape_env.var_to_range.get(symbol)
            self.ranges.append(f"{canonical}[{bounds.lower}, {bounds.upper}]" if bounds is not None else f"{canonical}")
        return str(expr.xreplace(self.names))

    def sizes(self, values: Any) -> str:
        return "(" + ", ".join(self.text(v) for v in values) + ")"


def _placeholder_text(node: fx.Node, symbols: _Symbols) -> str:
    if "val" not in node.meta:
        raise Uncacheable(f"input {node.name} has no example value")
    val = node.meta["val"]
    if isinstance(val, torch.Tensor):
        return (
            f"input({symbols.sizes(val.shape)}, {symbols.sizes(val.stride())}, "
            f"off={symbols.text(val.storage_offset())}, {val.dtype}, {val.device}, rg={val.requires_grad})"
        )
    if isinstance(val, torch.SymInt):
        return f"input(sym {symbols.text(val)})"
    if val is None or isinstance(val, bool | int | float):
        # Non-tensor inputs are specialized by value where the graph was traced with one.
        return f"input({_arg_text(val, {})})"
    raise Uncacheable(f"placeholder value of type {type(val).__qualname__}")


def canonical_graph(gm: fx.GraphModule) -> str:
    """The graph alone in canonical form: one line per node, values named by position.

    Raises ``Uncacheable`` when some part of the graph has no exact canonical text.
    """
    names: dict[fx.Node, str] = {}
    symbols = _Symbols()
    lines = [f"codegen {type(gm.graph._codegen).__qualname__}"]
    for position, node in enumerate(gm.graph.nodes):
        name = f"%{position}"
        if node.op == "placeholder":
            text = _placeholder_text(node, symbols)
        elif node.op == "get_attr":
            value = operator.attrgetter(str(node.target))(gm)  # a dotted path
            if isinstance(value, torch.Tensor):
                text = f"const {_tensor_text(value)}"
            elif isinstance(value, fx.GraphModule):
                # Subgraphs of higher-order ops: canonical in place, indented.
                text = "subgraph {\n  " + canonical_graph(value).replace("\n", "\n  ") + "\n}"
            else:
                raise Uncacheable(f"get_attr of a {type(value).__qualname__}")
        elif node.op == "call_function":
            text = f"{_target_text(node.target)}{_arg_text(node.args, names)} {_arg_text(node.kwargs, names)}"
        elif node.op == "call_method":
            text = f"method:{node.target}{_arg_text(node.args, names)} {_arg_text(node.kwargs, names)}"
        elif node.op == "output":
            text = f"return {_arg_text(node.args, names)}"
        else:
            raise Uncacheable(f"node op {node.op}")
        names[node] = name
        lines.append(f"{name} = {text}")
    if symbols.ranges:
        lines.append("symbols " + " ".join(symbols.ranges))
    return "\n".join(lines)


def canonical_text(gm: fx.GraphModule, compiler: Any, context: KeyContext) -> str:
    """The graph's canonical form followed by everything else that decides the compiled result."""
    ident = function_identity(compiler)
    return "\n".join(
        [
            canonical_graph(gm),
            # a backend may compile parameters and buffers differently (inductor's static inputs)
            f"static inputs {list(gm.meta.get('static_input_indices', ()))}",
            f"compiler {ident.text}",
            f"partitioner {context.partitioner}",
            "decompositions " + "; ".join(context.decompositions),
            f"versions {context.versions}",
        ]
    )


def graph_key(gm: fx.GraphModule, compiler: Any, context: KeyContext) -> str:
    """sha256 of :func:`canonical_text`: equal for structurally equal graphs compiled alike."""
    return hashlib.sha256(canonical_text(gm, compiler, context).encode()).hexdigest()


# --------------------------------------------------------------------------------------------
# Serializers: how a compiled result travels to disk and back


@dataclass(frozen=True)
class Serializer:
    """``dump(gm, compiled) -> bytes`` and ``load(bytes) -> compiled``."""

    dump: Callable[[fx.GraphModule, Any], bytes]
    load: Callable[[bytes], Any]


def _graph_serializer(compiler: Callable[[fx.GraphModule, list[Any]], Any]) -> Serializer:
    # The built-ins compile nothing: store the GraphModule (its generated code and constants) and
    # re-apply the compiler on load. pickle runs code on load, so cache_store only hands us bytes
    # from this user's private directory whose checksum and key matched.
    return Serializer(
        dump=lambda gm, compiled: pickle.dumps(gm, protocol=pickle.HIGHEST_PROTOCOL),
        load=lambda data: compiler(pickle.loads(data), []),
    )


# A compiler outside this table takes part by declaring ``serialize(gm, compiled) -> bytes`` and
# ``deserialize(data) -> compiled`` attributes.
BUILTIN_SERIALIZERS: dict[Any, Serializer] = {fn: _graph_serializer(fn) for fn in (nop, boxed_nop, eager)}


def _serializer(compiler: Any) -> Serializer | None:
    if compiler in BUILTIN_SERIALIZERS:
        return BUILTIN_SERIALIZERS[compiler]
    dump, load = getattr(compiler, "serialize", None), getattr(compiler, "deserialize", None)
    if callable(dump) and callable(load):
        return Serializer(dump=dump, load=load)
    return None


# --------------------------------------------------------------------------------------------
# The in-process cache


@dataclass(frozen=True)
class CacheStats:
    """Counters since the last :func:`clear`.

    ``hits`` counts in-process and disk hits together (``disk_hits`` the latter);
    ``backend_compiles`` counts compiler calls, cached or not; ``trace_reuses``
    counts compiles skipped whole (trace included) by :func:`reuse_trace`;
    ``seconds_saved`` sums the compile time the hits did not spend again.
    """

    hits: int = 0
    misses: int = 0
    disk_hits: int = 0
    disk_writes: int = 0
    uncacheable: int = 0
    trace_reuses: int = 0
    backend_compiles: int = 0
    seconds_saved: float = 0.0


@dataclass(frozen=True)
class _Entry:
    compiled: Any
    # Held so that no compiler, decomposition or partitioner keyed by object identity is freed
    # (and its id reused by another) while the entry lives.
    compiler: Any
    context: KeyContext
    seconds: float


class _Cache:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: OrderedDict[str, _Entry] = OrderedDict()
        self.stats = CacheStats()
        self.enabled = True
        # function -> [(config, input signature, compiled entry)]: the cheap key, checked before tracing.
        self.traced: weakref.WeakKeyDictionary[Any, list[tuple[Any, Hashable, Any]]] = weakref.WeakKeyDictionary()

    def count(self, **increments: float) -> None:
        with self.lock:
            fields = {name: getattr(self.stats, name) + value for name, value in increments.items()}
            self.stats = CacheStats(**{**self.stats.__dict__, **fields})


_CACHE = _Cache()


def stats() -> CacheStats:
    """The counters of this process's cache."""
    return _CACHE.stats


def clear() -> None:
    """Forget every in-process entry and reset the counters (disk entries stay)."""
    with _CACHE.lock:
        _CACHE.entries.clear()
        _CACHE.traced.clear()
        _CACHE.stats = CacheStats()


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Within the block every graph is compiled afresh (benchmarks: cache off)."""
    previous, _CACHE.enabled = _CACHE.enabled, False
    try:
        yield
    finally:
        _CACHE.enabled = previous


def _backend(compiler: Any, gm: fx.GraphModule, example_inputs: list[Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    compiled = compiler(gm, example_inputs)
    seconds = time.perf_counter() - start
    _CACHE.count(backend_compiles=1)
    return compiled, seconds


def compile(
    kind: str,
    gm: fx.GraphModule,
    example_inputs: Sequence[Any],
    compiler: Any,
    context: KeyContext,
    cache_dir: str | None = None,
) -> Any:
    """``compiler(gm, example_inputs)``, or the result of an earlier compile of an equal graph.

    Args:
        kind: ``"forward"``, ``"backward"`` or ``"inference"``; for the logs.
        context: what besides the graph and the compiler decides the result.
        cache_dir: directory of the persistent cache; ``None`` reads ``AOTFX_CACHE_DIR``;
            unset or empty: in-process only.

    Returns:
        What the compiler returned (possibly for another, structurally equal graph).
    """
    inputs = list(example_inputs)
    if not _CACHE.enabled:
        return _backend(compiler, gm, inputs)[0]
    try:
        key = graph_key(gm, compiler, context)
    except Uncacheable as why:
        log.debug("aot cache: %s graph not cached: %s", kind, why)
        _CACHE.count(uncacheable=1)
        return _backend(compiler, gm, inputs)[0]
    with _CACHE.lock:
        found = _CACHE.entries.get(key)
        if found is not None:
            _CACHE.entries.move_to_end(key)
    if found is not None:
        _CACHE.count(hits=1, seconds_saved=found.seconds)
        log.debug("aot cache: %s hit %s (saved %.1f ms)", kind, key[:12], found.seconds * 1e3)
        return found.compiled
    directory = cache_dir if cache_dir is not None else os.environ.get(ENV_DIR) or None
    serializer = _serializer(compiler)
    persist = directory is not None and serializer is not None and context.stable and function_identity(compiler).stable
    if persist:
        assert directory is not None and serializer is not None
        loaded = store.load(directory, key)
        if loaded is not None:
            payload, seconds = loaded
            try:
                compiled = serializer.load(payload)
            except Exception as error:  # a backend's loader failing is a miss, never a crash
                log.warning("aot cache: could not deserialize %s entry %s: %s", kind, key[:12], error)
            else:
                _remember(key, _Entry(compiled, compiler, context, seconds))
                _CACHE.count(hits=1, disk_hits=1, seconds_saved=seconds)
                log.debug("aot cache: %s disk hit %s", kind, key[:12])
                return compiled
    _CACHE.count(misses=1)
    compiled, seconds = _backend(compiler, gm, inputs)
    log.debug("aot cache: %s miss %s, compiled in %.1f ms", kind, key[:12], seconds * 1e3)
    _remember(key, _Entry(compiled, compiler, context, seconds))
    if persist:
        assert directory is not None and serializer is not None
        try:
            payload = serializer.dump(gm, compiled)
        except Exception as error:  # an unpicklable graph stays in process
            log.debug("aot cache: %s entry %s not serializable: %s", kind, key[:12], error)
        else:
            if store.store(directory, key, payload, seconds):
                _CACHE.count(disk_writes=1)
    return compiled


def _remember(key: str, entry: _Entry) -> None:
    with _CACHE.lock:
        _CACHE.entries[key] = entry
        while len(_CACHE.entries) > MAX_ENTRIES:
            _CACHE.entries.popitem(last=False)


def reuse_trace(fn: Any, config: Any, signature: Hashable) -> Any:
    """What :func:`remember_trace` stored for this function object, equal config and signature, or ``None``.

    The cheap key: the same function object compiled again (another
    ``aot_function`` of it) with an equal configuration for an equal input
    signature skips tracing as well as the backend.
    """
    if not _CACHE.enabled:
        return None
    try:
        candidates = _CACHE.traced.get(fn, [])
    except TypeError:  # not weak-referenceable
        return None
    for other_config, other_signature, compiled in candidates:
        if other_signature == signature and other_config == config:
            _CACHE.count(trace_reuses=1)
            return compiled
    return None


def remember_trace(fn: Any, config: Any, signature: Hashable, compiled: Any) -> None:
    """Record a compiled entry under the cheap key ``(fn, config, signature)``."""
    if not _CACHE.enabled:
        return
    with _CACHE.lock, contextlib.suppress(TypeError):
        _CACHE.traced.setdefault(fn, []).append((config, signature, compiled))
