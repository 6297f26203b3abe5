"""Whole compiled entries on disk, for programs handed over as a GraphModule: warm starts skip tracing.

``aot_module_simplified(gm, ...)`` (the ``torch.compile`` path) receives the whole
program as a graph, so its canonical form (``aot.cache.canonical_graph``), the
compilers' and partitioner's identities and the input signature key a compiled
entry soundly in any process. (A plain Python function has no such key: its
source does not pin its globals and closures; those are never persisted here.)

An entry holds the user-level meta, the calling convention and the forward,
backward or inference graphs. A warm start loads it, lets the layers rebuild
their runtimes around the stored meta, and sends each graph to its compiler
through the compile cache: no meta collection, tracing, functionalization or
partitioning. Storage, integrity and permission checks are ``aot.cache.store``'s.
"""

from __future__ import annotations

import copyreg
import hashlib
import io
import pickle
import warnings
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode

from aot.cache import keys, store

__all__ = ["entry_key", "load", "program_key", "save"]

_GRAPHS = ("forward", "backward", "inference")


def program_key(gm: fx.GraphModule, config: Any) -> str | None:
    """The key of a GraphModule program compiled with ``config``; ``None`` if no key survives a process."""
    compilers = (config.fw_compiler, config.bw_compiler, config.inference_compiler)
    identities = [keys.function_identity(compiler) for compiler in compilers]
    context = keys.KeyContext.of(config.decompositions, config.partition_fn)
    if not context.stable or not all(identity.stable for identity in identities):
        return None
    try:
        text = keys.canonical_graph(gm)
    except keys.Uncacheable:
        return None
    parts = [text, *(identity.text for identity in identities), context.partitioner, *context.decompositions]
    parts.append(context.versions)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def entry_key(program: str, signature: Hashable) -> str:
    """The key of one compiled entry: the program and the input signature it was compiled for."""
    return hashlib.sha256(f"{program}\n{signature!r}".encode()).hexdigest()


def _op_by_name(namespace: str, name: str, overload: str) -> Any:
    return getattr(getattr(getattr(torch.ops, namespace), name), overload)


def _reduce_op(op: torch._ops.OpOverload) -> tuple[Any, tuple[str, str, str]]:
    namespace, name = op._schema.name.split("::")
    return _op_by_name, (namespace, name, op._overloadname)


def _spec(gm: fx.GraphModule) -> list[tuple[tuple[int, ...], tuple[int, ...], torch.dtype, torch.device] | None]:
    """Each placeholder's example as (size, stride, dtype, device): pickling a GraphModule drops node meta."""
    values = [node.meta.get("val") for node in gm.graph.find_nodes(op="placeholder")]
    return [
        (tuple(v.shape), tuple(v.stride()), v.dtype, v.device) if isinstance(v, torch.Tensor) else None for v in values
    ]


def _restored(flat: tuple[list[tuple[Any, ...]], dict[str, Any]], specs: list[Any]) -> fx.GraphModule:
    """A stored graph, with its placeholders' examples (fakes) back."""
    gm = _unflatten_graph(*flat)
    fake_mode = FakeTensorMode()
    placeholders = gm.graph.find_nodes(op="placeholder")
    for node, spec in zip(placeholders, specs, strict=True):
        if spec is not None:
            size, stride, dtype, device = spec
            with fake_mode:
                node.meta["val"] = torch.empty_strided(size, stride, dtype=dtype, device=device)
    return gm


@dataclass(frozen=True)
class _Ref:
    """A node argument that is another node: its position in the graph."""

    index: int


def _flatten_graph(gm: fx.GraphModule) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    """The graph as plain data (no re-tracing on load, unlike pickling the GraphModule) and its attributes."""
    index = {node: position for position, node in enumerate(gm.graph.nodes)}
    nodes = []
    attributes = {}
    for node in gm.graph.nodes:
        args = fx.map_arg(node.args, lambda n: _Ref(index[n]))  # type: ignore[arg-type,return-value]
        kwargs = fx.map_arg(node.kwargs, lambda n: _Ref(index[n]))  # type: ignore[arg-type,return-value]
        nodes.append((node.op, node.target, args, kwargs, node.name))
        if node.op == "get_attr":
            attributes[str(node.target)] = getattr(gm, str(node.target))
    return nodes, attributes


def _unflatten_graph(nodes: list[tuple[Any, ...]], attributes: dict[str, Any]) -> fx.GraphModule:
    graph = fx.Graph()
    made: list[fx.Node] = []

    def resolve(value: Any) -> Any:
        if isinstance(value, _Ref):
            return made[value.index]
        if isinstance(value, (list, tuple)):
            return type(value)(resolve(v) for v in value)
        if isinstance(value, dict):
            return {k: resolve(v) for k, v in value.items()}
        return value

    for op, target, args, kwargs, name in nodes:
        made.append(graph.create_node(op, target, resolve(args), resolve(kwargs), name=name))
    root = torch.nn.Module()
    for target, value in attributes.items():
        setattr(root, target, value)
    return fx.GraphModule(root, graph)


def save(directory: str, key: str, meta: Any, convention: Any, graphs: dict[str, fx.GraphModule | None]) -> bool:
    """Store one entry; ``False`` when it cannot be pickled or written (it is then simply not persisted)."""
    stored = {name: (_flatten_graph(gm), _spec(gm)) if gm is not None else None for name, gm in graphs.items()}
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = copyreg.dispatch_table.copy()
    pickler.dispatch_table[torch._ops.OpOverload] = _reduce_op
    try:
        pickler.dump({"meta": meta, "convention": convention, "graphs": stored})
    except (pickle.PicklingError, TypeError, AttributeError):
        return False
    return store.store(directory, key, buffer.getvalue(), 0.0)


def load(directory: str, key: str) -> tuple[Any, Any, dict[str, fx.GraphModule | None]] | None:
    """The stored (meta, convention, graphs) of ``key``, or ``None`` on a miss or an unusable entry."""
    found = store.load(directory, key)
    if found is None:
        return None
    try:
        # Only bytes from this user's private directory whose key and checksum matched reach here.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # pytree's own deprecation noise on unpickling specs
            data = pickle.loads(found[0])
        stored = {name: data["graphs"].get(name) for name in _GRAPHS}
        graphs = {name: None if found is None else _restored(*found) for name, found in stored.items()}
        return data["meta"], data["convention"], graphs
    except Exception:  # an entry from another version of aotfx or torch: compile afresh
        return None
