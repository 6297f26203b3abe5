"""OpInfo sweep: every op of torch's ``op_db``, compiled vs eager, for aotfx and for torch's AOTAutograd.

Usage::

    python benchmarks/opinfo_sweep.py [--ops abs,view,nn.functional.conv2d] [--limit-samples 3]
                                      [--jobs 2] [--json results.json] [--no-torch] [--inplace]

For each OpInfo (CPU, float32; an op without float32 uses its first supported
dtype in the order float32, complex64, float64, complex128, int64, ...) the first
``--limit-samples`` sample inputs are checked. A check builds ``f(*tensors)``
calling the op's functional variant ``op.op(sample.input, *sample.args,
**sample.kwargs)`` with every tensor leaf of the sample as an input (everything
else baked in), and runs eager and compiled on identical clones:

- forward: same output structure; per tensor the same dtype, shape,
  ``requires_grad`` and values (``torch.testing.assert_close``, per-dtype
  tolerances below); an eager output sharing storage with input ``i`` (or with
  another output) must do so compiled too;
- backward: the gradient of ``sum(out * cotangent)`` over the differentiable
  outputs (after ``sample.output_process_fn_grad``), fixed random cotangents,
  w.r.t. every input that requires grad (``None`` and an all-zero gradient are
  treated as equal).

An exception in the eager forward skips the sample; one in the eager backward
skips only the gradient check. Any exception in the compiled function, or a
mismatch, fails the sample for that compiler. The same check runs for
``aot.aot_function(f, aot.nop)`` and ``torch._functorch.aot_autograd.aot_function(f, nop)``.

``--inplace`` checks instead the in-place variant of every OpInfo that has one
(``op.inplace_variant``, e.g. ``torch.Tensor.add_``): ``f(self, *tensors)`` calls it
on the sample (non-tensor arguments baked in). Each run gets fresh clones; ``self``
is made a non-leaf (``leaf * 1``) when it requires grad (eager refuses in-place on
such a leaf), a plain tensor otherwise (every input is detached when the OpInfo says
``supports_inplace_autograd=False``). Compared with eager: the returned value as
above (identity with / aliasing of ``self`` included), ``self`` after the call
(dtype, shape, stride, ``requires_grad``, values), the other inputs after the call,
whether ``self``'s version counter was bumped, and the gradients w.r.t. the original
leaves of ``sum(self_after * cotangent)`` (plus any other differentiable output).
Samples whose input is not a tensor, or where eager raises (e.g. broadcasting into
``self`` fails), are skipped; random ops skip the value comparisons.

Ops run in ``--jobs`` worker processes, one op at a time each; a worker that
hangs past ``--op-timeout`` or dies is replaced and the op is recorded as
``timeout``/``crash`` for both compilers. Progress goes to stderr.

The module doubles as a library: ``tests/test_opinfo.py`` imports
``find_op``, ``pick_dtype`` and ``check_sample`` from it.
"""

from __future__ import annotations

import argparse
import contextlib
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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_unflatten

# Output values of these ops are uninitialized memory: compare only dtype/shape/requires_grad.
UNINITIALIZED_OUTPUT_OPS = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted"}

DTYPE_PREFERENCE = [
    torch.float32,
    torch.complex64,
    torch.float64,
    torch.complex128,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
]

# (rtol, atol) for forward values and for gradients, per dtype; exact for integers and bool.
FORWARD_TOL = {
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float32: (1e-4, 1e-5),
    torch.complex64: (1e-4, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex128: (1e-7, 1e-7),
}
GRAD_TOL = {
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (5e-2, 5e-2),
    torch.float32: (1e-4, 1e-4),
    torch.complex64: (1e-4, 1e-4),
    torch.float64: (1e-6, 1e-6),
    torch.complex128: (1e-6, 1e-6),
}


def op_id(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def op_db() -> list[Any]:
    from torch.testing._internal.common_methods_invocations import op_db as db

    return list(db)


def find_op(name: str) -> Any:
    """The OpInfo whose ``name[.variant_test_name]`` is ``name``."""
    for op in op_db():
        if op_id(op) == name:
            return op
    raise KeyError(f"no OpInfo named {name!r}")


def pick_dtype(op: Any, device: str = "cpu") -> torch.dtype | None:
    supported = op.supported_dtypes(device)
    for dtype in DTYPE_PREFERENCE:
        if dtype in supported:
            return dtype
    return sorted(supported, key=str)[0] if supported else None


def samples(op: Any, dtype: torch.dtype, limit: int, device: str = "cpu") -> list[Any]:
    differentiable = op.supports_autograd and (dtype.is_floating_point or dtype.is_complex)
    out = []
    for sample in op.sample_inputs(device, dtype, requires_grad=differentiable):
        out.append(sample)
        if len(out) >= limit:
            break
    return out


# ----------------------------------------------------------------------------------------------------------------
# One check


class OutOfScope(Exception):
    """The sample is not something this sweep checks (the op mutates its inputs)."""


class Mismatch(AssertionError):
    """Compiled differs from eager."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"[{kind}] {message}")
        self.kind = kind


@dataclass
class Outcome:
    status: str  # "pass", "fail", "skip"
    stage: str = ""  # compile/forward, alias, forward-meta, forward-value, backward, grad-value ...
    error_type: str = ""
    message: str = ""
    grad_checked: bool = False
    aliases: int = 0  # outputs that alias an input in eager (checked to alias the same input compiled)

    @property
    def ok(self) -> bool:
        return self.status == "pass"


def _storage(t: torch.Tensor) -> int | None:
    try:
        return int(t.untyped_storage()._cdata)
    except Exception:  # sparse, nested, ...: no single storage
        return None


def _clone_leaves(leaves: Sequence[Any]) -> list[Any]:
    """Fresh leaf tensors with the same values, strides and requires_grad; repeats stay the same object."""
    seen: dict[int, torch.Tensor] = {}
    out = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            if id(leaf) not in seen:
                with torch.no_grad():
                    copy = leaf.detach().clone()
                seen[id(leaf)] = copy.requires_grad_(leaf.requires_grad)
            out.append(seen[id(leaf)])
        else:
            out.append(leaf)
    return out


def build_function(op_fn: Callable[..., Any], sample: Any) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    """``f(*tensors)`` calling ``op_fn`` on the sample, with the sample's tensor leaves as its inputs."""
    leaves, spec = tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    template = [None if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]

    def f(*tensors: torch.Tensor) -> Any:
        filled = list(template)
        for position, tensor in zip(positions, tensors, strict=True):
            filled[position] = tensor
        inp, args, kwargs = tree_unflatten(filled, spec)
        return op_fn(inp, *args, **kwargs)

    return f, [leaves[i] for i in positions]


def _tensor_tol(dtype: torch.dtype, table: dict[torch.dtype, tuple[float, float]]) -> dict[str, float]:
    rtol, atol = table.get(dtype, (0.0, 0.0))
    return {"rtol": rtol, "atol": atol}


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, table: dict[torch.dtype, tuple[float, float]]) -> None:
    torch.testing.assert_close(
        actual,
        expected,
        equal_nan=True,
        check_stride=False,
        check_layout=True,
        **_tensor_tol(expected.dtype, table),
    )


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor{tuple(value.shape)}:{value.dtype}"
    return type(value).__name__


def _structure(spec: Any) -> Any:
    """A pytree spec with lists and tuples made equal (torch's AOTAutograd returns lists for tuples)."""
    if spec.is_leaf():
        return "*"
    kind = "seq" if spec.type in (list, tuple) else getattr(spec.type, "__name__", str(spec.type))
    context = None if spec.type in (list, tuple) else repr(spec.context)
    return (kind, context, tuple(_structure(child) for child in spec.children_specs))


def _compare_outputs(
    eager: Any, compiled: Any, eager_inputs: list[torch.Tensor], compiled_inputs: list[torch.Tensor], values: bool
) -> int:
    """Raises ``Mismatch`` where compiled differs from eager; returns how many outputs alias an input."""
    aliases = 0
    e_leaves, e_spec = tree_flatten(eager)
    c_leaves, c_spec = tree_flatten(compiled)
    if len(e_leaves) != len(c_leaves):
        raise Mismatch("forward-meta", f"{len(c_leaves)} outputs, eager returns {len(e_leaves)}")
    if _structure(e_spec) != _structure(c_spec):
        raise Mismatch("forward-meta", f"output structure {_structure(c_spec)} differs from eager {_structure(e_spec)}")
    e_in_storage = {_storage(t): i for i, t in reversed(list(enumerate(eager_inputs)))}
    c_in_storage = {_storage(t): i for i, t in reversed(list(enumerate(compiled_inputs)))}
    e_out_storage: dict[int | None, int] = {}
    c_out_storage: dict[int | None, int] = {}
    for idx, (e, c) in enumerate(zip(e_leaves, c_leaves, strict=True)):
        if isinstance(e, torch.Tensor) != isinstance(c, torch.Tensor):
            raise Mismatch("forward-meta", f"output {idx} is {_describe(c)}, eager {_describe(e)}")
        if not isinstance(e, torch.Tensor):
            if type(e) is not type(c) or (e != c and not (e != e and c != c)):  # NaN == NaN
                raise Mismatch("forward-value", f"output {idx}: {c!r} != eager {e!r}")
            continue
        if e.dtype != c.dtype or e.shape != c.shape:
            raise Mismatch("forward-meta", f"output {idx}: {_describe(c)} vs eager {_describe(e)}")
        if e.requires_grad != c.requires_grad:
            raise Mismatch("forward-meta", f"output {idx}: requires_grad={c.requires_grad}, eager {e.requires_grad}")
        if e.layout != c.layout:
            raise Mismatch("forward-meta", f"output {idx}: layout {c.layout}, eager {e.layout}")
        es, cs = _storage(e), _storage(c)
        if es is not None and e.layout == torch.strided:
            e_alias, c_alias = e_in_storage.get(es), c_in_storage.get(cs)
            if e_alias != c_alias:
                what = "no input" if c_alias is None else f"input {c_alias}"
                raise Mismatch(
                    "alias",
                    f"output {idx} aliases {what}; eager aliases "
                    + (f"input {e_alias}" if e_alias is not None else "no input"),
                )
            if e_alias is not None:
                aliases += 1
                e_is = _position(eager_inputs, e)
                c_is = _position(compiled_inputs, c)
                if e_is != c_is:
                    raise Mismatch("alias", f"output {idx} is input {c_is} compiled, input {e_is} eager")
                e_base = None if e._base is None else _position(eager_inputs, e._base, -1)
                c_base = None if c._base is None else _position(compiled_inputs, c._base, -1)
                if e_base != c_base:
                    raise Mismatch("alias", f"output {idx}: _base is {_base_name(c_base)}, eager {_base_name(e_base)}")
            e_prev, c_prev = e_out_storage.setdefault(es, idx), c_out_storage.setdefault(cs, idx)
            if e_prev != c_prev:
                raise Mismatch(
                    "alias", f"output {idx} shares storage with output {c_prev} compiled, with output {e_prev} eager"
                )
        if values:
            try:
                _assert_close(c, e, FORWARD_TOL)
            except AssertionError as err:
                raise Mismatch("forward-value", f"output {idx}: {_first_lines(str(err), 3)}") from None
    return aliases


def _position(tensors: list[torch.Tensor], tensor: torch.Tensor, default: int | None = None) -> int | None:
    return next((i for i, t in enumerate(tensors) if t is tensor), default)


def _base_name(base: int | None) -> str:
    return "None" if base is None else "another tensor" if base < 0 else f"input {base}"


def _grad_inputs(inputs: list[torch.Tensor]) -> list[int]:
    out, seen = [], set()
    for i, t in enumerate(inputs):
        if t.requires_grad and id(t) not in seen:
            seen.add(id(t))
            out.append(i)
    return out


def _differentiable(outputs: Any, process: Callable[[Any], Any] | None) -> list[torch.Tensor]:
    if process is not None:
        outputs = process(outputs)
    leaves, _ = tree_flatten(outputs)
    return [
        t
        for t in leaves
        if isinstance(t, torch.Tensor)
        and t.requires_grad
        and (t.dtype.is_floating_point or t.dtype.is_complex)
        and t.layout == torch.strided
    ]


def _grads(outs: list[torch.Tensor], inputs: list[torch.Tensor], cotangents: list[torch.Tensor]) -> list[Any]:
    return list(torch.autograd.grad(outs, inputs, cotangents, allow_unused=True))


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """Raise ``TimeoutError`` in the main thread after ``seconds`` (no-op where SIGALRM is unavailable)."""
    if seconds <= 0 or not hasattr(signal, "SIGALRM"):
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise TimeoutError(f"sample took over {seconds:.0f}s")

    try:
        previous = signal.signal(signal.SIGALRM, handler)
    except ValueError:  # not the main thread
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _first_lines(text: str, n: int = 1) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[:n])[:400]


@dataclass
class EagerResult:
    inputs: list[torch.Tensor]
    outputs: Any
    grad_inputs: list[int]
    cotangents: list[torch.Tensor] | None  # None: no gradient check
    grads: list[Any] | None
    backward_error: str = ""


def run_eager(op: Any, f: Callable[..., Any], tensors: list[torch.Tensor], sample: Any, seed: int) -> EagerResult:
    """Eager forward (raises if it fails) and, when it can, eager gradients."""
    inputs = _clone_leaves(tensors)
    versions = [t._version for t in inputs]
    torch.manual_seed(seed)
    outputs = f(*inputs)
    mutated = [i for i, (t, v) in enumerate(zip(inputs, versions, strict=True)) if t._version != v]
    if mutated:
        raise OutOfScope(f"the op mutates input(s) {mutated}: input mutations are out of scope")
    grad_inputs = _grad_inputs(inputs)
    diff = _differentiable(outputs, sample.output_process_fn_grad)
    result = EagerResult(inputs, outputs, grad_inputs, None, None)
    if not (op.supports_autograd and grad_inputs and diff):
        return result
    generator = torch.Generator().manual_seed(seed + 1)
    cotangents = [torch.randn(t.shape, dtype=t.dtype, generator=generator) for t in diff]
    try:
        grads = _grads(diff, [inputs[i] for i in grad_inputs], cotangents)
    except Exception as err:
        result.backward_error = f"{type(err).__name__}: {_first_lines(str(err))}"
        return result
    result.cotangents, result.grads = cotangents, grads
    return result


def check_compiled(
    compile_fn: Callable[[Callable[..., Any]], Callable[..., Any]],
    f: Callable[..., Any],
    tensors: list[torch.Tensor],
    sample: Any,
    eager: EagerResult,
    seed: int,
    values: bool = True,
    timeout: float = 0.0,
) -> Outcome:
    """Compile ``f`` with ``compile_fn``, run it on fresh clones and compare with ``eager``."""
    stage = "compile/forward"
    try:
        with _alarm(timeout):
            compiled = compile_fn(f)
            inputs = _clone_leaves(tensors)
            torch.manual_seed(seed)
            outputs = compiled(*inputs)
            stage = "forward-check"
            aliases = _compare_outputs(eager.outputs, outputs, eager.inputs, inputs, values)
            if eager.cotangents is None or eager.grads is None:
                return Outcome("pass", aliases=aliases)
            stage = "backward"
            diff = _differentiable(outputs, sample.output_process_fn_grad)
            if len(diff) != len(eager.cotangents):
                raise Mismatch("backward", f"{len(diff)} differentiable outputs, eager has {len(eager.cotangents)}")
            grads = _grads(diff, [inputs[i] for i in eager.grad_inputs], eager.cotangents)
            stage = "grad-check"
            for position, (g_c, g_e) in enumerate(zip(grads, eager.grads, strict=True)):
                where = f"grad of input {eager.grad_inputs[position]}"
                if g_e is None and g_c is None:
                    continue
                if g_e is None or g_c is None:
                    present = g_c if g_e is None else g_e
                    if values and present.layout == torch.strided and not bool((present == 0).all()):
                        raise Mismatch(
                            "grad-value",
                            f"{where}: {'None' if g_c is None else 'a tensor'} compiled, "
                            f"{'None' if g_e is None else 'a tensor'} eager",
                        )
                    continue
                if g_c.shape != g_e.shape or g_c.dtype != g_e.dtype:
                    raise Mismatch("grad-meta", f"{where}: {_describe(g_c)} vs eager {_describe(g_e)}")
                if not values:
                    continue
                try:
                    _assert_close(g_c, g_e, GRAD_TOL)
                except AssertionError as err:
                    raise Mismatch("grad-value", f"{where}: {_first_lines(str(err), 3)}") from None
            return Outcome("pass", grad_checked=True, aliases=aliases)
    except Mismatch as err:
        return Outcome("fail", err.kind, "Mismatch", str(err)[len(err.kind) + 3 :])
    except Exception as err:
        return Outcome("fail", stage, type(err).__name__, _first_lines(str(err)) or type(err).__name__)


class _Probe(TorchDispatchMode):
    """Notes, below autograd, random ops (tagged ``nondeterministic_seeded``) and writes into given storages."""

    def __init__(self, storages: dict[int | None, int]) -> None:
        super().__init__()
        self.storages = storages
        self.random = False
        self.written: set[int] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if torch.Tag.nondeterministic_seeded in func.tags:
            self.random = True
        if func is torch.ops.aten.native_batch_norm.default and len(args) > 5 and args[5]:
            # Writes running_mean/running_var (when training) though its schema says it does not.
            args_written = [args[3], args[4]]
            self.written.update(self.storages[_storage(t)] for t in args_written if _storage(t) in self.storages)
        for position, argument in enumerate(func._schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            value = kwargs.get(argument.name) if argument.kwarg_only or position >= len(args) else args[position]
            for tensor in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(tensor, torch.Tensor) and tensor.layout == torch.strided:
                    found = self.storages.get(_storage(tensor))
                    if found is not None:
                        self.written.add(found)
        return func(*args, **kwargs)


def probe(f: Callable[..., Any], tensors: list[torch.Tensor]) -> tuple[bool, list[int]]:
    """Run ``f`` once: does it draw random numbers, and which inputs does it write to?

    Random values are not comparable: OpInfos of random ops often reseed inside the op
    (``wrapper_set_seed``), which a trace does not capture. Some kernels (``native_batch_norm``'s
    running stats) write an input without bumping its version counter, hence the schema check.
    """
    inputs = _clone_leaves(tensors)
    before = [t.detach().clone() for t in inputs]
    detector = _Probe({_storage(t): i for i, t in enumerate(inputs) if t.layout == torch.strided})
    try:
        with torch.no_grad(), detector:
            f(*inputs)
    except Exception:
        return False, []
    changed = {
        i for i, (a, b) in enumerate(zip(before, inputs, strict=True)) if a.layout == torch.strided and not _same(a, b)
    }
    return detector.random, sorted(detector.written | changed)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.stride() != b.stride() or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        a, b = a.nan_to_num(), b.detach().nan_to_num()
    return bool(torch.equal(a, b))


def check_sample(
    op: Any,
    sample: Any,
    compilers: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]],
    seed: int = 0,
    timeout: float = 0.0,
) -> tuple[Outcome | None, dict[str, Outcome]]:
    """Eager once, then every compiler. Returns (eager skip outcome or None, outcome per compiler)."""
    f, tensors = build_function(op.op, sample)
    try:
        with _alarm(timeout):
            eager = run_eager(op, f, tensors, sample, seed)
    except Exception as err:
        return Outcome("skip", "eager", type(err).__name__, _first_lines(str(err))), {}
    random, written = probe(f, tensors)
    if written:
        message = f"the op writes to input(s) {written}: input mutations are out of scope"
        return Outcome("skip", "eager", "OutOfScope", message), {}
    values = op.name not in UNINITIALIZED_OUTPUT_OPS and not random
    results = {
        name: check_compiled(fn, f, tensors, sample, eager, seed, values, timeout) for name, fn in compilers.items()
    }
    return None, results


def ours(fn: Callable[..., Any]) -> Callable[..., Any]:
    import aot

    return aot.aot_function(fn, aot.nop)


def torchs(fn: Callable[..., Any]) -> Callable[..., Any]:
    from functorch.compile import nop
    from torch._functorch.aot_autograd import aot_function

    return aot_function(fn, nop)


# ----------------------------------------------------------------------------------------------------------------
# In-place variants (--inplace)


def has_inplace(op: Any) -> bool:
    return op.inplace_variant is not None


@dataclass
class InplaceRun:
    leaves: list[Any]  # fresh leaf clones; leaves[0] is self's leaf
    self_: torch.Tensor  # the tensor mutated: a non-leaf (``leaf * 1``) when it requires grad
    outputs: Any = None
    version_before: int = 0
    after: list[Any] = field(default_factory=list)  # detached snapshots of every input right after the call


def build_inplace_function(op: Any, sample: Any) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    """``f(self, *tensor_args)`` calling ``op.inplace_variant``; raises ``OutOfScope`` if the input is no tensor."""
    if not isinstance(sample.input, torch.Tensor):
        raise OutOfScope(f"sample input is {type(sample.input).__name__}, not a tensor")
    return build_function(op.inplace_variant, sample)  # the sample's input is its first tensor leaf


def _inplace_inputs(tensors: list[torch.Tensor], autograd: bool) -> InplaceRun:
    """Fresh clones; ``self`` made a non-leaf when it requires grad (eager refuses in-place on such a leaf)."""
    leaves = _clone_leaves(tensors)
    if not autograd:
        leaves = [t.detach() if isinstance(t, torch.Tensor) else t for t in leaves]
    self_ = leaves[0] * 1 if leaves[0].requires_grad else leaves[0]
    return InplaceRun(leaves, self_, version_before=self_._version)


def _call_inplace(fn: Callable[..., Any], run: InplaceRun, seed: int) -> InplaceRun:
    rest = run.leaves[1:]
    torch.manual_seed(seed)
    run.outputs = fn(run.self_, *rest)
    run.after = [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in [run.self_, *rest]]
    return run


def _inplace_targets(run: InplaceRun) -> list[torch.Tensor]:
    """``self``'s new value, then any other differentiable output."""
    out = [t for t in [run.self_] if t.requires_grad and (t.dtype.is_floating_point or t.dtype.is_complex)]
    leaves, _ = tree_flatten(run.outputs)
    for t in leaves:
        if isinstance(t, torch.Tensor) and t is not run.self_ and t.layout == torch.strided and t.requires_grad:
            if t.dtype.is_floating_point or t.dtype.is_complex:
                out.append(t)
    return out


def _compare_inplace_state(eager: InplaceRun, compiled: InplaceRun, values: bool) -> None:
    e, c = eager.self_, compiled.self_
    if (e.dtype, e.shape, e.stride()) != (c.dtype, c.shape, c.stride()):
        raise Mismatch(
            "self-meta",
            f"self after: {c.dtype} {tuple(c.shape)} stride {c.stride()}, "
            f"eager {e.dtype} {tuple(e.shape)} stride {e.stride()}",
        )
    if e.requires_grad != c.requires_grad:
        raise Mismatch("self-meta", f"self after: requires_grad={c.requires_grad}, eager {e.requires_grad}")
    e_bump, c_bump = e._version - eager.version_before, c._version - compiled.version_before
    if (e_bump > 0) != (c_bump > 0):
        raise Mismatch("self-version", f"self's version counter bumped by {c_bump}, eager by {e_bump}")
    for position, (a_e, a_c) in enumerate(zip(eager.after, compiled.after, strict=True)):
        if not isinstance(a_e, torch.Tensor) or not values:
            continue
        what = "self after" if position == 0 else f"input {position} after"
        if a_e.shape != a_c.shape:
            raise Mismatch("self-meta", f"{what}: shape {tuple(a_c.shape)}, eager {tuple(a_e.shape)}")
        try:
            _assert_close(a_c, a_e, FORWARD_TOL)
        except AssertionError as err:
            raise Mismatch("self-value", f"{what}: {_first_lines(str(err), 3)}") from None


def check_inplace_sample(
    op: Any,
    sample: Any,
    compilers: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]],
    seed: int = 0,
    timeout: float = 0.0,
) -> tuple[Outcome | None, dict[str, Outcome]]:
    """The in-place variant: eager once, then every compiler (see ``--inplace`` in the module docstring)."""
    try:
        f, tensors = build_inplace_function(op, sample)
    except OutOfScope as err:
        return Outcome("skip", "eager", "OutOfScope", str(err)), {}
    autograd = bool(op.supports_inplace_autograd)
    try:
        with _alarm(timeout):
            eager = _call_inplace(f, _inplace_inputs(tensors, autograd), seed)
    except Exception as err:
        return Outcome("skip", "eager", type(err).__name__, _first_lines(str(err))), {}
    detector = _Probe({})
    try:
        with torch.no_grad(), detector:
            _call_inplace(f, _inplace_inputs(tensors, autograd), seed)
    except Exception:
        pass
    values = not detector.random
    grad_leaves = _grad_inputs(eager.leaves)
    targets = _inplace_targets(eager)
    cotangents = grads = None
    if grad_leaves and targets:
        generator = torch.Generator().manual_seed(seed + 1)
        cotangents = [torch.randn(t.shape, dtype=t.dtype, generator=generator) for t in targets]
        try:
            grads = _grads(targets, [eager.leaves[i] for i in grad_leaves], cotangents)
        except Exception:
            cotangents = None
    results = {}
    for name, compile_fn in compilers.items():
        results[name] = _check_inplace_compiled(
            compile_fn, f, tensors, eager, autograd, grad_leaves, cotangents, grads, seed, values, timeout
        )
    return None, results


def _check_inplace_compiled(
    compile_fn: Callable[[Callable[..., Any]], Callable[..., Any]],
    f: Callable[..., Any],
    tensors: list[torch.Tensor],
    eager: InplaceRun,
    autograd: bool,
    grad_leaves: list[int],
    cotangents: list[torch.Tensor] | None,
    eager_grads: list[Any] | None,
    seed: int,
    values: bool,
    timeout: float,
) -> Outcome:
    stage = "compile/forward"
    try:
        with _alarm(timeout):
            compiled_fn = compile_fn(f)
            run = _call_inplace(compiled_fn, _inplace_inputs(tensors, autograd), seed)
            stage = "forward-check"
            e_inputs = [eager.self_, *eager.leaves[1:]]
            c_inputs = [run.self_, *run.leaves[1:]]
            aliases = _compare_outputs(eager.outputs, run.outputs, e_inputs, c_inputs, values)
            _compare_inplace_state(eager, run, values)
            if cotangents is None or eager_grads is None:
                return Outcome("pass", aliases=aliases)
            stage = "backward"
            targets = _inplace_targets(run)
            if len(targets) != len(cotangents):
                raise Mismatch("backward", f"{len(targets)} differentiable targets, eager has {len(cotangents)}")
            grads = _grads(targets, [run.leaves[i] for i in grad_leaves], cotangents)
            stage = "grad-check"
            for position, (g_c, g_e) in enumerate(zip(grads, eager_grads, strict=True)):
                leaf = grad_leaves[position]
                where = "grad of self's leaf" if leaf == 0 else f"grad of input {leaf}"
                if g_e is None or g_c is None:
                    present = g_c if g_e is None else g_e
                    if present is not None and values and not bool((present == 0).all()):
                        raise Mismatch("grad-value", f"{where}: {'None' if g_c is None else 'a tensor'} compiled")
                    continue
                if g_c.shape != g_e.shape or g_c.dtype != g_e.dtype:
                    raise Mismatch("grad-meta", f"{where}: {_describe(g_c)} vs eager {_describe(g_e)}")
                if values:
                    try:
                        _assert_close(g_c, g_e, GRAD_TOL)
                    except AssertionError as err:
                        raise Mismatch("grad-value", f"{where}: {_first_lines(str(err), 3)}") from None
            return Outcome("pass", grad_checked=True, aliases=aliases)
    except Mismatch as err:
        return Outcome("fail", err.kind, "Mismatch", str(err)[len(err.kind) + 3 :])
    except Exception as err:
        return Outcome("fail", stage, type(err).__name__, _first_lines(str(err)) or type(err).__name__)


# ----------------------------------------------------------------------------------------------------------------
# The sweep


@dataclass
class OpResult:
    op: str
    dtype: str = ""
    seconds: float = 0.0
    note: str = ""  # why no sample was checked: no dtype, sample_inputs raised, timeout, crash
    samples: list[dict[str, Any]] = field(default_factory=list)


def run_op(
    op: Any, limit: int, compilers: dict[str, Callable[..., Any]], timeout: float, inplace: bool = False
) -> OpResult:
    start = time.perf_counter()
    result = OpResult(op_id(op))
    dtype = pick_dtype(op)
    if dtype is None:
        result.note = "no supported dtype on cpu"
        return result
    result.dtype = str(dtype).removeprefix("torch.")
    try:
        with _alarm(timeout):
            picked = samples(op, dtype, limit)
    except Exception as err:
        result.note = f"sample_inputs raised {type(err).__name__}: {_first_lines(str(err))}"
        return result
    for index, sample in enumerate(picked):
        check = check_inplace_sample if inplace else check_sample
        skip, outcomes = check(op, sample, compilers, seed=index, timeout=timeout)
        entry: dict[str, Any] = {"index": index}
        if skip is not None:
            entry["skip"] = f"{skip.error_type}: {skip.message}"
        for name, outcome in outcomes.items():
            entry[name] = asdict(outcome)
        result.samples.append(entry)
    result.seconds = time.perf_counter() - start
    return result


def _worker(limit: int, names: list[str], timeout: float, tasks: Any, results: Any, inplace: bool = False) -> None:
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    by_name = {op_id(op): op for op in op_db()}
    table = {"ours": ours, "torch": torchs}
    compilers = {name: table[name] for name in names}
    while True:
        task = tasks.get()
        if task is None:
            return
        results.put(("start", task, os.getpid()))
        try:
            outcome = run_op(by_name[task], limit, compilers, timeout, inplace)
        except Exception:
            outcome = OpResult(task, note=f"sweep error: {_first_lines(traceback.format_exc(), 20)}")
        results.put(("done", task, asdict(outcome)))


def sweep(
    names: list[str], limit: int, jobs: int, compilers: list[str], op_timeout: float, inplace: bool = False
) -> list[dict[str, Any]]:
    ctx = mp.get_context("fork")
    tasks, results = ctx.Queue(), ctx.Queue()
    for name in names:
        tasks.put(name)
    workers: dict[int, Any] = {}
    running: dict[int, tuple[str, float]] = {}  # pid -> (op, start)
    done: dict[str, dict[str, Any]] = {}
    sample_timeout = max(op_timeout / max(limit, 1) / 2, 30.0)

    def spawn() -> None:
        worker_args = (limit, compilers, sample_timeout, tasks, results, inplace)
        proc = ctx.Process(target=_worker, args=worker_args, daemon=True)
        proc.start()
        workers[proc.pid] = proc

    for _ in range(min(jobs, len(names))):
        spawn()
    start = time.perf_counter()
    while len(done) < len(names):
        try:
            message = results.get(timeout=2.0)
        except queue.Empty:
            message = None
        if message is not None:
            kind, name, payload = message
            if kind == "start":
                running[payload] = (name, time.perf_counter())
            else:
                done[name] = payload
                for pid, (op_name, _) in list(running.items()):
                    if op_name == name:
                        del running[pid]
                _progress(len(done), len(names), payload, start)
            continue
        now = time.perf_counter()
        for pid, proc in list(workers.items()):
            current = running.get(pid)
            dead = not proc.is_alive()
            late = current is not None and now - current[1] > op_timeout
            if not (dead or late):
                continue
            if late:
                proc.kill()
            proc.join(5)
            del workers[pid]
            running.pop(pid, None)
            if current is not None and current[0] not in done:
                note = "timeout" if late else f"crash (exit code {proc.exitcode})"
                done[current[0]] = asdict(OpResult(current[0], note=note, seconds=now - current[1]))
                _progress(len(done), len(names), done[current[0]], start)
            if len(done) + len(running) < len(names):
                spawn()
    for _ in workers:
        tasks.put(None)
    for proc in workers.values():
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    return [done[name] for name in names]


def _progress(count: int, total: int, result: dict[str, Any], start: float) -> None:
    checked = [s for s in result["samples"] if "skip" not in s]
    marks = []
    for name in ("ours", "torch"):
        if checked and name in checked[0]:
            passed = sum(s[name]["status"] == "pass" for s in checked)
            marks.append(f"{name} {passed}/{len(checked)}")
    extra = f" [{result['note']}]" if result["note"] else ""
    print(
        f"[{count}/{total} {time.perf_counter() - start:6.0f}s] {result['op']:<45} {result['seconds']:5.1f}s "
        + " ".join(marks)
        + extra,
        file=sys.stderr,
        flush=True,
    )


# ----------------------------------------------------------------------------------------------------------------
# Summary


def _normalize(message: str) -> str:
    """A message with numbers and names of shapes blanked, to group failures by cause."""
    message = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", message)
    return re.sub(r"\s+", " ", message)[:160]


def summarize(results: list[dict[str, Any]], compilers: list[str]) -> dict[str, Any]:
    total = 0
    passed: Counter[str] = Counter()
    ops_ours_only_fail: list[dict[str, Any]] = []
    ops_torch_only_fail: list[str] = []
    ops_both_fail: list[str] = []
    ops_all_skipped: list[str] = []
    causes: dict[str, list[str]] = defaultdict(list)
    skipped: Counter[str] = Counter()
    for result in results:
        for sample in result["samples"]:
            if "skip" in sample:
                if "OutOfScope" not in sample["skip"]:
                    skipped["eager raised"] += 1
                elif "mutat" in sample["skip"]:
                    skipped["out of scope (mutates an input)"] += 1
                else:
                    skipped["out of scope (input is not a tensor)"] += 1
        checked = [s for s in result["samples"] if "skip" not in s]
        if not checked:
            ops_all_skipped.append(
                f"{result['op']}: {result['note'] or (result['samples'] and result['samples'][0]['skip'])}"
            )
            continue
        total += len(checked)
        for name in compilers:
            passed[name] += sum(s[name]["status"] == "pass" for s in checked)
        if "ours" not in compilers:
            continue
        ours_fail = [s for s in checked if s["ours"]["status"] != "pass"]
        for s in ours_fail:
            o = s["ours"]
            causes[f"{o['stage']} {o['error_type']}: {_normalize(o['message'])}"].append(result["op"])
        if "torch" not in compilers:
            continue
        torch_fail = [s for s in checked if s["torch"]["status"] != "pass"]
        ours_only = [s for s in ours_fail if s["torch"]["status"] == "pass"]
        if ours_only:
            o = ours_only[0]["ours"]
            ops_ours_only_fail.append(
                {
                    "op": result["op"],
                    "samples": len(ours_only),
                    "stage": o["stage"],
                    "error_type": o["error_type"],
                    "message": o["message"],
                }
            )
        elif ours_fail:
            ops_both_fail.append(result["op"])
        if any(s["ours"]["status"] == "pass" for s in torch_fail):
            ops_torch_only_fail.append(result["op"])
    summary: dict[str, Any] = {"total_samples": total, "passed": dict(passed), "samples_skipped": dict(skipped)}
    if "ours" in compilers and "torch" in compilers:
        summary["ratio_ours_over_torch"] = passed["ours"] / passed["torch"] if passed["torch"] else None
    summary["ops_ours_fail_torch_pass"] = ops_ours_only_fail
    summary["ops_both_fail"] = ops_both_fail
    summary["ops_torch_fail_ours_pass"] = ops_torch_only_fail
    summary["ops_not_checked"] = ops_all_skipped
    summary["our_failure_causes"] = sorted(
        ({"cause": cause, "samples": len(ops), "ops": sorted(set(ops))} for cause, ops in causes.items()),
        key=lambda c: -c["samples"],
    )
    return summary


def print_summary(summary: dict[str, Any]) -> None:
    passed = summary["passed"]
    skipped = ", ".join(f"{why}: {count}" for why, count in summary["samples_skipped"].items())
    print(f"total samples checked: {summary['total_samples']} (skipped: {skipped or 'none'})")
    for name, count in passed.items():
        print(f"{name} passed: {count}")
    if summary.get("ratio_ours_over_torch") is not None:
        print(f"ratio ours/torch: {summary['ratio_ours_over_torch']:.3f}")
    print(f"ops not checked (no dtype / every sample skipped in eager): {len(summary['ops_not_checked'])}")
    if "torch" in passed and "ours" in passed:
        print(f"ops failing for both: {len(summary['ops_both_fail'])}")
        print(f"ops where torch fails and ours passes: {len(summary['ops_torch_fail_ours_pass'])}")
    bad = summary["ops_ours_fail_torch_pass"]
    if bad:
        print(f"\nops where ours fails and torch passes ({len(bad)}):")
        for item in bad:
            where = f"{item['op']} [{item['samples']} samples] {item['stage']} {item['error_type']}"
            print(f"  {where}: {item['message'][:200]}")
    if summary["our_failure_causes"]:
        print("\nour failures grouped by cause (samples, ops):")
        for cause in summary["our_failure_causes"][:25]:
            ops = ", ".join(cause["ops"][:8]) + (" ..." if len(cause["ops"]) > 8 else "")
            print(f"  {cause['samples']:4d}  {cause['cause'][:150]}\n        ops: {ops}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default="", help="comma-separated OpInfo names (name or name.variant); default all")
    parser.add_argument("--limit-samples", type=int, default=3, help="samples per op (default 3)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    parser.add_argument("--json", default="", help="write per-sample results and the summary here")
    parser.add_argument("--no-torch", action="store_true", help="check aotfx only")
    parser.add_argument(
        "--inplace", action="store_true", help="check the in-place variants (op.inplace_variant) instead"
    )
    parser.add_argument("--op-timeout", type=float, default=300.0, help="seconds before an op's worker is killed")
    args = parser.parse_args(argv)

    warnings.filterwarnings("ignore")
    every = [op_id(op) for op in op_db() if has_inplace(op) or not args.inplace]
    if args.ops:
        wanted = [name.strip() for name in args.ops.split(",") if name.strip()]
        unknown = [name for name in wanted if name not in every]
        # A bare name selects all its variants.
        names = [n for n in every if n in wanted or any(n.startswith(w + ".") for w in wanted)]
        if unknown and not names:
            parser.error(f"unknown ops: {', '.join(unknown)}")
    else:
        names = every
    names = list(dict.fromkeys(names))
    compilers = ["ours"] if args.no_torch else ["ours", "torch"]
    mode = "in-place variants" if args.inplace else "functional variants"
    print(f"checking {len(names)} ops ({mode}), {args.limit_samples} samples each, {args.jobs} jobs", file=sys.stderr)
    start = time.perf_counter()
    results = sweep(names, args.limit_samples, args.jobs, compilers, args.op_timeout, args.inplace)
    summary = summarize(results, compilers)
    summary["mode"] = "inplace" if args.inplace else "functional"
    summary["seconds"] = round(time.perf_counter() - start, 1)
    print_summary(summary)
    print(f"\n({summary['seconds']}s)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"summary": summary, "results": results, "torch": torch.__version__}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
