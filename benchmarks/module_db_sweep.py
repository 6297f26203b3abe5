"""Module database sweep: every ModuleInfo of torch's ``module_db`` through ``aot.aot_module(m, aot.nop)`` vs eager.

Usage::

    python benchmarks/module_db_sweep.py [--modules nn.Linear,nn.LSTM] [--jobs 2] [--calls 2]
                                         [--json results.json] [--task-timeout 600]
                                         [--no-grad] [--frozen-inputs] [--summarize results.json]

For every ModuleInfo, in train and in eval mode, every sample its
``module_inputs_func`` gives on CPU float32 (inputs requiring grad) is checked:
the module is built from the sample's constructor arguments under a fixed seed,
copied (``copy.deepcopy``, before any call), and the copy is wrapped in
``aot.aot_module(copy, aot.nop)``. Eager and compiled are then called ``--calls``
times each (default 2: the second call reuses the compiled entry and sees the
buffers the first one updated) on fresh clones of the forward inputs, with the
global RNG seeded identically before each call, and compared after each call:

- outputs: structure, per tensor dtype, shape, ``requires_grad`` and values;
- buffers after the call (BatchNorm's running stats, ``num_batches_tracked``),
  and parameters after the call (unchanged in both);
- gradients: ``backward`` of fixed random cotangents for every differentiable
  output; ``.grad`` of every parameter and of every forward input that
  requires grad (``None`` and an all-zero gradient count as equal).

Outcomes per sample: ``pass``; ``skip`` only when eager itself cannot run the
sample (the constructor or the first forward raises) or it has no forward
input; ``wrong`` when compiled runs but gives a different result (a silently
wrong value: values, ``requires_grad``, structure, buffers, gradients); and
``error`` when compiled raises where eager does not (a refusal or a crash).
Samples that draw random numbers (dropout with ``p > 0``, RNNs with dropout,
FractionalMaxPool) are compared under the same seed like every other sample;
a value difference there is reported as ``random-differs`` (compiled draws its
random numbers in another order under the same seed: not comparable, listed
separately, not counted as wrong), while structure, dtype, shape and
``requires_grad`` differences still count as wrong.

``--frozen-inputs`` takes the samples with forward inputs that do not require grad
(only the parameters do, as in training on data). ``--no-grad`` makes every call
(eager and compiled) under ``torch.no_grad()``: the inference graphs, with buffer
updates as input mutations; no gradients compared.

Tasks (one module, one mode, up to ``CHUNK`` samples) run in ``--jobs`` worker
processes; a task whose worker hangs past ``--task-timeout`` or dies is recorded
as ``timeout``/``crash`` in the module's note. Progress
goes to stderr; the summary (per-module counts, total, wrong values, errors
grouped by error type and first line) to stdout.

The module doubles as a library: ``tests/test_module_db.py`` imports
``find_module_info`` and ``check_module`` from it.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import multiprocessing as mp
import os
import queue
import re
import signal
import sys
import time
import traceback
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

# Run as a script, check this checkout's aotfx, not whichever one is installed.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import aot  # noqa: E402

DTYPE = torch.float32
FORWARD_TOL = {"rtol": 1e-4, "atol": 1e-5}
GRAD_TOL = {"rtol": 1e-4, "atol": 1e-4}
MODES = (True, False)  # training, eval


def module_db() -> list[Any]:
    from torch.testing._internal.common_modules import module_db as db

    return list(db)


def find_module_info(name: str) -> Any:
    for info in module_db():
        if info.name == name:
            return info
    raise KeyError(f"no ModuleInfo named {name!r}")


def module_samples(info: Any, training: bool, requires_grad: bool = True) -> list[Any]:
    """The ModuleInfo's samples; ``requires_grad``: whether its forward inputs require grad."""
    return list(
        info.module_inputs_func(info, device="cpu", dtype=DTYPE, requires_grad=requires_grad, training=training)
    )


# ----------------------------------------------------------------------------------------------------------------
# One sample


class Mismatch(AssertionError):
    """Compiled differs from eager; ``meta`` differences count as wrong even for random samples."""

    def __init__(self, where: str, message: str, meta: bool = False) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.meta = meta


@dataclass
class Outcome:
    status: str  # pass, skip, wrong, random-differs, error
    stage: str = ""  # construct/eager/compile+forward/backward/compare, and which call
    error_type: str = ""
    message: str = ""
    random: bool = False
    grad_checked: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "pass"


def _first_lines(text: str, n: int = 1) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[:n])[:400]


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """Raise ``TimeoutError`` after ``seconds`` in the main thread (no-op elsewhere)."""
    if seconds <= 0 or not hasattr(signal, "SIGALRM"):
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise TimeoutError(f"sample took over {seconds:.0f}s")

    try:
        previous = signal.signal(signal.SIGALRM, handler)
    except ValueError:
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def describe(sample: Any) -> str:
    """The sample's description, constructor arguments and forward input shapes, one line."""

    def short(value: Any) -> str:
        if isinstance(value, torch.Tensor):
            return f"T{list(value.shape)}" + ("" if value.dtype == DTYPE else f":{str(value.dtype)[6:]}")
        if isinstance(value, (list, tuple)):
            inner = ",".join(short(v) for v in value)
            return f"[{inner}]" if isinstance(value, list) else f"({inner})"
        if isinstance(value, dict):
            return "{" + ",".join(f"{k}={short(v)}" for k, v in value.items()) + "}"
        if callable(value):
            return getattr(value, "__name__", type(value).__name__)
        return repr(value)

    ctor = sample.constructor_input
    parts = [short(a) for a in ctor.args] + [f"{k}={short(v)}" for k, v in ctor.kwargs.items()]
    text = f"{sample.desc or 'default'} ctor({', '.join(parts)})"
    if sample.forward_input is not None:
        fwd = sample.forward_input
        parts = [short(a) for a in fwd.args] + [f"{k}={short(v)}" for k, v in fwd.kwargs.items()]
        text += f" fwd({', '.join(parts)})"
    return text[:300]


def _clone_inputs(value: Any) -> Any:
    """Fresh leaves with equal values, strides and ``requires_grad``; repeated tensors stay shared."""
    seen: dict[int, torch.Tensor] = {}

    def clone(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) not in seen:
            seen[id(t)] = t.detach().clone().requires_grad_(t.requires_grad)
        return seen[id(t)]

    return tree_map(clone, value)


class _RandomProbe(TorchDispatchMode):
    """Notes whether any op draws random numbers (tagged ``nondeterministic_seeded``)."""

    def __init__(self) -> None:
        super().__init__()
        self.random = False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if torch.Tag.nondeterministic_seeded in func.tags:
            self.random = True
        return func(*args, **(kwargs or {}))


def draws_random(module: torch.nn.Module, args: Any, kwargs: Any) -> bool:
    probe = _RandomProbe()
    try:
        with torch.no_grad(), probe:
            module(*_clone_inputs(args), **_clone_inputs(kwargs))
    except Exception:
        return False
    return probe.random


@dataclass
class CallResult:
    """What one call leaves: outputs, buffers and parameters after it, gradients."""

    outputs: Any = None
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)
    params: dict[str, torch.Tensor] = field(default_factory=dict)
    param_grads: dict[str, torch.Tensor | None] = field(default_factory=dict)
    input_grads: list[torch.Tensor | None] = field(default_factory=list)
    backward_error: str | None = None
    grad_checked: bool = False


def _differentiable(outputs: Any) -> list[torch.Tensor]:
    return [
        t
        for t in tree_flatten(outputs)[0]
        if isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())
    ]


def _call(
    module: torch.nn.Module, callee: Callable[..., Any], sample: Any, seed: int, backward: bool, stage: list[str]
) -> CallResult:
    """Call ``callee`` on fresh input clones with the RNG at ``seed``, then backward fixed cotangents."""
    args = _clone_inputs(sample.forward_input.args)
    kwargs = _clone_inputs(sample.forward_input.kwargs)
    inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
    for p in module.parameters():
        p.grad = None
    torch.manual_seed(seed)
    stage[0] = "forward"
    outputs = callee(*args, **kwargs)
    result = CallResult(outputs=outputs)
    result.buffers = {name: b.detach().clone() for name, b in module.named_buffers()}
    result.params = {name: p.detach().clone() for name, p in module.named_parameters()}
    diff = _differentiable(outputs)
    if not (backward and diff):
        return result
    generator = torch.Generator().manual_seed(seed + 1)
    cotangents = [torch.randn(t.shape, dtype=t.dtype, generator=generator) for t in diff]
    stage[0] = "backward"
    try:
        torch.autograd.backward(diff, cotangents)
    except RuntimeError as error:
        result.backward_error = f"{type(error).__name__}: {_first_lines(str(error))}"
        return result
    result.grad_checked = True
    result.param_grads = {name: p.grad for name, p in module.named_parameters()}
    result.input_grads = [t.grad if t.requires_grad else None for t in inputs]
    return result


def _close(where: str, compiled: torch.Tensor, eager: torch.Tensor, tol: dict[str, float]) -> None:
    if compiled.shape != eager.shape or compiled.dtype != eager.dtype:
        raise Mismatch(
            where, f"{list(compiled.shape)}:{compiled.dtype} vs eager {list(eager.shape)}:{eager.dtype}", True
        )
    try:
        torch.testing.assert_close(compiled.detach(), eager.detach(), equal_nan=True, check_stride=False, **tol)
    except AssertionError as error:
        raise Mismatch(where, _first_lines(str(error), 4)) from None


def _grad_close(where: str, compiled: torch.Tensor | None, eager: torch.Tensor | None) -> None:
    if compiled is None and eager is None:
        return
    if compiled is None or eager is None:
        present = compiled if eager is None else eager
        assert present is not None
        if bool((present == 0).all()):
            return
        raise Mismatch(where, f"{'None' if compiled is None else 'a tensor'} compiled, "
                       f"{'None' if eager is None else 'a tensor'} eager")  # fmt: skip
    _close(where, compiled, eager, GRAD_TOL)


def compare(call: int, compiled: CallResult, eager: CallResult) -> None:
    """Raise ``Mismatch`` at the first difference between the two calls' results."""
    prefix = f"call {call}: "
    c_leaves, c_spec = tree_flatten(compiled.outputs)
    e_leaves, e_spec = tree_flatten(eager.outputs)
    if c_spec != e_spec:
        raise Mismatch(prefix + "output structure", f"{c_spec} vs eager {e_spec}", True)
    for i, (c, e) in enumerate(zip(c_leaves, e_leaves, strict=True)):
        where = f"{prefix}output {i}"
        if isinstance(e, torch.Tensor) != isinstance(c, torch.Tensor):
            raise Mismatch(where, f"{type(c).__name__} vs eager {type(e).__name__}", True)
        if not isinstance(e, torch.Tensor):
            if c != e and not (c != c and e != e):
                raise Mismatch(where, f"{c!r} vs eager {e!r}")
            continue
        if c.requires_grad != e.requires_grad:
            raise Mismatch(where, f"requires_grad={c.requires_grad}, eager {e.requires_grad}", True)
        _close(where, c, e, FORWARD_TOL)
    if compiled.buffers.keys() != eager.buffers.keys():
        raise Mismatch(prefix + "buffers", f"{sorted(compiled.buffers)} vs eager {sorted(eager.buffers)}", True)
    for name, e in eager.buffers.items():
        _close(f"{prefix}buffer {name} after the call", compiled.buffers[name], e, FORWARD_TOL)
    for name, e in eager.params.items():
        _close(f"{prefix}parameter {name} after the call", compiled.params[name], e, FORWARD_TOL)
    if eager.backward_error is not None or compiled.backward_error is not None:
        if (eager.backward_error is None) != (compiled.backward_error is None):
            raise Mismatch(prefix + "backward", f"raised {compiled.backward_error}, eager {eager.backward_error}")
        return
    for name, e_grad in eager.param_grads.items():
        _grad_close(f"{prefix}grad of parameter {name}", compiled.param_grads.get(name), e_grad)
    for i, (c_grad, e_grad) in enumerate(zip(compiled.input_grads, eager.input_grads, strict=True)):
        _grad_close(f"{prefix}grad of forward input {i}", c_grad, e_grad)


def build(info: Any, sample: Any, training: bool, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    ctor = sample.constructor_input
    module = info.module_cls(*ctor.args, **ctor.kwargs).to("cpu").to(DTYPE)
    module.train(training)
    return module


def check_module_sample(
    info: Any,
    sample: Any,
    training: bool,
    seed: int = 0,
    calls: int = 2,
    compiler: Callable[..., Any] = aot.nop,
    timeout: float = 0.0,
    grad: bool = True,
) -> Outcome:
    """Eager vs ``aot_module(module, compiler)`` on one sample in one mode (``grad=False``: under no_grad)."""
    if sample.forward_input is None:
        return Outcome("skip", "eager", "NoForwardInput", "the sample has no forward input")
    try:
        with _alarm(timeout):
            eager_module = build(info, sample, training, seed)
            compiled_module = copy.deepcopy(eager_module)
    except Exception as error:
        return Outcome("skip", "construct", type(error).__name__, _first_lines(str(error)))
    random = draws_random(copy.deepcopy(eager_module), sample.forward_input.args, sample.forward_input.kwargs)
    eager_results = []
    stage = ["forward"]
    for call in range(calls):
        try:
            with _alarm(timeout), torch.set_grad_enabled(grad):
                eager_results.append(_call(eager_module, eager_module, sample, seed + 100 * call, True, stage))
        except Exception as error:
            if call == 0:
                return Outcome("skip", f"eager {stage[0]}", type(error).__name__, _first_lines(str(error)))
            break  # a later eager call fails (e.g. a lazy module's state): compare the calls eager ran
    stage = ["compile"]
    outcome_random = random
    grad_checked = False
    try:
        with _alarm(timeout), torch.set_grad_enabled(grad):
            stage[0] = "compile"
            # AOTFX_SWEEP_DYNAMIC=1 (``--dynamic``): every input dimension symbolic (the workers inherit it).
            dynamic = os.environ.get("AOTFX_SWEEP_DYNAMIC") == "1"
            compiled = aot.aot_module(compiled_module, compiler, dynamic=dynamic)
            for call, eager in enumerate(eager_results):
                result = _call(compiled_module, compiled, sample, seed + 100 * call, True, stage)
                stage[0] = "compare"
                compare(call, result, eager)
                grad_checked = grad_checked or eager.grad_checked
    except Mismatch as mismatch:
        status = "random-differs" if random and not mismatch.meta else "wrong"
        return Outcome(status, "compare", "Mismatch", str(mismatch), random=outcome_random)
    except Exception as error:
        where = f"{stage[0]}"
        return Outcome("error", where, type(error).__name__, _first_lines(str(error)) or type(error).__name__, random)
    return Outcome("pass", random=outcome_random, grad_checked=grad_checked)


@dataclass
class ModuleResult:
    module: str
    seconds: float = 0.0
    note: str = ""  # module_inputs_func raised, timeout, crash
    samples: list[dict[str, Any]] = field(default_factory=list)


def run_module(
    info: Any,
    calls: int = 2,
    timeout: float = 0.0,
    modes: tuple[bool, ...] = MODES,
    start: int = 0,
    stop: int | None = None,
    grad: bool = True,
    inputs_grad: bool = True,
) -> ModuleResult:
    """Samples ``start:stop`` of ``info`` in each of ``modes``."""
    began = time.perf_counter()
    result = ModuleResult(info.name)
    for training in modes:
        mode = "train" if training else "eval"
        try:
            picked = module_samples(info, training, inputs_grad)
        except Exception as error:
            result.note += f"{mode}: module_inputs_func raised {type(error).__name__}: {_first_lines(str(error))}; "
            continue
        for index in range(start, min(stop if stop is not None else len(picked), len(picked))):
            sample = picked[index]
            outcome = check_module_sample(info, sample, training, index, calls, timeout=timeout, grad=grad)
            result.samples.append({"index": index, "mode": mode, "sample": describe(sample), **asdict(outcome)})
    result.seconds = time.perf_counter() - began
    return result


def check_module(name: str, calls: int = 2, limit: int | None = None) -> list[tuple[str, Outcome]]:
    """The samples of ModuleInfo ``name`` (the first ``limit`` per mode), train and eval.

    Returns (``mode #index description``, outcome) per sample.
    """
    info = find_module_info(name)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for training in MODES:
            for index, sample in enumerate(module_samples(info, training)[:limit]):
                outcome = check_module_sample(info, sample, training, seed=index, calls=calls)
                out.append((f"{'train' if training else 'eval'} #{index} {describe(sample)}", outcome))
    return out


# ----------------------------------------------------------------------------------------------------------------
# The sweep


CHUNK = 80  # samples per task: a module with hundreds of samples is split over tasks


def _tasks(names: list[str]) -> list[tuple[str, bool, int, int | None]]:
    """(module, training, start, stop) chunks covering every sample of every module."""
    by_name = {info.name: info for info in module_db()}
    out: list[tuple[str, bool, int, int | None]] = []
    for name in names:
        for training in MODES:
            try:
                count = len(module_samples(by_name[name], training))
            except Exception:
                count = 0  # run_module records why
            out += [(name, training, start, start + CHUNK) for start in range(0, count, CHUNK)] or [
                (name, training, 0, None)
            ]
    return out


def _task_name(task: tuple[str, bool, int, int | None]) -> str:
    name, training, start, stop = task
    return f"{name} {'train' if training else 'eval'}[{start}:{'' if stop is None else stop}]"


def _worker(calls: int, timeout: float, grad: bool, inputs_grad: bool, tasks: Any, results: Any) -> None:
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    by_name = {info.name: info for info in module_db()}
    while True:
        task = tasks.get()
        if task is None:
            return
        results.put(("start", task, os.getpid()))
        name, training, start, stop = task
        try:
            outcome = run_module(by_name[name], calls, timeout, (training,), start, stop, grad, inputs_grad)
        except Exception:
            outcome = ModuleResult(name, note=f"sweep error: {_first_lines(traceback.format_exc(), 20)}")
        results.put(("done", task, asdict(outcome)))


def sweep(
    names: list[str], jobs: int, calls: int, task_timeout: float, grad: bool = True, inputs_grad: bool = True
) -> list[dict[str, Any]]:
    """Every sample of every module in ``names``; one merged result per module, in order."""
    ctx = mp.get_context("fork")
    tasks, results = ctx.Queue(), ctx.Queue()
    all_tasks = _tasks(names)
    for task in all_tasks:
        tasks.put(task)
    workers: dict[int, Any] = {}
    running: dict[int, tuple[Any, float]] = {}
    done: dict[Any, dict[str, Any]] = {}
    sample_timeout = max(task_timeout / 4, 30.0)

    def spawn() -> None:
        proc = ctx.Process(target=_worker, args=(calls, sample_timeout, grad, inputs_grad, tasks, results), daemon=True)
        proc.start()
        workers[proc.pid] = proc

    for _ in range(min(jobs, len(all_tasks))):
        spawn()
    began = time.perf_counter()
    while len(done) < len(all_tasks):
        try:
            message = results.get(timeout=2.0)
        except queue.Empty:
            message = None
        if message is not None:
            kind, task, payload = message
            if kind == "start":
                running[payload] = (task, time.perf_counter())
            else:
                done[task] = payload
                for pid, (running_task, _) in list(running.items()):
                    if running_task == task:
                        del running[pid]
                _progress(len(done), len(all_tasks), _task_name(task), payload, began)
            continue
        now = time.perf_counter()
        for pid, proc in list(workers.items()):
            current = running.get(pid)
            dead = not proc.is_alive()
            late = current is not None and now - current[1] > task_timeout
            if not (dead or late):
                continue
            if late:
                proc.kill()
            proc.join(5)
            del workers[pid]
            running.pop(pid, None)
            if current is not None and current[0] not in done:
                note = f"{_task_name(current[0])}: " + ("timeout" if late else f"crash (exit code {proc.exitcode})")
                done[current[0]] = asdict(ModuleResult(current[0][0], note=note, seconds=now - current[1]))
                _progress(len(done), len(all_tasks), _task_name(current[0]), done[current[0]], began)
            if len(done) + len(running) < len(all_tasks):
                spawn()
    for _ in workers:
        tasks.put(None)
    for proc in workers.values():
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    merged: dict[str, dict[str, Any]] = {name: asdict(ModuleResult(name)) for name in names}
    for task in all_tasks:
        part, whole = done[task], merged[task[0]]
        whole["samples"] += part["samples"]
        whole["seconds"] += part["seconds"]
        if part["note"] and part["note"] not in whole["note"]:
            whole["note"] += part["note"]
    return [merged[name] for name in names]


def _counts(result: dict[str, Any]) -> Counter[str]:
    return Counter(sample["status"] for sample in result["samples"])


def _progress(count: int, total: int, task: str, result: dict[str, Any], start: float) -> None:
    counts = _counts(result)
    marks = " ".join(f"{k} {counts[k]}" for k in ("pass", "wrong", "error", "random-differs", "skip") if counts[k])
    extra = f" [{result['note']}]" if result["note"] else ""
    print(
        f"[{count}/{total} {time.perf_counter() - start:6.0f}s] {task:<44} {result['seconds']:6.1f}s {marks}{extra}",
        file=sys.stderr,
        flush=True,
    )


def _normalize(message: str) -> str:
    """A message with numbers and install paths blanked, to group failures by cause."""
    message = re.sub(r"/\S*/site-packages/", "", message)
    message = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", message)
    return re.sub(r"\s+", " ", message)[:200]


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    totals: Counter[str] = Counter()
    per_module = {}
    wrong, random_differs = [], []
    causes: dict[str, list[str]] = defaultdict(list)
    skips: dict[str, list[str]] = defaultdict(list)
    notes = {}
    random: Counter[str] = Counter()
    for result in results:
        counts = _counts(result)
        totals.update(counts)
        per_module[result["module"]] = dict(counts)
        if result["note"]:
            notes[result["module"]] = result["note"]
        for s in result["samples"]:
            label = f"{result['module']} [{s['mode']} #{s['index']}] {s['sample']}"
            if s["random"]:
                random[s["status"]] += 1
            if s["status"] == "wrong":
                wrong.append(f"{label}: {s['message']}")
            elif s["status"] == "random-differs":
                random_differs.append(f"{label}: {s['message']}")
            elif s["status"] == "error":
                causes[f"{s['error_type']} ({s['stage']}): {_normalize(s['message'])}"].append(result["module"])
            elif s["status"] == "skip":
                skips[f"{s['stage']} {s['error_type']}: {_normalize(s['message'])}"].append(result["module"])
    return {
        "total_samples": sum(totals.values()),
        "counts": dict(totals),
        "per_module": per_module,
        "wrong_values": wrong,
        "random_differs": random_differs,
        "error_causes": sorted(
            ({"cause": c, "samples": len(m), "modules": sorted(set(m))} for c, m in causes.items()),
            key=lambda c: -c["samples"],
        ),
        "skip_reasons": sorted(
            ({"reason": r, "samples": len(m), "modules": sorted(set(m))} for r, m in skips.items()),
            key=lambda c: -c["samples"],
        ),
        "module_notes": notes,
        "random_samples": dict(random),
    }


def print_summary(summary: dict[str, Any]) -> None:
    print("per module (pass / wrong / error / random-differs / skip):")
    for name, counts in summary["per_module"].items():
        row = " / ".join(str(counts.get(k, 0)) for k in ("pass", "wrong", "error", "random-differs", "skip"))
        note = f"  [{summary['module_notes'][name]}]" if name in summary["module_notes"] else ""
        print(f"  {name:<32} {row}{note}")
    counts = summary["counts"]
    print(
        f"\ntotal samples (module x mode x sample): {summary['total_samples']}; "
        f"pass {counts.get('pass', 0)}, wrong {counts.get('wrong', 0)}, error {counts.get('error', 0)}, "
        f"random-differs {counts.get('random-differs', 0)}, skipped {counts.get('skip', 0)}"
    )
    random = summary["random_samples"]
    if random:
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(random.items()))
        print(f"samples drawing random numbers, compared under the same seed: {sum(random.values())} ({outcomes})")
    print(f"\nwrong values ({len(summary['wrong_values'])}):")
    for line in summary["wrong_values"]:
        print(f"  {line}")
    if summary["random_differs"]:
        print(f"\nrandom samples whose values differ under the same seed ({len(summary['random_differs'])}):")
        for line in summary["random_differs"]:
            print(f"  {line}")
    print("\nerrors grouped by cause (samples: cause / modules):")
    for cause in summary["error_causes"]:
        modules = ", ".join(cause["modules"][:10]) + (" ..." if len(cause["modules"]) > 10 else "")
        print(f"  {cause['samples']:4d}  {cause['cause']}\n        {modules}")
    print("\nskipped (samples: reason / modules):")
    for skip in summary["skip_reasons"]:
        modules = ", ".join(skip["modules"][:10]) + (" ..." if len(skip["modules"]) > 10 else "")
        print(f"  {skip['samples']:4d}  {skip['reason']}\n        {modules}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", default="", help="comma-separated ModuleInfo names (nn.Linear,...); default all")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    parser.add_argument("--calls", type=int, default=2, help="calls per sample (default 2)")
    parser.add_argument(
        "--task-timeout",
        type=float,
        default=600.0,
        help=f"seconds before a worker running one task is killed "
        f"(a task: one module, one mode, up to {CHUNK} samples)",
    )
    parser.add_argument(
        "--no-grad", action="store_true", help="call eager and compiled under torch.no_grad() (inference graphs)"
    )
    parser.add_argument(
        "--frozen-inputs", action="store_true", help="forward inputs do not require grad (only parameters do)"
    )
    parser.add_argument(
        "--dynamic", action="store_true", help="compile with dynamic=True: every input dimension symbolic"
    )
    parser.add_argument("--json", default="", help="write per-sample results and the summary here")
    parser.add_argument("--summarize", default="", help="print the summary of an earlier --json file")
    args = parser.parse_args(argv)
    if args.summarize:
        with open(args.summarize) as handle:
            earlier = json.load(handle)
        print_summary(summarize(earlier["results"]))
        return 0
    warnings.filterwarnings("ignore")
    if args.dynamic:
        os.environ["AOTFX_SWEEP_DYNAMIC"] = "1"
    every = [info.name for info in module_db()]
    names = [n.strip() for n in args.modules.split(",") if n.strip()] or every
    unknown = [n for n in names if n not in every]
    if unknown:
        parser.error(f"unknown modules: {', '.join(unknown)}")
    grad_mode = "under no_grad" if args.no_grad else "grad mode on"
    grad_mode += ", inputs not requiring grad" if args.frozen_inputs else ""
    print(f"checking {len(names)} modules, train and eval, {grad_mode}, {args.jobs} jobs", file=sys.stderr)
    start = time.perf_counter()
    results = sweep(names, args.jobs, args.calls, args.task_timeout, not args.no_grad, not args.frozen_inputs)
    summary = summarize(results)
    summary["seconds"] = round(time.perf_counter() - start, 1)
    summary["grad_mode"] = not args.no_grad
    summary["inputs_require_grad"] = not args.frozen_inputs
    print_summary(summary)
    print(f"\n({summary['seconds']}s, torch {torch.__version__})")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"summary": summary, "results": results, "torch": torch.__version__}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
