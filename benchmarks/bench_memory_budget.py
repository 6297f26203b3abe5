"""Activation memory budget sweep: aotfx's exact plan vs torch's budget partitioner, in one run.

For each model of ``bench_min_cut`` and each budget (a fraction), compiles with a nop compiler:

- aotfx: ``aot_function/aot_module(..., activation_memory_budget=b)`` (``aot.compile.memory_budget``:
  a fraction of the default partitioner's activation bytes, planned by ``scipy.optimize.milp``);
- torch: its own AOTAutograd with ``min_cut_rematerialization_partition`` under
  ``torch._functorch.config.activation_memory_budget = b`` (a fraction of what its min-cut saves
  at budget 1, by its own knapsack).

The two fractions are of different totals, so compare the absolute columns: saved bytes (the
forward's saved outputs, inputs included, counted the same way for both), the recomputed FLOPs
(aotfx's plan; torch's counted with the same estimate over the backward ops that repeat forward
ops), and the step time (forward + backward, median of interleaved repeats, 1 thread). Whether
saved bytes are monotone in the budget is checked per implementation. Gradients are checked
against eager at every point.

``python benchmarks/bench_memory_budget.py [--quick]``.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
import warnings
from typing import Any

import torch
import torch.fx as fx
from bench_min_cut import Model, build_models, run_step
from torch._functorch import config as torch_config
from torch._functorch.aot_autograd import aot_function as torch_aot_function
from torch._functorch.aot_autograd import aot_module as torch_aot_module
from torch._functorch.compilers import nop
from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_min_cut
from torch.utils._pytree import tree_leaves

import aot
from aot.compile.memory_budget import node_flops

BUDGETS = (1.0, 0.8, 0.6, 0.4, 0.2, 0.1)


def compile_at(impl: str, model: Model, budget: float | int) -> tuple[Any, list[fx.GraphModule]]:
    """A compiled callable and the list its forward and backward graphs land in (on the first step)."""
    captured: list[fx.GraphModule] = []

    def capture(gm: fx.GraphModule, example_inputs: Any) -> Any:
        captured.append(gm)
        return nop(gm, example_inputs)

    if impl == "aotfx":
        make = aot.aot_module if model.is_module else aot.aot_function
        compiled = make(model.target, capture, capture, activation_memory_budget=budget)
    else:
        make = torch_aot_module if model.is_module else torch_aot_function
        compiled = make(model.target, fw_compiler=capture, bw_compiler=capture, partition_fn=torch_min_cut)
    return compiled, captured


def step(impl: str, compiled: Any, model: Model, budget: float | int) -> list[torch.Tensor]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if impl == "torch":
            with torch_config.patch(activation_memory_budget=budget):
                return run_step(compiled, model)
        return run_step(compiled, model)


def saved_and_flops(graphs: list[fx.GraphModule], model: Model) -> tuple[int, int]:
    forward, backward = graphs[0], graphs[1]
    num_user_outputs = len([o for o in tree_leaves(model.target(*model.args)) if isinstance(o, torch.Tensor)])
    saved = list(forward.graph.output_node().args[0])[num_user_outputs:]
    nbytes = sum(
        n.meta["val"].numel() * n.meta["val"].element_size()
        for n in saved
        if isinstance(n, fx.Node) and n.op != "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)
    )
    forward_ops = {(n.target, _shape(n)) for n in forward.graph.nodes if n.op == "call_function"}
    # A backward op that repeats a forward op (same op, same output shape) and reads no tangent.
    tangent_free = _tangent_free(backward)
    flops = sum(
        node_flops(n)
        for n in backward.graph.nodes
        if n.op == "call_function" and n in tangent_free and (n.target, _shape(n)) in forward_ops
    )
    return nbytes, flops


def _shape(node: fx.Node) -> Any:
    val = node.meta.get("val")
    return tuple(val.shape) if isinstance(val, torch.Tensor) else None


def _tangent_free(backward: fx.GraphModule) -> set[fx.Node]:
    from_tangents: set[fx.Node] = set()
    free: set[fx.Node] = set()
    for node in backward.graph.nodes:
        if node.op == "placeholder":
            (from_tangents if "tangent" in node.name else free).add(node)
        elif any(arg in from_tangents for arg in node.all_input_nodes):
            from_tangents.add(node)
        else:
            free.add(node)
    return free


def measure(impl: str, model: Model, budget: float | int, expected: list[torch.Tensor]) -> dict[str, Any]:
    """Compile at ``budget``, run one checked step; the callable, its graphs, bytes, FLOPs, or the error."""
    fn, graphs = compile_at(impl, model, budget)
    try:
        grads = step(impl, fn, model, budget)
    except RuntimeError as error:
        return {"error": str(error).split(":")[0][:60]}
    ok = len(grads) == len(expected) and all(
        (a - b).abs().max() <= 1e-4 * b.abs().max() + 1e-6 for a, b in zip(grads, expected, strict=True)
    )
    nbytes, flops = saved_and_flops(graphs, model)
    return {"fn": fn, "bytes": nbytes, "flops": flops, "ok": ok, "times": []}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller models")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    torch.set_num_threads(1)
    print(
        f"torch {torch.__version__}, 1 thread, nop compiler. Per budget fraction b: torch's budget partitioner at b; "
        "aotfx given torch's saved activation bytes as its budget (same memory: compare FLOPs and time); "
        "aotfx at fraction b of its default. Bytes: saved activations (graph inputs excluded)."
    )
    for model in build_models(args.quick):
        expected = run_step(model.target, model)
        print(f"\n[{model.name}]")
        header = ["b", "torch B", "MFLOP", "ms", "aotfx same B", "MFLOP", "ms", "aotfx at b: B", "MFLOP"]
        print("  " + "  ".join(f"{h:>13}" for h in header))
        series: dict[str, list[int]] = {"torch": [], "aotfx": []}
        for budget in BUDGETS:
            torch_point = measure("torch", model, budget, expected)
            fraction_point = measure("aotfx", model, budget, expected)
            same = measure("aotfx", model, torch_point["bytes"], expected) if "bytes" in torch_point else {}
            points = [p for p in (torch_point, same) if "fn" in p]
            for _ in range(args.repeats):  # interleaved: both see the same machine state
                for point, impl in zip(points, ("torch", "aotfx"), strict=False):
                    start = time.perf_counter()
                    step(impl if point is torch_point else "aotfx", point["fn"], model, budget)
                    point["times"].append(time.perf_counter() - start)
            row = [f"{budget:>13.2f}"]
            for point in (torch_point, same):
                if "fn" not in point:
                    row += [f"{point.get('error', '-'):>13}", "", ""]
                    continue
                wrong = "" if point["ok"] else "!"
                ms = statistics.median(point["times"]) * 1e3
                row += [f"{point['bytes']:>13,}{wrong}", f"{point['flops'] / 1e6:>13.2f}", f"{ms:>13.2f}"]
            row += [f"{fraction_point.get('bytes', -1):>13,}", f"{fraction_point.get('flops', 0) / 1e6:>13.2f}"]
            for impl, point in (("torch", torch_point), ("aotfx", fraction_point)):
                if "bytes" in point:
                    series[impl].append(point["bytes"])
            print("  " + "  ".join(row), flush=True)
        monotone = {impl: all(a >= b for a, b in itertools.pairwise(v)) for impl, v in series.items()}
        print("  saved bytes monotone in the budget: " + ", ".join(f"{i} {m}" for i, m in monotone.items()))
        print("  (! = gradients differ from eager)")


if __name__ == "__main__":
    main()
