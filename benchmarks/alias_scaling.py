"""Alias analysis cost vs graph size: it must grow linearly.

Two synthetic ATen graphs per size (1k, 10k, 100k nodes; graph construction is
not timed):

- ``mixed``: blocks of compute ops, views, view chains of up to 32 links rooted
  at fresh values, in-place ops on views, ``out=`` ops and split/getitem;
- ``chain``: one view chain as long as the graph, on one placeholder, written
  at its end: the worst case for an analysis that unions location sets per link.

Per graph it times the build (``AliasAnalysis(graph)``), a batch of queries
(one ``location_of``, ``may_alias``, ``aliases_of`` and ``writes_to`` per 10
nodes, in graph order; ``aliases_of`` only on ``mixed``, since its cost is the size of the
answer and the chain's one alias class is the whole graph), and prints
each as milliseconds per 1k nodes: flat columns mean linear cost. Best of
``--repeat`` runs, garbage collector off while timing.

Run ``python benchmarks/alias_scaling.py`` from the repository root (``--sizes 1000 10000`` for a quick one).
"""

from __future__ import annotations

import argparse
import gc
import operator
import random
import time
from collections.abc import Callable

import torch
import torch.fx as fx

from meta.alias import AliasAnalysis

aten = torch.ops.aten
VIEWS = (
    (aten.t.default, ()),
    (aten.alias.default, ()),
    (aten.slice.Tensor, (0, 0, 2)),
    (aten.select.int, (0, 0)),
    (aten.view.default, ([-1],)),
    (aten.diagonal.default, ()),
)


def mixed_graph(num_nodes: int, seed: int = 0) -> fx.Graph:
    """Blocks of compute, views, bounded view chains, in-place and ``out=`` ops, about ``num_nodes`` long."""
    rng = random.Random(seed)
    graph = fx.Graph()
    # One input per ~64 nodes, so that no alias class grows with the graph (``aliases_of`` is output-sensitive).
    inputs = [graph.placeholder(f"x{i}") for i in range(max(num_nodes // 64, 4))]
    values = list(inputs[:4])
    while len(graph.nodes) < num_nodes:
        a = graph.call_function(aten.add.Tensor, (rng.choice(values), rng.choice(inputs)))
        b = graph.call_function(aten.mul.Tensor, (a, 2))
        link = b if rng.random() < 0.8 else rng.choice(inputs)
        for _ in range(rng.randint(1, 32)):
            op, args = rng.choice(VIEWS)
            link = graph.call_function(op, (link, *args))
        graph.call_function(aten.add_.Tensor, (link, a))
        empty = graph.call_function(aten.empty.memory_format, ([4],))
        out = graph.call_function(aten.mul.out, (a, b), {"out": empty})
        parts = graph.call_function(aten.split.Tensor, (out, 2))
        part = graph.call_function(operator.getitem, (parts, 0))
        graph.call_function(aten.mul_.Tensor, (part, 3))
        values = [*values[-8:], b, out]
    graph.output(tuple(values))
    return graph


def chain_graph(num_nodes: int) -> fx.Graph:
    """One view chain of ``num_nodes`` links on one placeholder, written at its end."""
    graph = fx.Graph()
    link = graph.placeholder("x")
    for i in range(num_nodes - 3):
        op, args = VIEWS[i % 2]
        link = graph.call_function(op, (link, *args))
    graph.output((graph.call_function(aten.add_.Tensor, (link, 1)),))
    return graph


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    """The fastest of ``repeat`` timed calls, with the garbage collector off (as ``timeit`` does)."""
    best = float("inf")
    for _ in range(repeat):
        gc.disable()
        try:
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        finally:
            gc.enable()
    return best


def measure(graph: fx.Graph, repeat: int, with_aliases_of: bool) -> tuple[int, float, float]:
    """(nodes, build s, queries s) for one graph."""
    nodes = list(graph.nodes)[:-1]
    rng = random.Random(1)
    # In graph order, as a pass asks; each pair spans a random distance.
    sample = sorted(rng.sample(range(len(nodes)), len(nodes) // 10))
    pairs = [(nodes[i], nodes[max(i - rng.randint(0, 64), 0)]) for i in sample]
    sample_nodes = [nodes[i] for i in sample]
    build = best_of(repeat, lambda: AliasAnalysis(graph))
    analysis = AliasAnalysis(graph)

    def queries() -> None:
        for node in sample_nodes:
            for location in analysis.location_of(node):
                analysis.writes_to(location)
            if with_aliases_of:
                analysis.aliases_of(node)
        for a, b in pairs:
            analysis.may_alias(a, b)

    query = best_of(repeat, queries)
    return len(nodes), build, query


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'graph':<6} {'nodes':>8} {'build ms':>10} {'build/1k':>9} {'query/1k':>9}")
    for name, make in (("mixed", mixed_graph), ("chain", chain_graph)):
        for size in args.sizes:
            # The chain is one alias class of every node: aliases_of returns the whole graph there.
            num_nodes, build, query = measure(make(size), args.repeat, with_aliases_of=name == "mixed")
            per_1k = 1000 / num_nodes * 1e3  # seconds per graph -> ms per 1k nodes
            print(f"{name:<6} {num_nodes:>8} {build * 1e3:>10.1f} {build * per_1k:>9.3f} {query * per_1k:>9.3f}")


if __name__ == "__main__":
    main()
