"""``python -m aot``: train a tiny GPT eagerly and through ``aot_module`` side by side.

``python -m aot cache info|clear [--dir DIR]`` shows or empties the persistent
compile cache (``--dir``, default ``$AOTFX_CACHE_DIR``) instead;
``python -m aot inspect module:function --shapes 4x8 8x16`` prints the graphs
and report of a user function.

Two identical copies of ``aot.demo.TinyGPT`` take the same optimizer steps on the
same batches, one eager, one compiled with the ``nop`` backend. Per step the two
losses are printed and compared; then one evaluation forward under
``torch.no_grad()`` (the inference graph), and a summary of the compiled graphs:
op counts, bytes saved for backward, compile time and step times.

Exit code 0 when every loss and the evaluation logits match eager, 1 otherwise.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from collections.abc import Sequence

import torch
import torch.fx as fx
from torch import nn

import aot
from aot.compile.core import CompiledEntry
from aot.demo import GPTConfig, make_batches, make_model
from aot.inspect import saved_bytes, saved_for_backward

__all__ = ["cache_command", "inspect_command", "main", "parse_args", "run"]

RTOL = 1e-5
EVAL_ATOL = 1e-5


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m aot", description="Train a tiny GPT eagerly and through aot_module; compare losses."
    )
    parser.add_argument("--steps", type=int, default=5, help="training steps (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed for parameters and data (default 0)")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate (default 3e-3)")
    parser.add_argument("--report", action="store_true", help="also print the full report of the compiled graphs")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    return args


def _train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, inputs: torch.Tensor, targets: torch.Tensor
) -> tuple[float, float]:
    """One optimizer step; returns (loss, seconds)."""
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    loss = model(inputs, targets)
    loss.backward()
    optimizer.step()
    return loss.item(), time.perf_counter() - start


def _ops(gm: fx.GraphModule | None) -> int:
    return 0 if gm is None else sum(1 for node in gm.graph.nodes if node.op == "call_function")


def _relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def _summary(training: CompiledEntry, inference: CompiledEntry | None) -> list[str]:
    rows = saved_for_backward(training)
    lines = [
        f"graphs: forward {_ops(training.forward)} ops, backward {_ops(training.backward)} ops, "
        f"inference {_ops(inference.inference) if inference else 0} ops",
        f"saved for backward: {len(rows)} tensors, {saved_bytes(training) / 1024:.1f} KiB",
        f"compile (first step): {_ms(training.compile_seconds + training.backward_compile_seconds)} "
        f"(trace+partition+forward {_ms(training.compile_seconds)}, "
        f"backward {_ms(training.backward_compile_seconds)})",
    ]
    if inference is not None:
        lines.append(f"compile (eval forward): {_ms(inference.compile_seconds)}")
    return lines


def run(steps: int = 5, seed: int = 0, lr: float = 3e-3, report: bool = False) -> int:
    """Run the demo, print its results; 0 when compiled matches eager throughout, else 1."""
    config = GPTConfig()
    eager_model = make_model(config, seed)
    compiled_model = aot.aot_module(copy.deepcopy(eager_model), aot.nop)
    params = sum(p.numel() for p in eager_model.parameters())
    print(config.describe())
    print(f"{params:,} parameters, Adam lr {lr:g}, {steps} steps, seed {seed}; backend aot.nop")
    eager_opt = torch.optim.Adam(eager_model.parameters(), lr=lr)
    compiled_opt = torch.optim.Adam(compiled_model.parameters(), lr=lr)

    ok = True
    eager_times: list[float] = []
    compiled_times: list[float] = []
    print(f"{'step':>4}  {'eager loss':>12}  {'compiled loss':>13}  {'rel diff':>8}")
    for step, (inputs, targets) in enumerate(make_batches(config, seed, steps), start=1):
        eager_loss, eager_s = _train_step(eager_model, eager_opt, inputs, targets)
        compiled_loss, compiled_s = _train_step(compiled_model, compiled_opt, inputs, targets)
        eager_times.append(eager_s)
        compiled_times.append(compiled_s)
        diff = _relative(eager_loss, compiled_loss)
        match = diff <= RTOL
        ok &= match
        print(f"{step:>4}  {eager_loss:>12.6f}  {compiled_loss:>13.6f}  {diff:>8.1e}  {'ok' if match else 'MISMATCH'}")

    eager_model.eval()
    compiled_model.eval()
    eval_inputs, _ = next(make_batches(config, seed + 1, 1))
    with torch.no_grad():
        eager_logits = eager_model(eval_inputs)
        compiled_logits = compiled_model(eval_inputs)
    eval_diff = (eager_logits - compiled_logits).abs().max().item()
    eval_ok = eval_diff <= EVAL_ATOL + RTOL * eager_logits.abs().max().item()
    ok &= eval_ok
    print(f"eval (model.eval(), no_grad): max |logits diff| {eval_diff:.1e}  {'ok' if eval_ok else 'MISMATCH'}")
    param_diff = max(
        (a - b).abs().max().item() for a, b in zip(eager_model.parameters(), compiled_model.parameters(), strict=True)
    )
    print(f"parameters after training: max |diff| {param_diff:.1e}")

    entries = compiled_model.compiled.entries
    training = next((e for e in entries if e.forward is not None), None)
    inference = next((e for e in entries if e.inference is not None), None)
    if training is None:
        print("no training graph was compiled")
        return 1
    for line in _summary(training, inference):
        print(line)
    if steps > 1:
        compiled_mean = statistics.mean(compiled_times[1:])
        eager_mean = statistics.mean(eager_times[1:])
        print(
            f"mean step (steps 2..{steps}): compiled {_ms(compiled_mean)}, eager {_ms(eager_mean)} "
            f"({compiled_mean / eager_mean:.2f}x); first step: compiled {_ms(compiled_times[0])}, "
            f"eager {_ms(eager_times[0])}"
        )
    else:
        print(f"first step: compiled {_ms(compiled_times[0])}, eager {_ms(eager_times[0])}")
    if report:
        print()
        print(compiled_model.compiled.report())
        print()
    print("result: compiled matches eager" if ok else "result: MISMATCH between compiled and eager")
    return 0 if ok else 1


def cache_command(argv: Sequence[str]) -> int:
    """``python -m aot cache info|clear [--dir DIR]``: the persistent compile cache's size, or empty it."""
    from aot.cache import ENV_DIR, store

    parser = argparse.ArgumentParser(prog="python -m aot cache", description="Inspect or clear the compile cache.")
    parser.add_argument("action", choices=["info", "clear"])
    parser.add_argument("--dir", default=os.environ.get(ENV_DIR), help=f"cache directory (default ${ENV_DIR})")
    args = parser.parse_args(argv)
    if not args.dir:
        print(f"no persistent cache directory: pass --dir or set {ENV_DIR}")
        return 1
    if args.action == "clear":
        print(f"{args.dir}: removed {store.clear(args.dir)} entries")
    else:
        entries, size = store.info(args.dir)
        print(f"{args.dir}: {entries} entries, {size / 1024:.1f} KiB")
    return 0


def inspect_command(argv: Sequence[str]) -> int:
    """``python -m aot inspect module:function --shapes 4x8 8x16 [--no-grad]``: graphs and report of a function."""
    import importlib

    from aot.inspect import report

    parser = argparse.ArgumentParser(prog="python -m aot inspect", description=inspect_command.__doc__)
    parser.add_argument("target", help="module:function, the module importable from the current directory")
    parser.add_argument(
        "--shapes", nargs="+", required=True, help="one shape per tensor argument, e.g. 4x8 (scalar: '')"
    )
    parser.add_argument("--no-grad", action="store_true", help="inputs do not require grad: the inference graph")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    module_name, _, function_name = args.target.partition(":")
    if not function_name:
        parser.error("target must be module:function")
    sys.path.insert(0, os.getcwd())
    fn = getattr(importlib.import_module(module_name), function_name)
    generator = torch.Generator().manual_seed(args.seed)
    inputs = [
        torch.randn([int(d) for d in shape.split("x") if d], generator=generator).requires_grad_(not args.no_grad)
        for shape in args.shapes
    ]
    compiled = aot.aot_function(fn, aot.nop)
    outputs = [o for o in torch.utils._pytree.tree_leaves(compiled(*inputs)) if isinstance(o, torch.Tensor)]
    differentiable = [o for o in outputs if o.requires_grad]
    if differentiable:
        torch.autograd.backward([o.sum() for o in differentiable])  # compiles the backward graph too
    print(report(compiled.entries[0]))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m aot`` and the ``aotfx`` script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["cache"]:
        return cache_command(argv[1:])
    if argv[:1] == ["inspect"]:
        return inspect_command(argv[1:])
    args = parse_args(argv)
    return run(steps=args.steps, seed=args.seed, lr=args.lr, report=args.report)


if __name__ == "__main__":
    sys.exit(main())
