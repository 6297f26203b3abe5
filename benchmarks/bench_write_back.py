"""Write-back of aliased, mutated inputs: aotfx's region-only write-back vs torch's AOTAutograd.

Two programs whose inputs alias in one storage of ``--numel`` (10^6) float32 elements:

- ``base+view``: ``f(base, view)`` with ``view = base[10:14]``; ``view.mul_(2)``, returns ``base.sum()``;
- ``overlap``: ``f(a, b)`` with ``a = s[:8]``, ``b = s[4:12]`` of one storage ``s``; ``a.mul_(2)``,
  returns ``(a * b).sum()``.

Each runs in a few modes: ``train`` (grad mode on, no input requires grad), ``train rg`` (the
storage's tensor is a non-leaf requiring grad, ``leaf * 1``, grad mode on; forward timed),
``train rg+bwd`` (the same, forward + ``backward()`` timed) and ``no_grad`` (compiled and called
under ``torch.no_grad()``). Per program and mode it measures eager, ours (``aot.aot_function``
with ``aot.nop``) and torch (``torch._functorch.aot_autograd.aot_function`` with
``torch._functorch.compilers.nop``), in one process, on one thread:

- bytes written into the caller's storage by one call: a ``TorchDispatchMode``, installed only
  for that call (after a warm-up call outside it has compiled), adds up the bytes of the
  destination of every op whose schema writes its first argument, when the destination's
  ``untyped_storage().data_ptr()`` is the caller's storage (torch's graph runs under the mode
  too; its writes into its own copies are not counted);
- time per call: each call gets freshly reset inputs (untimed), then only the call is timed
  with ``perf_counter``; median over ``--rounds`` x ``--calls`` calls, the order of the
  implementations rotating every round;
- correctness, after every timed call: the output and the whole storage (and in ``rg+bwd`` the
  leaf's gradient) equal eager's on the same inputs.

Run ``python benchmarks/bench_write_back.py`` from the repository root (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._functorch.aot_autograd import aot_function as torch_aot_function
from torch._functorch.compilers import nop
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import aot

IMPLS = ("eager", "ours", "torch")


# --------------------------------------------------------------------------- programs


def base_and_view(base: torch.Tensor, view: torch.Tensor) -> torch.Tensor:
    view.mul_(2)
    return base.sum()


def overlapping_views(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a.mul_(2)
    return (a * b).sum()


@dataclass(frozen=True)
class Program:
    name: str
    fn: Callable[..., torch.Tensor]
    args_of: Callable[[torch.Tensor], tuple[torch.Tensor, ...]]  # the storage's tensor -> the aliased inputs


PROGRAMS = (
    Program("base+view", base_and_view, lambda s: (s, s[10:14])),
    Program("overlap", overlapping_views, lambda s: (s[:8], s[4:12])),
)


@dataclass(frozen=True)
class Mode:
    name: str
    grad: bool  # grad mode during compile and calls
    requires_grad: bool  # the storage's tensor is a non-leaf requiring grad (leaf * 1)
    backward: bool  # time forward + backward


MODES = (
    Mode("train", grad=True, requires_grad=False, backward=False),
    Mode("train rg", grad=True, requires_grad=True, backward=False),
    Mode("train rg+bwd", grad=True, requires_grad=True, backward=True),
    Mode("no_grad", grad=False, requires_grad=False, backward=False),
)


# --------------------------------------------------------------------------- inputs


class Inputs:
    """Fresh inputs for every call, all equal: one storage of ``numel`` elements and the program's views of it."""

    def __init__(self, numel: int, mode: Mode, program: Program) -> None:
        self.pristine = torch.randn(numel, generator=torch.Generator().manual_seed(0))
        self.mode, self.program = mode, program
        self.leaf = self.pristine.clone().requires_grad_(mode.requires_grad)
        self.storage = self.pristine.clone()

    def fresh(self) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """(the storage's tensor, the program's arguments), with the pristine contents."""
        if self.mode.requires_grad:
            self.leaf.grad = None
            with torch.enable_grad():
                s = self.leaf * 1  # a fresh non-leaf each call: no autograd history builds up
        else:
            with torch.no_grad():
                self.storage.copy_(self.pristine)
            s = self.storage
        return s, self.program.args_of(s)


# --------------------------------------------------------------------------- write counting


class StorageWrites(TorchDispatchMode):
    """Records (op, bytes) for every op writing its first argument inside the watched storage.

    It also adds up ``new_bytes``: the bytes of every op output that shares no storage with the
    op's tensor inputs (fresh tensors: clones, scatters, results), to show the copies a call makes
    besides the write-back.
    """

    def __init__(self, storage_ptr: int) -> None:
        super().__init__()
        self.storage_ptr = storage_ptr
        self.writes: list[tuple[str, int]] = []
        self.new_bytes = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        schema_args = func._schema.arguments
        if schema_args and args and isinstance(args[0], torch.Tensor):
            alias = schema_args[0].alias_info
            dst = args[0]
            if alias is not None and alias.is_write and dst.untyped_storage().data_ptr() == self.storage_ptr:
                self.writes.append((str(func.overloadpacket.__name__), dst.numel() * dst.element_size()))
        out = func(*args, **kwargs)
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.new_bytes += t.numel() * t.element_size()
        return out


# --------------------------------------------------------------------------- one program x mode


@dataclass
class Result:
    bytes_written: dict[str, int] = field(default_factory=dict)  # into the caller's storage, one call
    write_ops: dict[str, str] = field(default_factory=dict)
    new_bytes: dict[str, int] = field(default_factory=dict)  # fresh tensors made by one call's ops
    times: dict[str, list[float]] = field(default_factory=dict)
    faults: dict[str, list[int]] = field(default_factory=dict)  # minor page faults per timed call
    raised: dict[str, str] = field(default_factory=dict)
    checked: dict[str, int] = field(default_factory=dict)  # timed calls compared with eager
    failed: dict[str, int] = field(default_factory=dict)  # of those, calls that differed
    mismatches: dict[str, list[str]] = field(default_factory=dict)  # how the first failing call differed


def compile_impl(impl: str, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    if impl == "eager":
        return fn
    if impl == "ours":
        return aot.aot_function(fn, aot.nop)
    return torch_aot_function(fn, nop)


@dataclass
class Call:
    seconds: float
    out: torch.Tensor
    storage: torch.Tensor  # the whole storage's contents after the call
    grad: torch.Tensor | None  # the leaf's gradient, when the mode runs backward
    recorder: StorageWrites | None
    faults: int = 0  # minor page faults during the timed call


def run_once(compiled: Callable[..., torch.Tensor], inputs: Inputs, mode: Mode, watch: bool = False) -> Call:
    """One call on fresh inputs; with ``watch``, under ``StorageWrites`` and untimed (no backward)."""
    s, args = inputs.fresh()
    recorder, faults = None, 0
    with torch.set_grad_enabled(mode.grad):
        if watch:
            with StorageWrites(s.untyped_storage().data_ptr()) as recorder:
                out = compiled(*args)
            seconds = 0.0
        else:
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start = time.perf_counter()
            out = compiled(*args)
            if mode.backward:
                out.backward()
            seconds = time.perf_counter() - start
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    grad = inputs.leaf.grad if mode.backward and not watch else None
    return Call(seconds, out.detach(), s.detach(), grad, recorder, faults)


def differences(call: Call, ref: Call) -> list[str]:
    """What differs from eager's call (exact comparison: same ops on the same values)."""
    found = []
    pairs = [("output", call.out, ref.out), ("storage", call.storage, ref.storage)]
    if ref.grad is not None:
        pairs.append(("grad", call.grad, ref.grad))
    for what, got, want in pairs:
        if got is None or got.shape != want.shape or got.dtype != want.dtype:
            found.append(f"{what}: missing or wrong shape/dtype")
        elif not torch.equal(got, want):
            bad = (got != want).nonzero().flatten().tolist()
            worst = (got - want).abs().max()
            found.append(f"{what}: {len(bad)} elements differ (first at {bad[:6]}), max |diff| {worst:.3g}")
    return found


def measure(program: Program, mode: Mode, numel: int, rounds: int, calls: int) -> Result:
    result = Result()
    inputs = Inputs(numel, mode, program)
    # Every call gets the same inputs, so one eager call is the reference for all.
    ref = run_once(program.fn, inputs, mode)
    ref = Call(0.0, ref.out.clone(), ref.storage.clone(), None if ref.grad is None else ref.grad.clone(), None)

    compiled: dict[str, Callable[..., torch.Tensor]] = {}
    for impl in IMPLS:
        try:
            with torch.set_grad_enabled(mode.grad):
                fn = compile_impl(impl, program.fn)
            run_once(fn, inputs, mode)  # compiles (with backward: the backward too), outside the recorder
            recorder = run_once(fn, inputs, mode, watch=True).recorder
        except Exception as error:
            result.raised[impl] = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:160]}"
            continue
        assert recorder is not None
        compiled[impl] = fn
        result.bytes_written[impl] = sum(nbytes for _, nbytes in recorder.writes)
        result.write_ops[impl] = ", ".join(f"{op} {nbytes} B" for op, nbytes in recorder.writes) or "nothing"
        result.new_bytes[impl] = recorder.new_bytes
        result.times[impl], result.faults[impl], result.mismatches[impl] = [], [], []
        result.checked[impl], result.failed[impl] = 0, 0

    order = list(compiled)
    for round_index in range(rounds):
        shift = round_index % len(order)
        for impl in order[shift:] + order[:shift]:
            for _ in range(calls):
                gc.disable()
                try:
                    call = run_once(compiled[impl], inputs, mode)
                finally:
                    gc.enable()
                result.times[impl].append(call.seconds)
                result.faults[impl].append(call.faults)
                result.checked[impl] += 1
                found = differences(call, ref)
                if found:
                    result.failed[impl] += 1
                    result.mismatches[impl] = result.mismatches[impl] or found  # the first failing call's
        gc.collect()
    return result


# --------------------------------------------------------------------------- report


def median_us(result: Result, impl: str) -> float | None:
    return statistics.median(result.times[impl]) * 1e6 if impl in result.times else None


def ratio(num: float | None, den: float | None) -> str:
    if num is None or den is None:
        return "-"
    if den == 0:
        return "inf" if num else "1"
    return f"{num / den:.2g}" if num / den < 0.01 else f"{num / den:.2f}"


def cell(value: float | None, spec: str) -> str:
    return "raises" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--numel", type=int, default=10**6, help="elements in the shared storage")
    parser.add_argument("--rounds", type=int, default=41, help="interleaved rounds (the order rotates each round)")
    parser.add_argument("--calls", type=int, default=10, help="timed calls per implementation per round")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="5 rounds of 5 calls")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.calls = 5, 5
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), one storage of {args.numel} float32, "
        f"{args.rounds} rounds x {args.calls} timed calls per implementation"
    )
    header = (
        f"{'program':<10} {'mode':<13} {'B eager':>7} {'B ours':>7} {'B torch':>8} {'B o/t':>6} "
        f"{'MBnew o':>7} {'MBnew t':>7}  {'us eager':>8} {'us ours':>8} {'us torch':>8} {'t o/t':>5} "
        f"{'min o/t':>7} {'pf o':>5} {'pf t':>5}  correct"
    )
    print(header)
    print("-" * len(header))
    notes: list[str] = []
    write_ops: dict[str, set[str]] = {"ours": set(), "torch": set()}
    for program in PROGRAMS:
        for mode in MODES:
            r = measure(program, mode, args.numel, args.rounds, args.calls)
            written = {impl: r.bytes_written.get(impl) for impl in IMPLS}
            new_mb = {impl: r.new_bytes[impl] / 1e6 if impl in r.new_bytes else None for impl in IMPLS}
            us = {impl: median_us(r, impl) for impl in IMPLS}
            best = {impl: min(r.times[impl]) if impl in r.times else None for impl in IMPLS}
            pf = {impl: statistics.mean(r.faults[impl]) if impl in r.faults else None for impl in IMPLS}
            correct = " ".join(
                f"{impl}:" + (f"{r.failed[impl]}/{r.checked[impl]}BAD" if r.failed[impl] else "ok")
                for impl in ("ours", "torch")
                if impl in r.checked
            )
            print(
                f"{program.name:<10} {mode.name:<13} {cell(written['eager'], 'd'):>7} {cell(written['ours'], 'd'):>7} "
                f"{cell(written['torch'], 'd'):>8} {ratio(written['ours'], written['torch']):>6} "
                f"{cell(new_mb['ours'], '.1f'):>7} {cell(new_mb['torch'], '.1f'):>7}  "
                f"{cell(us['eager'], '.1f'):>8} {cell(us['ours'], '.1f'):>8} {cell(us['torch'], '.1f'):>8} "
                f"{ratio(us['ours'], us['torch']):>5} {ratio(best['ours'], best['torch']):>7} "
                f"{cell(pf['ours'], '.0f'):>5} {cell(pf['torch'], '.0f'):>5}  {correct}"
            )
            where = f"{program.name} / {mode.name}"
            for impl, message in r.raised.items():
                notes.append(f"{where}: {impl} RAISES {message}")
            if mode.requires_grad and "torch" not in r.raised:
                notes.append(f"{where}: torch accepts the non-leaf base requiring grad (does not raise)")
            for impl in ("ours", "torch"):
                if impl in r.write_ops:
                    write_ops[impl].add(r.write_ops[impl])
                for line in r.mismatches.get(impl, []):
                    notes.append(f"{where}: {impl} differs from eager: {line}")
    print()
    print("B = bytes written into the caller's storage by one call (ops writing their first argument there);")
    print("MBnew = MB of fresh tensors the call's ops made (clones, scatters, results; o = ours, t = torch);")
    print("us = median microseconds per call; o/t = ours/torch (below 1: ours writes less / is faster);")
    print("min o/t = ratio of the fastest calls; pf = minor page faults per timed call (mean; o = ours, t = torch);")
    print("correct = every timed call's output, storage contents (and leaf grad in rg+bwd) equal eager's.")
    for impl, ops in write_ops.items():
        print(f"{impl} writes into the caller's storage with: {'; '.join(sorted(ops))}")
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
