"""Functionalization: rewrite an ATen-level FX graph so that no op mutates anything.

``functionalize(gm)`` takes a graph as ``make_fx`` traces it (placeholders
and ops carrying fake values in ``node.meta["val"]``) and returns it with:

- every in-place and ``out=`` op replaced by its functional variant
  (``FUNCTIONAL_RULES``, or the naming convention ``foo_`` -> ``foo``,
  ``foo.out`` -> the ``foo`` overload taking the same non-``out`` arguments);
- every write through a view turned into a scatter of the new value into the
  view's base (``INVERSE_VIEWS``), up the view chain to the memory's root;
- every later read of the root or of any view of it reading the new value:
  views are taken again from the root's latest value (*view replay*), while
  ops placed before the write keep the old one;
- metadata mutations of intermediates (``t_``, ``transpose_``, ``as_strided_``
  ...) replaced by the out-of-place view, which later reads see; ``resize_``
  (also issued for an ``out=`` op resizing its output, see ``meta.out_resize``)
  becomes an ``as_strided`` view of the memory, after growing it into a larger
  buffer (the old data at its place) when it reaches past the memory's end;
- the final value of each data-mutated placeholder appended to the outputs,
  in placeholder order, with ``gm.meta["mutated_inputs"]`` listing their
  placeholder indices.

Guarantees: no ``call_function`` left has ``_schema.is_mutable`` (nor an
unannotated write, see ``meta.alias.UNANNOTATED_WRITES``); new nodes carry
``meta["val"]``; random ops stay random (their functional overload draws the
same numbers); dead code is removed; the graph is linted and recompiled.

Not supported (NotImplementedError naming the op and its source line): a
metadata mutation of a placeholder (the MetadataMutation layer removes those),
writes to ``get_attr`` constants, ``out=`` resizing its output within the op, mutating ops
with no functional variant (custom ops mutating their inputs ...), writes through a view that
changes dtype with no ``INVERSE_VIEWS`` entry. Shapes are static: the scatter
arguments are read off the traced fake values.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.fx as fx
from torch._ops import OpOverload
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import guard_or_false, guard_or_true

from aot.compile.function_outputs import mark_function_arguments, record_dead_arguments
from meta import symbolic
from meta.alias import AliasAnalysis, argument_value, return_alias_positions, written_positions
from meta.errors import DynamicShapesUnsupportedError
from meta.storage import expanded_dims, overlaps_itself, storage_extent

__all__ = ["FUNCTIONAL_RULES", "INVERSE_VIEWS", "ViewCall", "functional_variant", "functionalize"]

aten = torch.ops.aten

# ------------------------------------------------------------------ op -> functional variant

# Mutating ops whose functional variant the naming convention does not find, or finds a worse one.
# The variant takes the same arguments in the same positions (minus ``out=``) and returns the op's
# fresh returns, then the new value of each written argument in schema order.
FUNCTIONAL_RULES: dict[OpOverload, OpOverload] = {
    # The new value does not depend on the old data: saying so lets the old value die early.
    aten.zero_.default: aten.zeros_like.default,
    aten.fill_.Scalar: aten.full_like.default,
    aten.normal_.default: aten.normal_functional.default,
    # Training-mode batch norm writes running_mean/running_var; the functional twin returns their new values.
    aten.native_batch_norm.default: aten._native_batch_norm_legit_functional.default,
    aten._native_batch_norm_legit.default: aten._native_batch_norm_legit_functional.default,
    aten._batch_norm_with_update.default: aten._batch_norm_with_update_functional.default,
    # rrelu writes the noise it draws (and self, for the in-place one): the twin returns it as noise_out.
    aten.rrelu_with_noise.default: aten.rrelu_with_noise_functional.default,
    aten.rrelu_with_noise_.default: aten.rrelu_with_noise_functional.default,
}


def _signature(arguments: Any) -> list[tuple[str, str]]:
    # Sorted: polygamma_(self, n) -> polygamma(n, self) is the same call, bound by name.
    return sorted((arg.name, str(arg.type)) for arg in arguments)


def _is_out(arg: Any) -> bool:
    return bool(arg.kwarg_only and arg.alias_info is not None and arg.alias_info.is_write)


@functools.cache
def functional_variant(op: OpOverload) -> OpOverload | None:
    """The non-mutating op computing what ``op`` writes, or ``None`` when there is none.

    ``FUNCTIONAL_RULES`` first; otherwise ``foo_.X`` -> the ``foo`` overload with
    the same arguments, and ``foo.out`` -> the ``foo`` overload with the
    arguments that are not ``out=`` (``copy_`` -> ``copy``, ``add.out`` ->
    ``add.Tensor``, ``bernoulli_.float`` -> ``bernoulli.p``, ``t_`` -> ``t``).
    """
    if op in FUNCTIONAL_RULES:
        return FUNCTIONAL_RULES[op]
    schema = op._schema
    has_outs = any(_is_out(arg) for arg in schema.arguments)
    name = schema.name.split("::")[-1]
    packet = getattr(getattr(torch.ops, op.namespace), name if has_outs else name.removesuffix("_"), None)
    if packet is None:
        return None
    wanted = _signature(arg for arg in schema.arguments if not _is_out(arg))
    matches = [
        candidate
        for candidate in (getattr(packet, overload) for overload in packet.overloads())
        if not candidate._schema.is_mutable and _signature(candidate._schema.arguments) == wanted
    ]
    # Same overload name first (index_put_.default -> index_put.default, not .hacked_twin).
    matches.sort(key=lambda candidate: candidate._overloadname != op._overloadname)
    return matches[0] if matches else None


def _bind(op: OpOverload, variant: OpOverload, node: fx.Node) -> tuple[list[Any], dict[str, Any]]:
    """The arguments for ``variant`` from ``node``'s call of ``op``, dropping ``out=``.

    A variant the convention found has the same argument names (bound by name);
    a ``FUNCTIONAL_RULES`` variant the same positions. A defaulted argument is
    spelled out when the variant has no default for it (``bernoulli_(x)`` ->
    ``bernoulli.p(x, 0.5)``) or a later positional argument needs its slot.
    """
    op_args = [arg for arg in op._schema.arguments if not _is_out(arg)]
    given: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    for position, arg in enumerate(op._schema.arguments):
        if not arg.kwarg_only and position < len(node.args):
            given[arg.name] = node.args[position]
        elif arg.name in node.kwargs:
            given[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            defaults[arg.name] = arg.default_value
    variant_args = variant._schema.arguments
    by_name = {arg.name for arg in variant_args} >= {arg.name for arg in op_args}
    # Not strict: a variant may take more arguments than the op (zeros_like's dtype, layout ...).
    source = {v.name: v.name if by_name else o.name for v, o in zip(variant_args, op_args, strict=False)}
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    skipped: list[Any] = []  # defaulted positional slots, filled if a later positional argument is given
    for arg in variant_args:
        name = source.get(arg.name, "")
        if name in given or (name in defaults and not arg.has_default_value()):
            value = given[name] if name in given else defaults[name]
            if arg.kwarg_only:
                kwargs[arg.name] = value
            else:
                args += [*skipped, value]
                skipped.clear()
        elif not arg.kwarg_only:
            skipped.append(defaults[name] if name in defaults else arg.default_value)
    return args, kwargs


# ------------------------------------------------------------------ view -> inverse (scatter)


@dataclass(frozen=True)
class ViewCall:
    """One view step being inverted: ``view = op(base, *args)``, then ``[item]`` for list-returning views."""

    args: tuple[Any, ...]
    item: int | None
    base_val: torch.Tensor
    view_val: torch.Tensor

    def arg(self, position: int, default: Any) -> Any:
        return self.args[position] if position < len(self.args) else default


Emit = Callable[..., fx.Node]
# (emit, current base value, new value of the view, the view's call) -> new value of the base
Scatter = Callable[[Emit, fx.Node, fx.Node, ViewCall], fx.Node]


def _reshape_back(emit: Emit, base: fx.Node, view: fx.Node, call: ViewCall) -> fx.Node:
    shape = list(call.base_val.shape)
    try:
        return emit(aten.view.default, view, shape)
    except RuntimeError:
        # The new value's strides no longer allow a view (an op changed its layout): copy into shape.
        contiguous = emit(aten.clone.default, view, memory_format=torch.contiguous_format)
        return emit(aten._unsafe_view.default, contiguous, shape)


def _inverse_permutation(dims: list[int]) -> list[int]:
    inverse = [0] * len(dims)
    for position, dim in enumerate(dims):
        inverse[dim % len(dims)] = position
    return inverse


def _split_scatter(emit: Emit, base: fx.Node, view: fx.Node, call: ViewCall) -> fx.Node:
    sizes, dim = call.arg(0, None), call.arg(1, 0)
    assert call.item is not None
    if isinstance(sizes, (list, tuple)):  # split_with_sizes
        start = sum(sizes[: call.item])
    else:  # split: equal chunks, the last one shorter
        start = call.item * sizes
    end = start + call.view_val.shape[dim]
    return emit(aten.slice_scatter.default, base, view, dim, start, end)


# A view op without an entry (``as_strided``, ``expand``, ``unfold`` ...) is inverted by
# ``as_strided_scatter`` into the memory's root, with the view's traced size, stride and offset:
# exact for any view that keeps the root's dtype, but opaque to backends.
INVERSE_VIEWS: dict[OpOverload, Scatter] = {
    # view op                         new base, from: emit e, base b, view's new value v, view call c
    aten.alias.default: lambda e, b, v, c: v,
    aten.detach.default: lambda e, b, v, c: v,
    aten.lift_fresh.default: lambda e, b, v, c: v,
    aten.t.default: lambda e, b, v, c: e(aten.t.default, v),
    aten.transpose.int: lambda e, b, v, c: e(aten.transpose.int, v, *c.args),
    aten.permute.default: lambda e, b, v, c: e(aten.permute.default, v, _inverse_permutation(c.args[0])),
    aten.unsqueeze.default: lambda e, b, v, c: e(aten.squeeze.dim, v, c.args[0]),
    aten.squeeze.default: _reshape_back,
    aten.squeeze.dim: _reshape_back,
    aten.squeeze.dims: _reshape_back,
    aten.view.default: _reshape_back,
    aten._reshape_alias.default: _reshape_back,
    aten.view.dtype: lambda e, b, v, c: e(aten.view.dtype, v, c.base_val.dtype),
    aten.view_as_real.default: lambda e, b, v, c: e(aten.view_as_complex.default, v),
    aten.view_as_complex.default: lambda e, b, v, c: e(aten.view_as_real.default, v),
    aten._conj.default: lambda e, b, v, c: e(aten._conj.default, v),
    aten._neg_view.default: lambda e, b, v, c: e(aten._neg_view.default, v),
    aten.select.int: lambda e, b, v, c: e(aten.select_scatter.default, b, v, *c.args),
    aten.slice.Tensor: lambda e, b, v, c: e(aten.slice_scatter.default, b, v, *c.args),
    aten.diagonal.default: lambda e, b, v, c: e(aten.diagonal_scatter.default, b, v, *c.args),
    aten.unbind.int: lambda e, b, v, c: e(aten.select_scatter.default, b, v, c.arg(0, 0), c.item),
    aten.split.Tensor: _split_scatter,
    aten.split.sizes: _split_scatter,
    aten.split_with_sizes.default: _split_scatter,
}


# Sympy's integer division and remainder, as the graph computes them on SymInts.
_SIZE_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "FloorDiv": operator.floordiv,
    "Mod": operator.mod,
    "PythonMod": operator.mod,
    "Max": torch.sym_max,
    "Min": torch.sym_min,
}

# ------------------------------------------------------------------ the pass


@dataclass(frozen=True)
class _Step:
    """How a view is taken again from its parent: ``op(parent, *args, **kwargs)``; ``op=None`` is the identity."""

    parent: fx.Node
    op: Any
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


def _where(node: fx.Node) -> str:
    trace = node.meta.get("stack_trace")
    lines = [line.strip() for line in trace.strip().splitlines()] if isinstance(trace, str) and trace.strip() else []
    return f"node {node.name} ({node.target})" + (f", from `{lines[-1]}`" if lines else "")


def _val(node: fx.Node) -> Any:
    if "val" not in node.meta:
        raise ValueError(f"functionalize needs node.meta['val'] on {node.name}: trace the graph with make_fx")
    return node.meta["val"]


def _fake_mode(graph: fx.Graph) -> FakeTensorMode:
    vals = [node.meta.get("val") for node in graph.nodes]
    modes = {id(val.fake_mode): val.fake_mode for val in vals if isinstance(val, FakeTensor)}
    # make_fx on real tensors gives each value a fake mode of its own: new nodes then get one more.
    return next(iter(modes.values())) if len(modes) == 1 else symbolic.fake_mode()


def _refake(mode: FakeTensorMode, val: torch.Tensor) -> torch.Tensor:
    """A fake of ``mode`` with ``val``'s dtype, device, size, stride and storage offset."""
    with mode:
        storage = torch.empty(storage_extent(val)[1], dtype=val.dtype, device=val.device)
        return storage.as_strided(val.shape, val.stride(), val.storage_offset())


class _Functionalizer:
    """Copies the graph node by node into a new one, tracking each memory root's latest value."""

    def __init__(self, gm: fx.GraphModule, analysis: AliasAnalysis) -> None:
        self.old = gm.graph
        self.analysis = analysis
        self.graph = fx.Graph()
        self.graph.set_codegen(self.old._codegen)
        self.fake_mode = _fake_mode(self.old)
        # Every old node is a root (its own memory, or not a tensor) or a view of a parent.
        self.value: dict[fx.Node, Any] = {}  # root -> its latest value in the new graph
        self.version: dict[fx.Node, int] = {}  # root -> number of writes so far
        self.root: dict[fx.Node, fx.Node] = {}
        self.steps: dict[fx.Node, _Step] = {}
        self.replayed: dict[fx.Node, tuple[int, Any]] = {}  # view -> (root version, value taken then)
        self.renamed: dict[fx.Node, fx.Node] = {}  # a metadata-mutated value -> the node standing for it now
        self.items: dict[fx.Node, list[tuple[str, Any]]] = {}  # multi-return mutating op -> per return
        self.culprit: fx.Node | None = None
        self.placeholders: list[fx.Node] = []
        self.new_placeholders: list[fx.Node] = []
        self.sizes: dict[Any, Any] = {}  # symbolic size -> the node of the new graph computing it

    # ---------------------------------------------------------------- values

    def resolve(self, node: fx.Node) -> fx.Node:
        while node in self.renamed:
            node = self.renamed[node]
        return node

    def read(self, arg: Any) -> Any:
        """``arg`` with each old node replaced by its latest value."""
        return fx.map_arg(arg, lambda node: self.current(self.resolve(node)))

    def current(self, node: fx.Node) -> Any:
        """The latest value of ``node``: a root's value, or its view chain taken again from the root."""
        if node in self.value:
            return self.value[node]
        version = self.version[self.root[node]]
        stale: list[fx.Node] = []
        while node not in self.value and self.replayed.get(node, (-1,))[0] != version:
            stale.append(node)
            node = self.steps[node].parent
        value = self.value[node] if node in self.value else self.replayed[node][1]
        for view in reversed(stale):
            step = self.steps[view]
            if step.op is not None:
                value = self.emit(step.op, value, *self.read(step.args), **self.read(dict(step.kwargs)))
            self.replayed[view] = (version, value)
        return value

    def emit(self, op: Any, *args: Any, **kwargs: Any) -> fx.Node:
        """Add ``op(*args, **kwargs)`` to the new graph, with its fake value."""
        args, kwargs = fx.node.map_aggregate((args, kwargs), self._size_node)
        node = self.graph.call_function(op, tuple(args), kwargs)
        vals = fx.map_arg((args, kwargs), self._val_here)
        try:
            with self.fake_mode:
                node.meta["val"] = op(*vals[0], **vals[1])
        except Exception:
            self.graph.erase_node(node)
            raise
        if self.culprit is not None and "stack_trace" in self.culprit.meta:
            node.meta["stack_trace"] = self.culprit.meta["stack_trace"]
        return node

    def _size_node(self, value: Any) -> Any:
        """A symbolic size (a traced view's size, stride or offset) as a node of the new graph computing it
        from the placeholders: as a constant, the graph's code would name a symbol it has no value for."""
        if not isinstance(value, torch.SymInt) or not value.node.expr.free_symbols:
            return value
        if value.node.expr in self.sizes:
            return self.sizes[value.node.expr]
        # Computed right after the placeholders: in the forward, where a partitioner saves sizes as ints
        # (read in the backward off a saved input, they would need the input itself saved).
        anchor = self.new_placeholders[-1].next if self.new_placeholders else next(iter(self.graph.nodes))
        with self.graph.inserting_before(anchor):
            return self._expression(value.node.expr)

    def _expression(self, expr: Any) -> Any:
        import sympy

        if expr in self.sizes:
            return self.sizes[expr]
        if expr.is_Integer:
            return int(expr)
        if expr.is_Symbol:
            node = self._symbol(expr)
        else:
            ops = {sympy.Add: operator.add, sympy.Mul: operator.mul}
            op = ops.get(type(expr)) or _SIZE_OPS.get(type(expr).__name__)
            if op is None:
                raise DynamicShapesUnsupportedError(f"a size {expr} written into the graph")
            terms = [self._expression(arg) for arg in expr.args]
            node = terms[0]
            for term in terms[1:]:
                node = self.emit(op, node, term)
        self.sizes[expr] = node
        return node

    def _symbol(self, symbol: Any) -> fx.Node:
        """A node reading ``symbol`` off the first placeholder it is a size, stride or offset of."""
        for placeholder in self.new_placeholders:
            val = placeholder.meta.get("val")
            if isinstance(val, torch.SymInt) and val.node.expr == symbol:
                return placeholder
            if not isinstance(val, torch.Tensor):
                continue
            for reads, values in ((aten.sym_size.int, val.shape), (aten.sym_stride.int, val.stride())):
                for dim, size in enumerate(values):
                    if isinstance(size, torch.SymInt) and size.node.expr == symbol:
                        return self.emit(reads, placeholder, dim)
            offset = val.storage_offset()
            if isinstance(offset, torch.SymInt) and offset.node.expr == symbol:
                return self.emit(aten.sym_storage_offset.default, placeholder)
        raise DynamicShapesUnsupportedError(f"a size ({symbol}) that no input of the graph has")

    def _val_here(self, node: fx.Node) -> Any:
        """``node``'s fake value, made in this pass's fake mode if another mode made it."""
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and not (isinstance(val, FakeTensor) and val.fake_mode is self.fake_mode):
            val = node.meta["val"] = _refake(self.fake_mode, val)
        return val

    def add_root(self, old: fx.Node, new: Any) -> None:
        self.value[old] = new
        self.version[old] = 0
        self.root[old] = old

    def add_view(self, old: fx.Node, step: _Step) -> None:
        self.steps[old] = step
        self.root[old] = self.root[step.parent]

    # ---------------------------------------------------------------- nodes

    def run(self) -> list[int]:
        """Fill the new graph; returns the indices of the data-mutated placeholders."""
        for node in self.old.nodes:
            self.culprit = node
            mark_function_arguments(node, self.read)  # the values an autograd.Function got, as it got them
            if node.op == "output":
                return self.output(node)
            target = node.target
            if node.op in ("placeholder", "get_attr"):
                copied = self.graph.node_copy(node, self.read)
                if node.op == "placeholder":
                    self.placeholders.append(node)
                    self.new_placeholders.append(copied)
                self.add_root(node, copied)
            elif target is operator.getitem and node.args[0] in self.items:
                self.mutation_item(node)
            elif isinstance(target, OpOverload) and written_positions(target, node.args):
                if target is aten.set_.source_Tensor:
                    self.set_storage(node)
                elif target is aten.resize_.default:
                    self.resize(node)
                elif torch.Tag.inplace_view in target.tags:
                    self.metadata_mutation(node, target)
                else:
                    self.mutation(node, target)
            else:
                self.pure(node)
        raise AssertionError("graph without an output node")

    def pure(self, node: fx.Node) -> None:
        parents = self.analysis.points_to(node)
        if not parents:
            self.add_root(node, self.graph.node_copy(node, self.read))
            return
        if len(parents) != 1 or not node.args or node.args[0] is not parents[0]:
            if self.analysis.is_written(node):
                raise NotImplementedError(f"functionalize: cannot replay {_where(node)}: it aliases {parents}")
            self.add_root(node, self.graph.node_copy(node, self.read))
            return
        parent = self.resolve(parents[0])
        if node.target is operator.getitem:
            self.add_view(node, _Step(parent, operator.getitem, tuple(node.args[1:])))
        else:
            self.add_view(node, _Step(parent, node.target, tuple(node.args[1:]), dict(node.kwargs)))
        # First taken under its own name and meta; replays after a write get fresh nodes.
        self.replayed[node] = (self.version[self.root[node]], self.graph.node_copy(node, self.read))

    def resize(self, node: fx.Node) -> None:
        """``t.resize_(size)``: from here on ``t`` is a strided view of its memory, grown first if needed."""
        val = _val(node)
        step_args = (list(val.shape), list(val.stride()), val.storage_offset())
        target = self.resolve(cast(fx.Node, node.args[0]))
        root = self.root[target]
        end = storage_extent(val)[1]
        # A graph input's storage is grown by the MetadataMutation layer before the call.
        if root.op != "placeholder" and end > storage_extent(_val(root))[1]:
            self.grow(root, end)
        self.add_view(node, _Step(target, aten.as_strided.default, step_args))
        self.renamed[target] = node

    def grow(self, root: fx.Node, end: int) -> None:
        """Eager's ``resize_`` past the end of a storage reallocates it, keeping its data: from here on
        ``root``'s memory is a buffer of ``end`` elements, and ``root`` a strided view of it."""
        root_val = _val(root)
        # A key for the buffer in this pass's maps, which are keyed by nodes of the old graph.
        buffer_key = fx.Graph().placeholder(f"grown_{root.name}")
        with self.fake_mode:
            buffer_key.meta["val"] = torch.empty(end, dtype=root_val.dtype, device=root_val.device)
        # The new memory is uninitialized in eager: zeros are one of its possible contents.
        zeros = self.emit(aten.zeros.default, [end], dtype=root_val.dtype, device=root_val.device)
        geometry = (list(root_val.shape), list(root_val.stride()), root_val.storage_offset())
        buffer = self.emit(aten.as_strided_scatter.default, zeros, self.value.pop(root), *geometry)
        self.add_root(buffer_key, buffer)
        self.version[buffer_key] = self.version[root] + 1  # every view taken so far is stale
        for node, node_root in self.root.items():
            if node_root is root:
                self.root[node] = buffer_key
        self.steps[root] = _Step(buffer_key, aten.as_strided.default, geometry)

    def _geometry_changed(self, node: fx.Node, change: str) -> fx.Node:
        """The tensor whose geometry ``node`` changes in place (``change``: how), never a graph input's."""
        target = self.resolve(cast(fx.Node, node.args[0]))
        tensor = target
        while tensor in self.steps and self.steps[tensor].op is None:  # an in-place result is its argument
            tensor = self.steps[tensor].parent
        if tensor.op == "placeholder":
            raise NotImplementedError(
                f"functionalize: {_where(node)} {change} graph input {tensor.name}; "
                "the MetadataMutation layer must remove it first"
            )
        return target

    def set_storage(self, node: fx.Node) -> None:
        """``t.set_(source)``: from here on ``t`` is ``source`` (its memory and geometry)."""
        target = self._geometry_changed(node, "sets the storage of")
        # An alias of source, not source itself: a later metadata change of t leaves source's geometry alone.
        self.add_view(node, _Step(self.resolve(cast(fx.Node, node.args[1])), aten.alias.default))
        self.renamed[target] = node

    def metadata_mutation(self, node: fx.Node, op: OpOverload) -> None:
        target = self._geometry_changed(node, "changes the metadata of")
        view_op = functional_variant(op)
        if view_op is None:
            raise NotImplementedError(f"functionalize: no out-of-place view for {_where(node)}")
        self.add_view(node, _Step(target, view_op, tuple(node.args[1:]), dict(node.kwargs)))
        self.renamed[target] = node

    def mutation(self, node: fx.Node, op: OpOverload) -> None:
        functional = functional_variant(op)
        if functional is None:
            raise NotImplementedError(f"functionalize: {op} has no functional variant ({_where(node)})")
        positions = written_positions(op, node.args)
        aliases = return_alias_positions(op)
        fresh = [ret for ret, aliased in enumerate(aliases) if not aliased]
        num_results = len(functional._schema.returns)
        if num_results != len(fresh) + len(positions):
            raise NotImplementedError(f"functionalize: {functional} does not return what {_where(node)} writes")
        args, kwargs = _bind(op, functional, node)
        args, kwargs = self.read(args), self.read(kwargs)
        if functional is aten.copy.default and self._dtype_view(cast(fx.Node, node.args[0])):
            # aten.copy clones its destination's whole storage in the destination's dtype, which a view of
            # another dtype need not fill whole (a complex view of an odd number of floats): a clone of just
            # the view is the same destination.
            args = [self.emit(aten.clone.default, args[0]), *args[1:]]
        result = self.emit(functional, *args, **kwargs)

        def result_item(k: int) -> fx.Node:
            return result if num_results == 1 else self.emit(operator.getitem, result, k)

        for k, position in enumerate(positions):
            written = argument_value(op, node, position)
            if isinstance(written, fx.Node):
                self.write(written, result_item(len(fresh) + k))
            elif isinstance(written, (list, tuple)):
                new_list = result_item(len(fresh) + k)
                for j, element in enumerate(written):
                    self.write(cast(fx.Node, element), self.emit(operator.getitem, new_list, j))

        returns: list[tuple[str, Any]] = [
            ("alias", self.resolve(cast(fx.Node, argument_value(op, node, aliased[0]))))
            if aliased
            else ("fresh", fresh.index(ret))
            for ret, aliased in enumerate(aliases)
        ]
        if len(returns) == 1 and returns[0][0] == "alias":
            # An in-place op returns its argument: later reads of the result read the argument.
            self.add_view(node, _Step(returns[0][1], None))
        elif len(returns) == 1:
            self.add_root(node, result_item(0))
        else:
            self.items[node] = returns
            self.add_root(node, result)

    def _dtype_view(self, node: fx.Node) -> bool:
        """Whether ``node`` is a view of memory whose root has another element size."""
        node = self.resolve(node)
        root_val, val = _val(self.root[node]), _val(node)
        return isinstance(root_val, torch.Tensor) and root_val.element_size() != val.element_size()

    def mutation_item(self, node: fx.Node) -> None:
        source = cast(fx.Node, node.args[0])
        kind, what = self.items[source][cast(int, node.args[1])]
        if kind == "alias":
            self.add_view(node, _Step(what, None))
        else:
            fresh = self.emit(operator.getitem, self.value[source], what)
            fresh._rename(node.name)
            self.add_root(node, fresh)

    # ---------------------------------------------------------------- writes

    def write(self, target: fx.Node, new_value: fx.Node) -> None:
        """Make ``new_value`` the value of ``target``: scatter it up the view chain into the root."""
        target = self.resolve(target)
        root = self.root[target]
        if root.op == "get_attr":
            raise NotImplementedError(f"functionalize: {self._who()} writes constant {root.name}")
        new_value = self._cast_like(new_value, _val(target))
        node = target
        while node is not root:
            step = self.steps[node]
            if step.op is None:
                node = step.parent
                continue
            base, op, args, item = step.parent, step.op, step.args, None
            if op is operator.getitem:  # an element of a list of views: invert the op that made the list
                item = cast(int, step.args[0])
                list_step = self.steps[base]
                base, op, args = list_step.parent, list_step.op, list_step.args
            inverse = INVERSE_VIEWS.get(op)
            if inverse is None:
                # No inverse for this view (as_strided, expand, unfold ...): scatter by strides into the
                # highest ancestor of the same dtype, then go on up from there.
                anchor = self._same_dtype_ancestor(node, root)
                if anchor is not root:
                    # The view may reach memory outside the ancestor's elements (``as_strided`` takes
                    # absolute offsets): scatter into the root's memory seen in the view's dtype.
                    new_value = self._scatter_through_root(node, new_value, root)
                    break
                new_value = self._scatter_by_strides(anchor, node, new_value, root)
                node = anchor
                continue
            call = ViewCall(tuple(self.read(args)), item, _val(base), _val(node))
            new_value = inverse(self.emit, self.current(base), new_value, call)
            node = base
        self.value[root] = self._restride_like(new_value, _val(root))
        self.version[root] += 1

    def _same_dtype_ancestor(self, view: fx.Node, root: fx.Node) -> fx.Node:
        dtype = _val(view).dtype
        node = view
        while node is not root:
            parent_val = _val(self.steps[node].parent)
            if not isinstance(parent_val, torch.Tensor) or parent_val.dtype != dtype:
                break
            node = self.steps[node].parent
        if node is view:
            raise NotImplementedError(f"functionalize: no inverse for the view {_where(view)} written by {self._who()}")
        return node

    def _replayed_geometry(self, anchor: fx.Node, view: fx.Node) -> tuple[torch.Tensor, torch.Tensor]:
        """(a fresh fake of ``anchor``, ``view`` taken again from it): make_fx on real tensors records
        values without their storage offsets."""
        steps = []
        node = view
        while node is not anchor:
            steps.append(self.steps[node])
            node = steps[-1].parent
        anchor_val = _refake(self.fake_mode, _val(anchor))
        val = anchor_val
        with self.fake_mode:
            for step in reversed(steps):
                args, kwargs = fx.map_arg((step.args, dict(step.kwargs)), lambda arg: arg.meta["val"])
                val = val if step.op is None else step.op(val, *args, **kwargs)
        if val.is_conj() or val.is_neg():
            raise NotImplementedError(f"functionalize: no inverse for the view {_where(view)} written by {self._who()}")
        return anchor_val, val

    def _scatter_through_root(self, view: fx.Node, new_value: fx.Node, root: fx.Node) -> fx.Node:
        """The root's new value after ``view``, of another dtype, took ``new_value``: the root's memory
        stretch, seen in the view's dtype, takes it by strides, then is seen in the root's dtype again."""
        root_val, val = self._replayed_geometry(root, view)
        start, end = storage_extent(root_val)
        root_size, view_size = root_val.element_size(), val.element_size()
        view_start, view_end = (bound * view_size for bound in storage_extent(val))
        current = self.value[root]
        current_offset = _val(current).storage_offset()
        aligned = all(n * root_size % view_size == 0 for n in (start, end, current_offset))
        if not aligned or view_start < start * root_size or view_end > end * root_size:
            raise NotImplementedError(f"functionalize: no inverse for the view {_where(view)} written by {self._who()}")
        stretch = self.emit(aten.as_strided.default, current, [end - start], [1], current_offset)
        if val.dtype != root_val.dtype:
            stretch = self.emit(aten.view.dtype, stretch, val.dtype)
        offset = val.storage_offset() + (current_offset - start) * root_size // view_size
        stretch = self._scatter_geometry(stretch, val, new_value, offset)
        if val.dtype != root_val.dtype:
            stretch = self.emit(aten.view.dtype, stretch, root_val.dtype)
        geometry = (list(root_val.shape), list(root_val.stride()), current_offset)
        return self.emit(aten.as_strided.default, stretch, *geometry)

    def _scatter_by_strides(self, anchor: fx.Node, view: fx.Node, new_value: fx.Node, root: fx.Node) -> fx.Node:
        """The new value of ``anchor`` after ``view`` (a view of it, same dtype) took ``new_value``."""
        anchor_val, val = self._replayed_geometry(anchor, view)
        if val.dtype != anchor_val.dtype:
            raise NotImplementedError(f"functionalize: no inverse for the view {_where(view)} written by {self._who()}")
        current = self.value[root] if anchor is root else self.current(anchor)
        offset = val.storage_offset() - anchor_val.storage_offset() + _val(current).storage_offset()
        return self._scatter_geometry(current, val, new_value, offset)

    def _scatter_geometry(self, current: fx.Node, val: torch.Tensor, new_value: fx.Node, offset: int) -> fx.Node:
        """``current`` with its memory at ``val``'s size and strides from storage ``offset`` set to ``new_value``."""
        size, stride = list(val.shape), list(val.stride())
        expanded = expanded_dims(size, stride)
        if expanded:
            # An expanded view: each memory element written once, from an index whose value changed.
            old = self.emit(aten.as_strided.default, current, list(size), list(stride), offset)
            changed = self.emit(aten._to_copy.default, self.emit(aten.ne.Tensor, new_value, old), dtype=torch.int8)
            for dim in expanded:
                index = self.emit(aten.argmax.default, changed, dim, True)
                new_value = self.emit(aten.gather.default, new_value, dim, index)
                changed = self.emit(aten.gather.default, changed, dim, index)
                size[dim] = 1
        if overlaps_itself(size, stride):
            new_value = self._agree_on_shared_elements(current, new_value, size, stride, offset)
        return self.emit(aten.as_strided_scatter.default, current, new_value, size, stride, offset)

    def _agree_on_shared_elements(
        self, current: fx.Node, new_value: fx.Node, size: list[int], stride: list[int], offset: int
    ) -> fx.Node:
        """``new_value`` for a view whose indices share memory elements (an ``unfold``, an ``as_strided``),
        each element taking the value of its last index whose value changed, at every index reaching it:
        the scatter then writes one value per element whatever order it writes them in, as eager did."""
        old = self.emit(aten.as_strided.default, current, size, stride, offset)
        flat_new = self.emit(aten.reshape.default, new_value, [-1])
        changed = self.emit(aten.reshape.default, self.emit(aten.ne.Tensor, new_value, old), [-1])
        numel = _val(flat_new).numel()
        position = self.emit(aten.arange.default, numel, dtype=torch.int64, device=_val(current).device)
        end = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True)) + 1
        memory = self.emit(aten.arange.default, end, dtype=torch.int64, device=_val(current).device)
        element = self.emit(aten.as_strided.default, memory, size, stride, offset)
        element = self.emit(aten.reshape.default, element, [-1])
        unchanged = self.emit(aten.full.default, [end], -1, dtype=torch.int64, device=_val(current).device)
        writer = self.emit(aten.where.ScalarOther, changed, position, -1)
        last_writer = self.emit(aten.scatter_reduce.two, unchanged, 0, element, writer, "amax")
        chosen = self.emit(aten.index.Tensor, last_writer, [element])
        source = self.emit(aten.where.self, self.emit(aten.ge.Scalar, chosen, 0), chosen, position)
        return self.emit(aten.reshape.default, self.emit(aten.index.Tensor, flat_new, [source]), size)

    def _restride_like(self, new_value: fx.Node, like: Any) -> fx.Node:
        """``new_value`` in ``like``'s strides: views replayed on it (``as_strided``, ``view``) assume them."""
        val = new_value.meta.get("val")
        if not isinstance(val, torch.Tensor) or not isinstance(like, torch.Tensor):
            return new_value
        # (Data-dependent sizes, unknown to the trace: compared as if above 1, strides as if unequal: copied.)
        strides = zip(like.shape, like.stride(), val.stride(), strict=True)
        if all(guard_or_false(a == b) for size, a, b in strides if guard_or_true(size > 1)):
            return new_value
        if not is_non_overlapping_and_dense_or_false(like):  # an expanded root: there is no layout to copy into
            return new_value
        empty = self.emit(
            aten.empty_strided.default, list(like.shape), list(like.stride()), dtype=like.dtype, device=like.device
        )
        return self.emit(aten.copy.default, empty, new_value)

    def _who(self) -> str:
        return _where(self.culprit) if self.culprit is not None else "the graph"

    def _cast_like(self, new_value: fx.Node, like: torch.Tensor) -> fx.Node:
        val = new_value.meta.get("val")
        if not isinstance(val, torch.Tensor) or not isinstance(like, torch.Tensor):
            return new_value
        if val.shape != like.shape:
            raise NotImplementedError(
                f"functionalize: {self._who()} resizes its output from {list(like.shape)} to {list(val.shape)}"
            )
        if val.dtype != like.dtype:  # an in-place op keeps its argument's dtype
            return self.emit(aten._to_copy.default, new_value, dtype=like.dtype)
        return new_value

    # ---------------------------------------------------------------- outputs

    def output(self, node: fx.Node) -> list[int]:
        self.culprit = None
        outputs = self.read(node.args[0])
        mutated = [i for i, placeholder in enumerate(self.placeholders) if self.version[placeholder] > 0]
        extras = []
        for placeholder_idx in mutated:
            placeholder = self.placeholders[placeholder_idx]
            final = self.value[placeholder]
            if isinstance(final, fx.Node) and final.op == "call_function":
                final._rename(f"mutated_{placeholder.name}")
            extras.append(final)
        if extras:
            outputs = (*outputs, *extras) if isinstance(outputs, (list, tuple)) else (outputs, *extras)
        new_output = self.graph.output(outputs)
        new_output.meta = dict(node.meta)
        return mutated


def functionalize(gm: fx.GraphModule, recompile: bool = True) -> fx.GraphModule:
    """Remove every mutation from ``gm`` (see the module docstring); rewrites ``gm`` and returns it.

    Args:
        gm: an ATen-level graph with ``meta["val"]`` on its nodes, as ``make_fx`` traces it.
        recompile: lint and recompile ``gm``; ``False`` where the caller rewrites it further and does so
            itself (generating a large graph's code is a good part of its compile time).

    Returns:
        ``gm`` computing the same outputs with pure ops, followed by the final
        value of each data-mutated placeholder; ``gm.meta["mutated_inputs"]``
        holds those placeholders' indices.
    """
    analysis = AliasAnalysis(gm.graph)
    mutated: list[int] = []
    if any(analysis.writes_of(node) for node in gm.graph.nodes):
        functionalizer = _Functionalizer(gm, analysis)
        mutated = functionalizer.run()
        gm.graph = functionalizer.graph
    else:
        for node in gm.graph.nodes:
            mark_function_arguments(node, lambda value: value)  # (nothing written: each node holds one value)
    record_dead_arguments(gm)
    gm.graph.eliminate_dead_code()
    if recompile:
        gm.graph.lint()
        gm.recompile()
    gm.meta["mutated_inputs"] = mutated
    return gm
