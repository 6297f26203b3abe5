"""Alias analysis: queries on hand-built and traced graphs, and in-place updates."""

from __future__ import annotations

import operator

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from meta.alias import AliasAnalysis, return_alias_positions, written_positions

aten = torch.ops.aten


class Graph:
    """A hand-built graph: ``g.x = g.op(target, *args)`` reads like the program it builds."""

    def __init__(self, *inputs: str) -> None:
        self.graph = fx.Graph()
        self.inputs = [self.graph.placeholder(name) for name in inputs]

    def op(self, target, *args, **kwargs) -> fx.Node:
        return self.graph.call_function(target, args, kwargs)

    def done(self, *outputs: fx.Node) -> AliasAnalysis:
        self.graph.output(outputs)
        self.graph.lint()
        return AliasAnalysis(self.graph)


def by_name(graph: fx.Graph) -> dict[str, fx.Node]:
    return {node.name: node for node in graph.nodes}


# ------------------------------------------------------------------ schema reading


def test_return_alias_positions():
    assert return_alias_positions(aten.view.default) == ((0,),)
    assert return_alias_positions(aten.add.Tensor) == ((),)
    assert return_alias_positions(aten.add_.Tensor) == ((0,),)
    assert return_alias_positions(aten.split.Tensor) == ((0,),)  # Tensor(a -> *) self -> Tensor(a)[]
    assert return_alias_positions(aten.unbind.int) == ((0,),)
    assert return_alias_positions(aten.unsafe_split.Tensor) == ((),)
    assert return_alias_positions(aten.max.dim_max) == ((3,), (4,))
    assert return_alias_positions(aten.add.out) == ((3,),)


def test_written_positions():
    assert written_positions(aten.add_.Tensor, ()) == (0,)
    assert written_positions(aten.add.Tensor, ()) == ()
    assert written_positions(aten.max.dim_max, ()) == (3, 4)
    assert written_positions(aten.t_.default, ()) == (0,)
    # native_batch_norm writes the running stats in training without saying so in its schema.
    x, mean, var = object(), object(), object()
    assert written_positions(aten.native_batch_norm.default, (x, None, None, mean, var, True, 0.1, 1e-5)) == (3, 4)
    assert written_positions(aten.native_batch_norm.default, (x, None, None, mean, var, False, 0.1, 1e-5)) == ()
    assert written_positions(aten.native_batch_norm.default, (x, None, None, None, None, True, 0.1, 1e-5)) == ()


# ------------------------------------------------------------------ queries on hand-built graphs


def build_views():
    g = Graph("x", "y")
    x, y = g.inputs
    v = g.op(aten.view.default, x, [2, 6])
    t = g.op(aten.t.default, v)
    s = g.op(aten.slice.Tensor, t, 0, 1, 3)
    fresh = g.op(aten.mul.Tensor, y, 2)
    written = g.op(aten.add_.Tensor, s, fresh)
    parts = g.op(aten.split.Tensor, fresh, 2)
    part = g.op(operator.getitem, parts, 1)
    empty = g.op(aten.empty.memory_format, [12])
    out = g.op(aten.add.out, y, 1, out=empty)
    analysis = g.done(written, part, out)
    return analysis, dict(x=x, y=y, v=v, t=t, s=s, fresh=fresh, written=written, parts=parts, part=part,
                          empty=empty, out=out)  # fmt: skip


def test_views_point_to_their_base():
    analysis, n = build_views()
    assert analysis.points_to(n["v"]) == (n["x"],)
    assert analysis.points_to(n["s"]) == (n["t"],)
    assert analysis.points_to(n["written"]) == (n["s"],)
    assert analysis.points_to(n["part"]) == (n["parts"],)
    assert analysis.points_to(n["out"]) == (n["empty"],)
    assert analysis.points_to(n["fresh"]) == ()


def test_locations_are_the_leaves():
    analysis, n = build_views()
    for name in ("x", "v", "t", "s", "written"):
        assert analysis.location_of(n[name]) == frozenset({n["x"]})
    assert analysis.location_of(n["part"]) == frozenset({n["fresh"]})
    assert analysis.location_of(n["out"]) == frozenset({n["empty"]})
    assert analysis.location_of(n["y"]) == frozenset({n["y"]})


def test_may_alias_and_aliases_of():
    analysis, n = build_views()
    assert analysis.may_alias(n["x"], n["s"])
    assert analysis.may_alias(n["written"], n["v"])
    assert not analysis.may_alias(n["x"], n["y"])
    assert not analysis.may_alias(n["fresh"], n["y"])  # mul makes new memory
    assert analysis.may_alias(n["part"], n["fresh"])
    assert analysis.aliases_of(n["t"]) == {n[k] for k in ("x", "v", "t", "s", "written")}
    assert analysis.aliases_of(n["y"]) == {n["y"]}


def test_writes_to_goes_through_any_alias():
    analysis, n = build_views()
    assert analysis.writes_to(n["x"]) == [n["written"]]
    assert analysis.writes_to(n["empty"]) == [n["out"]]
    assert analysis.writes_to(n["y"]) == []
    assert analysis.writes_of(n["written"]) == frozenset({n["x"]})
    assert analysis.is_written(n["v"]) and not analysis.is_written(n["fresh"])


def test_multi_return_out_points_per_return():
    g = Graph("x", "values", "indices")
    x, values, indices = g.inputs
    both = g.op(aten.max.dim_max, x, 0, max=values, max_values=indices)
    first = g.op(operator.getitem, both, 0)
    second = g.op(operator.getitem, both, 1)
    analysis = g.done(first, second)
    assert analysis.location_of(both) == frozenset({values, indices})
    assert analysis.points_to(first) == (values,)
    assert analysis.points_to(second) == (indices,)
    assert not analysis.may_alias(first, second)
    assert analysis.writes_to(values) == [both] == analysis.writes_to(indices)


def test_fresh_multi_return_items_are_fresh():
    g = Graph("x")
    both = g.op(aten.max.dim, g.inputs[0], 0)
    first = g.op(operator.getitem, both, 0)
    second = g.op(operator.getitem, both, 1)
    analysis = g.done(first, second)
    assert not analysis.may_alias(first, second)
    assert not analysis.may_alias(first, g.inputs[0])


def test_values_without_tensors_have_no_location():
    g = Graph("x")
    x = g.inputs[0]
    x.meta["val"] = torch.empty(3)
    size = g.op(aten.sym_size.int, x, 0)
    size.meta["val"] = 3
    analysis = g.done(size)
    assert analysis.location_of(size) == frozenset()
    assert not analysis.may_alias(size, x)


def test_long_view_chain_shares_one_location_set():
    """Each link reuses its parent's set: building is linear, however long the chain."""
    g = Graph("x")
    node = g.inputs[0]
    chain = [node]
    for _ in range(5000):
        node = g.op(aten.alias.default, node)
        chain.append(node)
    written = g.op(aten.add_.Tensor, node, 1)
    analysis = g.done(written)
    first = analysis.location_of(chain[0])
    assert all(analysis.location_of(link) is first for link in chain)
    assert analysis.writes_to(chain[0]) == [written]
    assert len(analysis.aliases_of(chain[2500])) == len(chain) + 1


# ------------------------------------------------------------------ traced graphs


def test_traced_program():
    def fn(x, y):
        a = x.view(4, 2)
        b = a.t()[0]
        c = y * 2
        b.mul_(c[:4])
        d = c.unbind(0)
        return x + 1, d[1]

    gm = make_fx(fn)(torch.randn(8), torch.randn(6))
    analysis = AliasAnalysis(gm.graph)
    n = by_name(gm.graph)
    assert analysis.writes_to(n["x_1"]) == [n["mul_"]]
    assert analysis.writes_to(n["y_1"]) == []
    assert analysis.may_alias(n["select"], n["view"])
    assert not analysis.may_alias(n["mul"], n["y_1"])
    assert analysis.location_of(n["getitem_1"]) == frozenset({n["mul"]})
    assert analysis.location_of(n["add"]) == frozenset({n["add"]})


def test_traced_batch_norm_writes_running_stats():
    def fn(x, mean, var):
        return F.batch_norm(x, mean, var, training=True)

    gm = make_fx(fn)(torch.randn(4, 3), torch.zeros(3), torch.ones(3))
    analysis = AliasAnalysis(gm.graph)
    n = by_name(gm.graph)
    assert analysis.writes_to(n["mean_1"]) == [n["native_batch_norm"]] == analysis.writes_to(n["var_1"])
    assert analysis.writes_to(n["x_1"]) == []


def test_metadata_mutation_is_a_write():
    def fn(x):
        y = x * 2
        y.t_()
        return y

    gm = make_fx(fn)(torch.randn(2, 3))
    analysis = AliasAnalysis(gm.graph)
    n = by_name(gm.graph)
    assert analysis.writes_to(n["mul"]) == [n["t_"]]
    assert torch.Tag.inplace_view in n["t_"].target.tags
