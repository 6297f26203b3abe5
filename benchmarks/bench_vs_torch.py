"""aotfx vs torch's own AOTAutograd, side by side in one process.

Both implementations compile the same function with the same nop compiler
(``torch._functorch.compilers.nop``), measurements are interleaved (the order
of the implementations rotates every round) and torch runs on one thread.

Per workload it measures:

- cold compile: from creating a fresh compiled object to the end of its first
  forward+backward (the backward graph compiles lazily, so it is included);
  FakeTensorMode's process-wide dispatch cache is cleared before each sample;
  median of several samples;
- step: per-call forward+backward time on tiny inputs after warm-up (median of
  batch means);
- no_grad fwd: per-call forward time under ``torch.no_grad()`` (each
  implementation compiles a fresh object under no_grad, so both run their
  inference graph);
- saved bytes, three ways: (1) ``saved_tensors_hooks`` counting the bytes of
  the unique storages packed for backward (same for eager, ours, torch);
  (2) the same, excluding storages of the inputs/parameters (activations
  only); (3) the forward graph's outputs beyond the user outputs, captured by a
  forward compiler (ours and torch; eager has no graph).

Run ``python benchmarks/bench_vs_torch.py`` (full) or ``--quick``; ``--profile
WORKLOAD`` profiles our cold compile and per-call step with cProfile instead.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import itertools
import math
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch._functorch.config as functorch_config
import torch.nn as nn
import torch.nn.functional as F
from torch._functorch.aot_autograd import aot_function as torch_aot_function
from torch._functorch.aot_autograd import aot_module as torch_aot_module
from torch._functorch.compilers import nop
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_leaves

import aot
import aot.inspect

IMPLS = ("ours", "torch")


# --------------------------------------------------------------------------- workloads


class MLP(nn.Module):
    def __init__(self, dims: tuple[int, ...] = (16, 32, 32, 32, 8)) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(dims))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        return x


class TransformerBlock(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q = q.reshape(b, t, h, c // h).transpose(1, 2)
        k = k.reshape(b, t, h, c // h).transpose(1, 2)
        v = v.reshape(b, t, h, c // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // h))
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def lstm_unrolled(
    xs: torch.Tensor, h: torch.Tensor, c: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor, b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    for t in range(xs.shape[0]):
        gates = xs[t] @ w_ih + h @ w_hh + b
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
    return h, c


def make_chain(num_ops: int) -> Callable[..., torch.Tensor]:
    def chain(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        for i in range(num_ops):
            step = i % 3
            if step == 0:
                x = torch.sin(x)
            elif step == 1:
                x = x * w
            else:
                x = x + b
        return x

    return chain


@dataclass
class Workload:
    name: str
    target: Any  # nn.Module or function
    args: tuple[torch.Tensor, ...]
    is_module: bool

    def params(self) -> list[torch.Tensor]:
        return list(self.target.parameters()) if self.is_module else []

    def input_storages(self) -> set[int]:
        return {t.untyped_storage().data_ptr() for t in [*self.args, *self.params()]}


def build_workloads(chain_ops: int, lstm_steps: int) -> dict[str, Workload]:
    torch.manual_seed(0)
    mlp = MLP()
    block = TransformerBlock()
    hidden, features, batch = 8, 8, 2

    def leaf(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape) * 0.3).requires_grad_()

    return {
        "mlp": Workload("mlp", mlp, (torch.randn(4, 16),), True),
        "transformer": Workload("transformer", block, (torch.randn(2, 8, 32),), True),
        "lstm": Workload(
            "lstm",
            lstm_unrolled,
            (
                torch.randn(lstm_steps, batch, features),
                torch.zeros(batch, hidden),
                torch.zeros(batch, hidden),
                leaf(features, 4 * hidden),
                leaf(hidden, 4 * hidden),
                leaf(4 * hidden),
            ),
            False,
        ),
        "chain": Workload("chain", make_chain(chain_ops), (leaf(8), leaf(8), leaf(8)), False),
    }


# --------------------------------------------------------------------------- compiling


def compile_with(impl: str, wl: Workload, fw_compiler: Any = nop, bw_compiler: Any = nop) -> Any:
    """A fresh compiled object for ``wl`` (``eager`` returns the target itself)."""
    if impl == "eager":
        return wl.target
    if impl == "ours":
        make = aot.aot_module if wl.is_module else aot.aot_function
    else:
        make = torch_aot_module if wl.is_module else torch_aot_function
    return make(wl.target, fw_compiler=fw_compiler, bw_compiler=bw_compiler)


def step(fn: Any, args: tuple[torch.Tensor, ...]) -> None:
    """One training step: forward, sum of the differentiable outputs, backward."""
    outs = [o for o in tree_leaves(fn(*args)) if isinstance(o, torch.Tensor) and o.requires_grad]
    loss = outs[0].sum()
    for o in outs[1:]:
        loss = loss + o.sum()
    loss.backward()


def forward_only(fn: Any, args: tuple[torch.Tensor, ...]) -> None:
    with torch.no_grad():
        fn(*args)


def cold_start() -> None:
    FakeTensorMode.cache_clear()
    # aotfx's in-process compile cache: without clearing it, a second aot_function of the same function
    # reuses the first one's trace (aot.cache.reuse_trace) and the sample is a cache hit, not a compile.
    aot.cache.clear()
    gc.collect()


def check_correctness(wl: Workload) -> str:
    """Outputs and gradients of ours and torch's against eager."""

    def run(fn: Any) -> list[torch.Tensor]:
        leaves = [*wl.args, *wl.params()]
        for t in leaves:
            t.grad = None
        outs = [o.detach().clone() for o in tree_leaves(fn(*wl.args))]
        step(fn, wl.args)
        grads = [t.grad.clone() for t in leaves if t.grad is not None]
        for t in leaves:
            t.grad = None
        return outs + grads

    ref = run(wl.target)
    verdicts = []
    for impl in IMPLS:
        got = run(compile_with(impl, wl))
        ok = len(got) == len(ref) and all(
            torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(got, ref, strict=True)
        )
        verdicts.append(f"{impl} {'ok' if ok else 'MISMATCH'}")
    return ", ".join(verdicts)


# --------------------------------------------------------------------------- measurements


def rotated(impls: tuple[str, ...], round_index: int) -> list[str]:
    k = round_index % len(impls)
    return list(impls[k:] + impls[:k])


def measure_cold_compile(wl: Workload, reps: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    for r in range(reps):
        for impl in rotated(IMPLS, r):
            cold_start()
            start = time.perf_counter()
            compiled = compile_with(impl, wl)
            step(compiled, wl.args)
            samples[impl].append(time.perf_counter() - start)
            del compiled
    return {impl: statistics.median(s) for impl, s in samples.items()}


def measure_per_call(
    wl: Workload, impls: tuple[str, ...], run: Callable[[Any, tuple[torch.Tensor, ...]], None], rounds: int
) -> dict[str, float]:
    """Median over ``rounds`` interleaved batches of the mean per-call time; compiled under ``run``'s mode."""
    fns = {}
    for impl in impls:
        fns[impl] = compile_with(impl, wl)
        for _ in range(5):  # compile + warm-up
            run(fns[impl], wl.args)
    # Batch size: about 20 ms for the slowest implementation.
    slowest = 0.0
    for fn in fns.values():
        start = time.perf_counter()
        for _ in range(3):
            run(fn, wl.args)
        slowest = max(slowest, (time.perf_counter() - start) / 3)
    batch = max(1, min(2000, int(0.02 / max(slowest, 1e-7))))
    samples: dict[str, list[float]] = {impl: [] for impl in impls}
    gc.collect()
    for r in range(rounds):
        for impl in rotated(impls, r):
            fn = fns[impl]
            start = time.perf_counter()
            for _ in range(batch):
                run(fn, wl.args)
            samples[impl].append((time.perf_counter() - start) / batch)
    return {impl: statistics.median(s) for impl, s in samples.items()}


def hook_saved_bytes(impl: str, wl: Workload) -> tuple[int, int]:
    """Bytes of unique storages packed for backward during one forward: (all, excluding inputs)."""
    fn = compile_with(impl, wl)
    step(fn, wl.args)  # compile (forward and backward) outside the hooks: tracing must not be counted
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        outs = fn(*wl.args)
    inputs = wl.input_storages()
    del outs
    total = sum(storages.values())
    activations = sum(n for ptr, n in storages.items() if ptr not in inputs)
    return total, activations


def graph_saved_bytes(impl: str, wl: Workload) -> tuple[int, int | None]:
    """Bytes of the forward graph's outputs beyond the user outputs, plus (ours) aot.inspect.saved_bytes."""
    captured: list[torch.fx.GraphModule] = []

    def capture_fw(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        captured.append(gm)
        return nop(gm, example_inputs)

    compiled = compile_with(impl, wl, fw_compiler=capture_fw)
    num_user_outputs = len([o for o in tree_leaves(wl.target(*wl.args)) if isinstance(o, torch.Tensor)])
    step(compiled, wl.args)
    outputs = list(captured[0].graph.output_node().args[0])
    storages: dict[int, int] = {}  # fake storage -> bytes: views of one storage count once, as with the hooks
    for node in outputs[num_user_outputs:]:
        val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if isinstance(val, torch.Tensor):
            storage = val.untyped_storage()
            storages[storage._cdata] = storage.nbytes()
    total = sum(storages.values())
    inspected = None
    if impl == "ours":
        entries = compiled.compiled.entries if wl.is_module else compiled.entries
        inspected = aot.inspect.saved_bytes(entries[0])
    return total, inspected


# --------------------------------------------------------------------------- report


def fmt_time(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.1f} us"


def fmt_ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def run_benchmarks(args: argparse.Namespace) -> None:
    workloads = build_workloads(args.chain_ops, args.lstm_steps)
    names = args.workloads or list(workloads)
    compile_reps = args.compile_reps or (1 if args.quick else 5)
    rounds = args.rounds or (5 if args.quick else 21)
    print(
        f"torch {torch.__version__}, threads={torch.get_num_threads()}, compile reps={compile_reps}, "
        f"per-call rounds={rounds}, chain ops={args.chain_ops}, lstm steps={args.lstm_steps}, "
        f"autograd cache={functorch_config.enable_autograd_cache}"
    )

    # Process-wide lazy initialisation (imports, decomposition tables) once per implementation, untimed.
    warm = build_workloads(3, 2)["mlp"]
    for impl in IMPLS:
        step(compile_with(impl, warm), warm.args)

    rows: list[tuple[str, str, str, str, str, str]] = []
    for name in names:
        wl = workloads[name]
        t0 = time.perf_counter()
        print(f"[{name}] correctness: {check_correctness(wl)}", flush=True)
        cold = measure_cold_compile(wl, compile_reps)
        per_step = measure_per_call(wl, ("eager", *IMPLS), step, rounds)
        fwd = measure_per_call(wl, ("eager", *IMPLS), forward_only, rounds)
        hooks = {impl: hook_saved_bytes(impl, wl) for impl in ("eager", *IMPLS)}
        graph = {impl: graph_saved_bytes(impl, wl) for impl in IMPLS}
        print(f"[{name}] done in {time.perf_counter() - t0:.1f} s; ours aot.inspect.saved_bytes = {graph['ours'][1]}")

        def row(
            metric: str, values: dict[str, Any], fmt: Callable[[Any], str], eager: bool = True, name: str = name
        ) -> None:
            rows.append(
                (
                    name,
                    metric,
                    fmt(values["eager"]) if eager else "-",
                    fmt(values["ours"]),
                    fmt(values["torch"]),
                    fmt_ratio(values["ours"], values["torch"]),
                )
            )

        row("cold compile", cold, fmt_time, eager=False)
        row("fwd+bwd step", per_step, fmt_time)
        row("no_grad fwd", fwd, fmt_time)
        row("saved B (hooks)", {k: v[0] for k, v in hooks.items()}, str)
        row("saved B (hooks, excl inputs)", {k: v[1] for k, v in hooks.items()}, str)
        row("saved B (fw graph outs)", {k: v[0] for k, v in graph.items()}, str, eager=False)

    header = ("workload", "metric", "eager", "ours", "torch", "ours/torch")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(f"{{:<{w}}}" if i < 2 else f"{{:>{w}}}" for i, w in enumerate(widths))
    print()
    print(line.format(*header))
    print(line.format(*("-" * w for w in widths)))
    previous = None
    for r in rows:
        print(line.format(*(r if r[0] != previous else ("", *r[1:]))))
        previous = r[0]


# --------------------------------------------------------------------------- profiling


def print_profile(profile: cProfile.Profile, title: str, top: int) -> None:
    stats = pstats.Stats(profile)
    total = max(stats.total_tt, 1e-12)  # type: ignore[attr-defined]
    entries = []
    for (path, _line, func), (_cc, _nc, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if path == __file__ or (path == "~" and "builtins.exec" in func):
            continue
        short = path
        for marker in ("site-packages/", "/work/main/"):
            if marker in path:
                short = path.split(marker, 1)[1]
        entries.append((cumtime, tottime, f"{short}:{func}"))
    print(f"\n== {title}: total {total * 1e3:.1f} ms ==")
    print(f"{'cum%':>6} {'self%':>6}  function (top {top} by cumulative)")
    for cumtime, tottime, label in sorted(entries, reverse=True)[:top]:
        print(f"{100 * cumtime / total:6.1f} {100 * tottime / total:6.1f}  {label}")
    print(f"{'cum%':>6} {'self%':>6}  function (top {top} by cumulative, aotfx code only)")
    ours = [e for e in entries if e[2].startswith(("aot/", "wrappers/", "meta/"))]
    for cumtime, tottime, label in sorted(ours, reverse=True)[:top]:
        print(f"{100 * cumtime / total:6.1f} {100 * tottime / total:6.1f}  {label}")
    print(f"{'cum%':>6} {'self%':>6}  function (top {top} by self time)")
    for cumtime, tottime, label in sorted(entries, key=lambda e: e[1], reverse=True)[:top]:
        print(f"{100 * cumtime / total:6.1f} {100 * tottime / total:6.1f}  {label}")


def run_profile(args: argparse.Namespace) -> None:
    wl = build_workloads(args.chain_ops, args.lstm_steps)[args.profile]
    warm = build_workloads(3, 2)["mlp"]
    step(compile_with("ours", warm), warm.args)
    reps = args.compile_reps or 3
    profile = cProfile.Profile()
    for _ in range(reps):
        cold_start()
        profile.enable()
        step(compile_with("ours", wl), wl.args)
        profile.disable()
    print_profile(profile, f"ours cold compile, {args.profile}, {reps} reps", args.top)

    compiled = compile_with("ours", wl)
    for _ in range(5):
        step(compiled, wl.args)
    start = time.perf_counter()
    step(compiled, wl.args)
    calls = max(1, min(5000, int(2.0 / max(time.perf_counter() - start, 1e-6))))
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        step(compiled, wl.args)
    profile.disable()
    print_profile(profile, f"ours fwd+bwd step, {args.profile}, {calls} calls", args.top)

    compiled = compile_with("ours", wl)
    for _ in range(5):
        forward_only(compiled, wl.args)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        forward_only(compiled, wl.args)
    profile.disable()
    print_profile(profile, f"ours no_grad forward, {args.profile}, {calls} calls", args.top)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="one cold compile each, fewer rounds, shorter lstm and chain"
    )
    parser.add_argument("--workloads", nargs="*", choices=["mlp", "transformer", "lstm", "chain"])
    parser.add_argument("--compile-reps", type=int, default=0, help="cold compiles per implementation (median)")
    parser.add_argument("--rounds", type=int, default=0, help="interleaved timing batches per implementation")
    parser.add_argument("--chain-ops", type=int, default=0, help="default 2000 (500 with --quick)")
    parser.add_argument("--lstm-steps", type=int, default=0, help="default 100 (25 with --quick)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", choices=["mlp", "transformer", "lstm", "chain"], help="cProfile ours instead")
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args(argv)
    args.chain_ops = args.chain_ops or (500 if args.quick else 2000)
    args.lstm_steps = args.lstm_steps or (25 if args.quick else 100)

    torch.set_num_threads(args.threads)
    # torch's AOTAutograd cache only engages for serializable (inductor) compilers or when forced; make
    # sure it is off so torch's cold compiles are really cold, as ours are.
    functorch_config.enable_autograd_cache = False
    functorch_config.force_autograd_cache = False
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    if args.profile:
        run_profile(args)
    else:
        run_benchmarks(args)


if __name__ == "__main__":
    main()
