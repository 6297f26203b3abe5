"""Alias analysis over ATen-level FX graphs: which values may share memory, and who writes it.

The analysis is a memory DAG. Each *value* (a node producing a tensor or a list
of tensors) points to the values it may alias, read off the op's schema:

| value                                              | points to                                |
|----------------------------------------------------|------------------------------------------|
| placeholder, ``get_attr``                          | nothing: it is its own memory location   |
| view: return ``Tensor(a)``, argument ``Tensor(a)`` | that argument (its base)                 |
| list of views: argument ``Tensor(a -> *)``         | that argument                            |
| in-place / ``out=`` result: ``Tensor(a!)``         | the written argument                     |
| ``getitem(t, i)``, ``t`` from a multi-return op    | what return ``i`` of that op points to   |
| ``getitem(t, i)``, ``t`` a list of views           | ``t``                                    |
| anything else                                      | nothing: a fresh memory location         |

A value's *memory locations* are the leaves it reaches: a frozenset of
location nodes (placeholders, constants, fresh results). They are computed
once, in graph order, when the analysis is built; a value with one parent
shares its parent's frozenset object, so a view chain of any length costs
O(1) per link and building is linear in the graph.

A node *writes* the locations of every argument its schema marks ``(a!)``,
plus the arguments listed in ``UNANNOTATED_WRITES`` (ops that write without
saying so). Metadata writes (``t_``, ``as_strided_`` ...) are writes too: tell
them apart with ``torch.Tag.inplace_view``.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.fx as fx
from torch._ops import OpOverload

__all__ = [
    "UNANNOTATED_WRITES",
    "AliasAnalysis",
    "argument_value",
    "return_alias_positions",
    "written_positions",
]

_aten = torch.ops.aten


def _running_stats(args: Sequence[Any]) -> tuple[int, ...]:
    # (input, weight, bias, running_mean, running_var, training, ...): training updates the stats it is given.
    return (3, 4) if len(args) > 5 and args[5] and args[3] is not None else ()


# Ops that write arguments their schema does not mark ``(a!)``:
# op -> the schema positions written, given the call's positional arguments.
UNANNOTATED_WRITES: dict[OpOverload, Callable[[Sequence[Any]], tuple[int, ...]]] = {
    _aten.native_batch_norm.default: _running_stats,
    _aten.cudnn_batch_norm.default: _running_stats,
    _aten.miopen_batch_norm.default: _running_stats,
}


@functools.cache
def return_alias_positions(op: OpOverload) -> tuple[tuple[int, ...], ...]:
    """Per return of ``op``: the schema positions of the arguments it may alias.

    A return annotated ``Tensor(a)`` aliases the arguments whose alias set holds
    ``a``. A list return loses its element annotation in the TorchScript schema,
    so ``Tensor(a)[]`` is matched by the argument's ``a -> *`` (its memory goes to
    the list's elements) instead.
    """
    schema = op._schema
    per_return: list[tuple[int, ...]] = []
    for ret in schema.returns:
        ret_set = set(ret.alias_info.before_set) if ret.alias_info is not None else set()
        positions = []
        for position, arg in enumerate(schema.arguments):
            info = arg.alias_info
            if info is None:
                continue
            if ret_set and ret_set & set(info.before_set):
                positions.append(position)
            elif not ret_set and isinstance(ret.type, torch.ListType) and "*" in info.after_set and info.before_set:
                positions.append(position)
        per_return.append(tuple(positions))
    return tuple(per_return)


@functools.cache
def _annotated_writes(op: OpOverload) -> tuple[int, ...]:
    return tuple(
        position
        for position, arg in enumerate(op._schema.arguments)
        if arg.alias_info is not None and arg.alias_info.is_write
    )


def written_positions(op: OpOverload, args: Sequence[Any]) -> tuple[int, ...]:
    """Schema positions of the arguments a call of ``op`` with positional ``args`` writes."""
    unannotated = UNANNOTATED_WRITES.get(op)
    if unannotated is None:
        return _annotated_writes(op)
    return tuple(sorted({*_annotated_writes(op), *unannotated(args)}))


def argument_value(op: OpOverload, node: fx.Node, position: int) -> Any:
    """The value ``node`` passes for schema argument ``position`` of ``op`` (``None`` when defaulted)."""
    arg = op._schema.arguments[position]
    if not arg.kwarg_only and position < len(node.args):
        return node.args[position]
    return node.kwargs.get(arg.name)


def _nodes_in(value: Any) -> list[fx.Node]:
    if isinstance(value, fx.Node):
        return [value]
    if isinstance(value, (list, tuple)):
        return [item for item in value if isinstance(item, fx.Node)]
    return []


def _holds_tensor(val: Any) -> bool:
    if isinstance(val, torch.Tensor):
        return True
    return isinstance(val, (list, tuple)) and any(isinstance(item, torch.Tensor) for item in val)


def _is_value(node: fx.Node) -> bool:
    """Whether ``node`` produces tensor memory; a node without ``meta["val"]`` is assumed to."""
    if node.op == "output":
        return False
    return "val" not in node.meta or _holds_tensor(node.meta["val"])


def _dedupe(nodes: Iterable[fx.Node]) -> tuple[fx.Node, ...]:
    return tuple(dict.fromkeys(nodes))


class AliasAnalysis:
    """The memory DAG of one FX graph, queried after one linear build pass.

    Queries take nodes of the analysed graph. Values that hold no tensor (sizes,
    scalars) have no location: they alias nothing.
    """

    def __init__(self, graph: fx.Graph) -> None:
        self._parents: dict[fx.Node, tuple[fx.Node, ...]] = {}
        # Multi-return ops: what each return points to, for the getitem that takes it.
        self._item_parents: dict[fx.Node, tuple[tuple[fx.Node, ...], ...]] = {}
        self._locations: dict[fx.Node, frozenset[fx.Node]] = {}
        # location -> the values reaching it (an insertion-ordered set).
        self._members: dict[fx.Node, dict[fx.Node, None]] = {}
        # location -> the nodes writing it, in graph order; writer -> the locations it writes.
        self._writers: dict[fx.Node, list[fx.Node]] = {}
        self._written: dict[fx.Node, frozenset[fx.Node]] = {}
        for node in graph.nodes:
            if _is_value(node):
                self._add(node, self._points_to_of(node))
            self._record_writes(node)

    # ----------------------------------------------------------------- build

    def _known(self, nodes: Iterable[fx.Node]) -> tuple[fx.Node, ...]:
        return _dedupe(node for node in nodes if node in self._locations)

    def _points_to_of(self, node: fx.Node) -> tuple[fx.Node, ...]:
        target = node.target
        if node.op != "call_function":
            return ()
        if target is operator.getitem:
            source, item = node.args[0], node.args[1]
            if not isinstance(source, fx.Node):
                return ()
            if source in self._item_parents and isinstance(item, int):
                return self._item_parents[source][item]
            # A list whose op aliased an argument is a list of views: each element aliases it.
            return (source,) if self._parents.get(source) else ()
        if not isinstance(target, OpOverload):
            return ()
        per_return = tuple(
            self._known(n for position in positions for n in _nodes_in(argument_value(target, node, position)))
            for positions in return_alias_positions(target)
        )
        if len(per_return) == 1:
            return per_return[0]
        if len(per_return) > 1:
            self._item_parents[node] = per_return
        return _dedupe(n for parents in per_return for n in parents)

    def _add(self, node: fx.Node, parents: tuple[fx.Node, ...]) -> None:
        self._parents[node] = parents
        if not parents:
            locations = frozenset((node,))
        else:
            first = self._locations[parents[0]]
            # Sharing the parent's set object keeps a long view chain linear.
            if all(self._locations[p] is first for p in parents[1:]):
                locations = first
            else:
                locations = first.union(*(self._locations[p] for p in parents[1:]))
        self._locations[node] = locations
        for location in locations:
            self._members.setdefault(location, {})[node] = None

    def _record_writes(self, node: fx.Node) -> None:
        target = node.target
        if node.op != "call_function" or not isinstance(target, OpOverload):
            return
        positions = written_positions(target, node.args)
        written = [n for position in positions for n in _nodes_in(argument_value(target, node, position))]
        locations = frozenset(loc for n in written if n in self._locations for loc in self._locations[n])
        if not locations:
            return
        self._written[node] = locations
        for location in locations:
            self._writers.setdefault(location, []).append(node)

    # ----------------------------------------------------------------- queries

    def location_of(self, value: fx.Node) -> frozenset[fx.Node]:
        """The memory locations ``value`` may occupy (empty for a value holding no tensor)."""
        return self._locations.get(value, frozenset())

    def points_to(self, value: fx.Node) -> tuple[fx.Node, ...]:
        """The values ``value`` directly aliases: a view's base, an in-place result's argument."""
        return self._parents.get(value, ())

    def may_alias(self, a: fx.Node, b: fx.Node) -> bool:
        """Whether ``a`` and ``b`` may share memory."""
        return not self.location_of(a).isdisjoint(self.location_of(b))

    def aliases_of(self, value: fx.Node) -> set[fx.Node]:
        """Every value sharing a memory location with ``value``, ``value`` included."""
        found: set[fx.Node] = set()
        for location in self.location_of(value):
            found.update(self._members[location])
        return found

    def writes_to(self, location: fx.Node) -> list[fx.Node]:
        """The nodes writing ``location`` (through any alias of it), in graph order."""
        return list(self._writers.get(location, ()))

    def writes_of(self, node: fx.Node) -> frozenset[fx.Node]:
        """The locations ``node`` writes (empty for a node writing nothing)."""
        return self._written.get(node, frozenset())

    def is_written(self, value: fx.Node) -> bool:
        """Whether any node writes a location of ``value``."""
        return any(location in self._writers for location in self.location_of(value))
