"""Saved-for-backward bytes per model: aotfx default, aotfx min-cut, torch's min-cut, in one run.

Each model is compiled three ways with a nop compiler: aotfx with ``aot.default_partition``,
aotfx with ``aot.min_cut_rematerialization_partition``, and torch's own AOTAutograd
(``torch._functorch.aot_autograd``) with ``torch._functorch.partitioners.min_cut_rematerialization_partition``.
A forward compiler captures the forward graph; its saved bytes are the sum of ``numel * itemsize``
of the values it returns beyond the user outputs (the same count for all three; inputs saved
as they are count too). Gradients are checked against eager for each.

Run ``python benchmarks/bench_min_cut.py`` (full sizes) or ``--quick``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from bench_vs_torch import TransformerBlock, lstm_unrolled, make_chain  # the same workloads
from torch._functorch.aot_autograd import aot_function as torch_aot_function
from torch._functorch.aot_autograd import aot_module as torch_aot_module
from torch._functorch.compilers import nop
from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_min_cut
from torch.utils._pytree import tree_leaves

import aot

IMPLS = ("aotfx default", "aotfx min-cut", "torch min-cut")


class MLP(nn.Module):
    def __init__(self, dims: tuple[int, ...]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(dims))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.gelu(torch.tanh(x))
        return x


class ConvNet(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(channels)
        self.fc = nn.Linear(channels, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.silu(self.bn2(self.conv2(x)))
        return self.fc(x.mean((2, 3)))


@dataclass
class Model:
    name: str
    target: Any  # nn.Module or function
    args: tuple[torch.Tensor, ...]

    @property
    def is_module(self) -> bool:
        return isinstance(self.target, nn.Module)


def build_models(quick: bool) -> list[Model]:
    torch.manual_seed(0)
    scale = 4 if quick else 1
    dim, seq, batch = 256 // scale, 128 // scale, 8
    hidden, steps = 256 // scale, 100 // scale

    def leaf(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape) * 0.1).requires_grad_()

    return [
        Model("transformer block", TransformerBlock(dim, 8), (torch.randn(batch, seq, dim),)),
        Model(
            "lstm",
            lstm_unrolled,
            (
                torch.randn(steps, 32, hidden),
                torch.zeros(32, hidden),
                torch.zeros(32, hidden),
                leaf(hidden, 4 * hidden),
                leaf(hidden, 4 * hidden),
                leaf(4 * hidden),
            ),
        ),
        Model("conv net", ConvNet(32 // scale * 2), (torch.randn(8, 3, 32 // scale * 2, 32 // scale * 2),)),
        Model("chain", make_chain(500 if quick else 2000), (leaf(1024), leaf(1024), leaf(1024))),
        Model("mlp", MLP((512 // scale, 1024 // scale, 1024 // scale, 10)), (torch.randn(64, 512 // scale),)),
    ]


def _bytes(value: Any) -> int:
    return value.numel() * value.element_size() if isinstance(value, torch.Tensor) else 0


def compile_and_measure(impl: str, model: Model, decompositions: Any) -> tuple[int, float, list[torch.Tensor]]:
    """(saved bytes, compile seconds, gradients) of one forward+backward through ``impl``."""
    captured: list[torch.fx.GraphModule] = []

    def capture(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        captured.append(gm)
        return nop(gm, example_inputs)

    if impl == "torch min-cut":
        make, partition = (torch_aot_module if model.is_module else torch_aot_function), torch_min_cut
    else:
        make = aot.aot_module if model.is_module else aot.aot_function
        partition = aot.default_partition if impl == "aotfx default" else aot.min_cut_rematerialization_partition
    compiled = make(
        model.target, fw_compiler=capture, bw_compiler=nop, partition_fn=partition, decompositions=decompositions
    )
    start = time.perf_counter()
    grads = run_step(compiled, model)
    seconds = time.perf_counter() - start
    num_user_outputs = len([o for o in tree_leaves(model.target(*model.args)) if isinstance(o, torch.Tensor)])
    outputs = list(captured[0].graph.output_node().args[0])[num_user_outputs:]
    saved = sum(_bytes(out.meta.get("val")) for out in outputs if isinstance(out, torch.fx.Node))
    return saved, seconds, grads


def run_step(fn: Any, model: Model) -> list[torch.Tensor]:
    leaves = [t for t in model.args if t.requires_grad]
    if model.is_module:
        leaves += list(model.target.parameters())
    for t in leaves:
        t.grad = None
    outs = [o for o in tree_leaves(fn(*model.args)) if isinstance(o, torch.Tensor) and o.requires_grad]
    sum(o.sum() for o in outs).backward()  # type: ignore[union-attr]
    grads = [t.grad.clone() for t in leaves if t.grad is not None]
    for t in leaves:
        t.grad = None
    return grads


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller models, 500-op chain")
    parser.add_argument(
        "--decompositions",
        choices=["none", "inductor", "both"],
        default="both",
        help="trace with no decompositions, with Inductor's (as aotfx_inductor and torch.compile do), or both",
    )
    args = parser.parse_args(argv)
    tables = {"none": {}, "inductor": aot.backends.inductor_decompositions()}
    for name in ("none", "inductor") if args.decompositions == "both" else (args.decompositions,):
        run_table(args.quick, name, tables[name])


def run_table(quick: bool, table_name: str, decompositions: Any) -> None:
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    torch.set_num_threads(1)
    print(
        f"\n== torch {torch.__version__}, decompositions: {table_name}; "
        "saved-for-backward bytes (sum of numel*itemsize of the saved values) =="
    )
    rows = []
    for model in build_models(quick):
        expected = run_step(model.target, model)
        row = [model.name]
        for impl in IMPLS:
            saved, seconds, grads = compile_and_measure(impl, model, decompositions)
            # Relative to each gradient's largest entry: a decomposed layer norm or softmax sums in
            # another order, and elementwise tolerances fail on the near-zero entries of large gradients.
            ok = len(grads) == len(expected) and all(
                (a - b).abs().max() <= 1e-4 * b.abs().max() + 1e-6 for a, b in zip(grads, expected, strict=True)
            )
            row.append(f"{saved:,}" + ("" if ok else " (GRADS WRONG)"))
            print(f"[{model.name}] {impl}: {saved:,} B, compile+step {seconds:.1f} s", flush=True)
        rows.append(row)
    header = ["model", *IMPLS]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print()
    for r in [header, ["-" * w for w in widths], *rows]:
        cells = zip(r, widths, strict=True)
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(cells)))


if __name__ == "__main__":
    main()
