"""Eager is the oracle: run a program eagerly and compiled on the same inputs, compare everything.

``check(fn, make_args)`` compares values, gradients, the inputs' state after the
call, version counters, which outputs alias which inputs (and each other),
``_base`` identity, ``requires_grad``/``grad_fn`` presence, and, when eager
raises, the exception type.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

import aot

__all__ = [
    "ATOL",
    "AUTOCAST_ATOL",
    "AUTOCAST_RTOL",
    "GRAD_FACTOR",
    "MODEL_ATOL",
    "MODEL_RTOL",
    "MODES",
    "RTOL",
    "assert_close",
    "check",
    "check_in_mode",
    "clone_args",
    "derivatives",
    "mode_params",
    "params_with_known_wrong",
]

# Tolerances, stated once. Compiled graphs run the same ATen kernels as eager; only the order of
# floating-point sums may differ (a gradient adds its contributions in another order: 10x).
RTOL = 1.3e-6
ATOL = 1e-5
GRAD_FACTOR = 10
# A whole model (a deep chain of kernels, batch statistics) accumulates more reordering.
MODEL_RTOL = 1e-5
MODEL_ATOL = 1e-5
# bfloat16 under autocast: its sums round at every step.
AUTOCAST_RTOL = AUTOCAST_ATOL = 1e-2


def assert_close(
    actual: Any,
    expected: Any,
    *,
    model: bool = False,
    grad: bool = False,
    msg: str | None = None,
    equal_nan: bool = False,
) -> None:
    """``actual`` equals ``expected`` within the oracle's tolerance for one function's (or a whole
    ``model``'s) values, or their gradients; ``equal_nan``: a NaN where eager has one matches."""
    rtol, atol = (MODEL_RTOL, MODEL_ATOL) if model else (RTOL, ATOL)
    factor = GRAD_FACTOR if grad else 1
    torch.testing.assert_close(actual, expected, rtol=rtol * factor, atol=atol * factor, msg=msg, equal_nan=equal_nan)


def params_with_known_wrong(names: Any, known_wrong: dict[tuple[str, str], str], mode: str) -> list[Any]:
    """Test parameters for ``names`` in ``mode``; each pair in ``known_wrong`` a strict xfail, so a fix shows."""
    import pytest

    return [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=known_wrong[name, mode]))
        if (name, mode) in known_wrong
        else name
        for name in names
    ]


# Whether the gradient w.r.t. non-leaf inputs the program wrote, or sharing memory with another input, is
# compared (see ``_check_once``): off until those classes are fixed; ``AOTFX_ORACLE_INPUT_GRADS=written,aliased``
# (``benchmarks/fuzz_mutation.py --input-grads written,aliased``) turns them on.
_INPUT_GRADS = os.environ.get("AOTFX_ORACLE_INPUT_GRADS", "").split(",")
WRITTEN_INPUT_GRADS = "written" in _INPUT_GRADS
ALIASED_INPUT_GRADS = "aliased" in _INPUT_GRADS

# The caller's modes a fuzz class is checked in: grad on, ``torch.no_grad()``, ``torch.inference_mode()``.
MODES = ("training", "no_grad", "inference_mode")


def mode_params(names: Any, known_wrong: dict[tuple[str, str], str]) -> list[Any]:
    """``(name, mode)`` parameters for every name in every mode of :data:`MODES`; each pair in
    ``known_wrong`` a strict xfail, so a fix shows."""
    import pytest

    return [
        pytest.param(name, mode, marks=pytest.mark.xfail(strict=True, reason=known_wrong[name, mode]))
        if (name, mode) in known_wrong
        else pytest.param(name, mode)
        for name in sorted(names)
        for mode in MODES
    ]


def check_in_mode(fn: Callable[..., Any], make_args: Callable[[], Any], mode: str) -> None:
    """:func:`check` called in ``mode`` (one of :data:`MODES`), with a deep comparison; warnings silenced.
    Under ``no_grad`` and ``inference_mode`` there is no backward to compare."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "training":
            check(fn, make_args, deep=True)
        else:
            with torch.no_grad() if mode == "no_grad" else torch.inference_mode():
                check(fn, make_args, backward=False, deep=True)


def functional_nop(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
    """The ``nop`` backend, asserting first that the graph it is handed mutates nothing."""
    for node in gm.graph.nodes:
        target = node.target
        if isinstance(target, torch._ops.OpOverload):
            assert not target._schema.is_mutable, f"mutating op {target} handed to a backend:\n{gm.code}"
    return gm


def _weighted_sum(values: Any, seed: int) -> torch.Tensor:
    """``sum(v * w)`` over the values requiring grad, ``w`` fixed random: every derivative reaches every element."""
    generator = torch.Generator().manual_seed(seed)
    total = torch.zeros(())
    for value in values:
        if isinstance(value, torch.Tensor) and value.requires_grad:
            weight = torch.randn(value.shape, generator=generator, dtype=value.dtype)
            total = total + (torch.view_as_real(value * weight) if value.is_complex() else value * weight).sum()
    return total


def derivatives(fn: Callable[..., Any], args: Any, order: int, wrt: Any = ()) -> list[Any]:
    """Eager's higher-order facts of ``fn(*args)``: its outputs, its 1st..``order - 1``-th derivatives (each the
    gradient of a fixed weighted sum of the previous ones, with ``create_graph=True``, w.r.t. ``wrt`` or the
    arguments requiring grad), and the ``.grad`` a final ``backward()`` leaves (the ``order``-th), all detached."""
    targets = list(wrt) or [a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor) and a.requires_grad]
    outs = [o for o in tree_flatten(fn(*args))[0] if isinstance(o, torch.Tensor)]
    found: list[Any] = [[o.detach() for o in outs]]
    current: list[Any] = outs
    for k in range(order - 1):
        total = _weighted_sum(current, k)
        if not total.requires_grad:  # a linear function: its derivative is constant, with no history
            found.append(None)
            current = []
            continue
        grads = torch.autograd.grad(total, targets, create_graph=True, allow_unused=True)
        found.append([(g.detach(), g.requires_grad) if g is not None else None for g in grads])
        current = list(grads)
    last = _weighted_sum(current, order - 1)
    if last.requires_grad:
        last.backward()
    found.append([t.grad for t in targets])
    return found


def clone_args(args: Any) -> Any:
    """A deep copy of a pytree of arguments; leaf tensors keep strides and ``requires_grad``."""

    def clone(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        copy = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=value.device)
        with torch.no_grad():
            copy.copy_(value)
        return copy.requires_grad_(value.requires_grad)

    leaves, spec = tree_flatten(args)
    return spec.unflatten([clone(leaf) for leaf in leaves])


def _tensor_leaves(tree: Any) -> list[torch.Tensor]:
    return [leaf for leaf in tree_flatten(tree)[0] if isinstance(leaf, torch.Tensor)]


def _storage(t: torch.Tensor) -> int:
    if t.layout == torch.sparse_coo:  # no storage of its own: its memory is its values'
        return _storage(t._values())
    return int(t.untyped_storage()._cdata)


def _alias_signature(inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> list[tuple[Any, ...]]:
    """For each output: which inputs/outputs it shares storage with, and what its ``_base`` is."""
    rows = []
    for out in outputs:
        shares_inputs = tuple(i for i, inp in enumerate(inputs) if _storage(inp) == _storage(out))
        shares_outputs = tuple(j for j, other in enumerate(outputs) if _storage(other) == _storage(out))
        is_input = tuple(i for i, inp in enumerate(inputs) if inp is out)
        same_as = tuple(j for j, other in enumerate(outputs) if other is out)
        base = out._base
        base_is = (
            (
                "input",
                tuple(i for i, inp in enumerate(inputs) if base is inp or base is inp._base),
            )
            if base is not None
            else ("none",)
        )
        base_out = tuple(j for j, other in enumerate(outputs) if base is not None and base is other)
        rows.append((shares_inputs, shares_outputs, is_input, same_as, base_is, base_out))
    return rows


def _version(t: torch.Tensor) -> int:
    """The version counter; 0 for inference tensors, which have none."""
    return 0 if t.is_inference() else t._version


def _autograd_state(t: torch.Tensor) -> tuple[Any, ...]:
    """Whether ``grad_fn`` is set and the tensor is a leaf, or the error reading them raises (as eager may)."""
    try:
        return (t.grad_fn is None, t.is_leaf)
    except RuntimeError as error:
        return ("raises", type(error).__name__)


def _grad_roots(inputs: list[torch.Tensor]) -> list[Any]:
    """What to walk to the leaves later: each input requiring grad's ``grad_fn``, or the leaf itself."""
    return [t if t.grad_fn is None else t.grad_fn for t in inputs if t.requires_grad]


def _made_leaf(t: torch.Tensor | None, compared: set[int]) -> bool:
    """Whether ``t`` is a leaf requiring grad not among ``compared`` (ids of leaves already compared)."""
    if t is None or id(t) in compared or not t.requires_grad:
        return False
    try:
        return t.is_leaf
    except RuntimeError:  # reading a stale view's history may raise
        return False


def leaves_behind(roots: list[Any]) -> list[torch.Tensor]:
    """The leaf tensors requiring grad that ``roots`` (leaves or autograd nodes) reach, in a fixed order."""
    found: list[torch.Tensor] = []
    seen_nodes: set[Any] = set()
    seen_leaves: set[int] = set()

    def add_leaf(leaf: torch.Tensor) -> None:
        if id(leaf) not in seen_leaves:
            seen_leaves.add(id(leaf))
            found.append(leaf)

    stack = list(reversed(roots))
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            add_leaf(item)
            continue
        if item is None or item in seen_nodes:
            continue
        seen_nodes.add(item)
        variable = getattr(item, "variable", None)
        if isinstance(variable, torch.Tensor):
            add_leaf(variable)
        stack.extend(reversed([next_fn for next_fn, _ in item.next_functions]))
    return found


def _compare_values(where: str, compiled: torch.Tensor, eager: torch.Tensor, rtol: float, atol: float) -> None:
    assert compiled.shape == eager.shape, f"{where}: shape {compiled.shape} != {eager.shape}"
    assert compiled.dtype == eager.dtype, f"{where}: dtype {compiled.dtype} != {eager.dtype}"
    assert compiled.device == eager.device, f"{where}: device"
    torch.testing.assert_close(compiled.detach(), eager.detach(), rtol=rtol, atol=atol, equal_nan=True, msg=where)


def check(
    fn: Callable[..., Any],
    make_args: Callable[[], Any] | tuple[Any, ...],
    *,
    compiler: Callable[..., Any] = functional_nop,
    compiled_fn: Callable[..., Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    backward: bool = True,
    rtol: float = RTOL,
    atol: float = ATOL,
    calls: int = 2,
    deep: bool = False,
) -> Any:
    """Run ``fn`` eagerly and compiled on equal inputs; assert they agree on everything observable.

    Args:
        make_args: a tuple of arguments (cloned per run) or a factory making fresh ones.
        compiled_fn: the compiled function to test (default: ``aot_function(fn, compiler)``).
        calls: how many times to run the compiled function (the second call reuses the entry).
        deep: also compare the whole storage of every input after the call and after the backward
            (writes outside the input's own view, e.g. through ``as_strided`` with an absolute offset,
            in the forward or in an ``autograd.Function``'s backward), and of the autograd leaves behind
            the inputs after the backward.

    Returns the compiled function, for further inspection.
    """
    kwargs = kwargs or {}
    factory = make_args if callable(make_args) else (lambda: clone_args(make_args))
    compiled = compiled_fn or aot.aot_function(fn, compiler)
    for _ in range(calls):
        _check_once(fn, compiled, factory, kwargs, backward, rtol, atol, deep)
    reference = _aot_function_of(compiled)
    if calls > 1 and reference is not None:
        # The calls above ran the generated code (the full check and the guarded call); once more through
        # the interpreted layer runtimes it is generated from, the reference: both must be eager's.
        reference.use_reference_runtime()
        try:
            _check_once(fn, compiled, factory, kwargs, backward, rtol, atol, deep)
        finally:
            reference.use_reference_runtime(False)
    return compiled


def _aot_function_of(compiled: Any) -> aot.AOTFunction | None:
    """The ``AOTFunction`` behind a compiled function or module, if there is one."""
    for candidate in (compiled, getattr(compiled, "compiled", None), getattr(compiled, "_compiled", None)):
        if isinstance(candidate, aot.AOTFunction):
            return candidate
    return None


def _whole_storage(t: torch.Tensor) -> torch.Tensor:
    """A flat tensor over all of ``t``'s storage, in ``t``'s dtype (a sparse COO tensor's: its values')."""
    if t.layout == torch.sparse_coo:
        return _whole_storage(t._values())
    storage = t.untyped_storage()
    with torch.no_grad():
        return torch.empty(0, dtype=t.dtype, device=t.device).set_(
            storage, 0, (storage.nbytes() // t.element_size(),), (1,)
        )


def _compare_storage(where: str, compiled: torch.Tensor, eager: torch.Tensor, rtol: float, atol: float) -> None:
    """The whole storages of ``compiled`` and ``eager`` hold equal values (the elements outside their views too)."""
    c_storage, e_storage = _whole_storage(compiled), _whole_storage(eager)
    assert c_storage.shape == e_storage.shape, f"{where}: size {c_storage.shape} != {e_storage.shape}"
    _compare_values(where, c_storage, e_storage, rtol, atol)


def _run(fn: Callable[..., Any], args: Any, kwargs: dict[str, Any]) -> tuple[Any, BaseException | None]:
    try:
        return fn(*args, **kwargs), None
    except Exception as error:  # the oracle compares exception types
        return None, error


def _check_once(
    fn: Callable[..., Any],
    compiled: Callable[..., Any],
    factory: Callable[[], Any],
    kwargs: dict[str, Any],
    backward: bool,
    rtol: float,
    atol: float,
    deep: bool = False,
) -> None:
    eager_args, compiled_args = factory(), factory()
    eager_inputs, compiled_inputs = _tensor_leaves(eager_args), _tensor_leaves(compiled_args)
    versions_before = [_version(t) for t in compiled_inputs]
    eager_versions_before = [_version(t) for t in eager_inputs]
    # The autograd leaves behind the inputs (the inputs themselves, or the leaves views and
    # non-leaf inputs were made from), taken before the call: their gradients are compared.
    eager_graph_roots, compiled_graph_roots = _grad_roots(eager_inputs), _grad_roots(compiled_inputs)
    eager_aliased = {
        i
        for i, t in enumerate(eager_inputs)
        if any(j != i and _storage(o) == _storage(t) for j, o in enumerate(eager_inputs))
    }
    eager_out, eager_error = _run(fn, eager_args, kwargs)
    compiled_out, compiled_error = _run(compiled, compiled_args, kwargs)
    if eager_error is not None:
        assert compiled_error is not None, f"eager raised {eager_error!r}, compiled did not"
        assert isinstance(compiled_error, type(eager_error)), (
            f"eager raised {eager_error!r}, compiled {compiled_error!r}"
        )
        return
    if compiled_error is not None:
        raise compiled_error

    eager_leaves, eager_spec = tree_flatten(eager_out)
    compiled_leaves, compiled_spec = tree_flatten(compiled_out)
    assert compiled_spec == eager_spec, f"output structure {compiled_spec} != {eager_spec}"
    eager_outs = [v for v in eager_leaves if isinstance(v, torch.Tensor)]
    compiled_outs = [v for v in compiled_leaves if isinstance(v, torch.Tensor)]
    for i, (c, e) in enumerate(zip(compiled_leaves, eager_leaves, strict=True)):
        if isinstance(e, torch.Tensor):
            assert isinstance(c, torch.Tensor), f"output {i}: {type(c)} is not a tensor"
            _compare_values(f"output {i}", c, e, rtol, atol)
            assert c.requires_grad == e.requires_grad, f"output {i}: requires_grad {c.requires_grad}"
            assert _autograd_state(c) == _autograd_state(e), f"output {i}: {_autograd_state(c)} != {_autograd_state(e)}"
        else:
            assert c == e or (c != c and e != e), f"output {i}: {c!r} != {e!r}"
    assert _alias_signature(compiled_inputs, compiled_outs) == _alias_signature(eager_inputs, eager_outs), (
        "aliasing differs:\n compiled "
        f"{_alias_signature(compiled_inputs, compiled_outs)}\n eager    {_alias_signature(eager_inputs, eager_outs)}"
    )
    for i, (c, e) in enumerate(zip(compiled_inputs, eager_inputs, strict=True)):
        _compare_values(f"input {i} after the call", c, e, rtol, atol)
        assert c.stride() == e.stride() and c.storage_offset() == e.storage_offset(), f"input {i} metadata"
        if deep:
            _compare_storage(f"storage of input {i} after the call", c, e, rtol, atol)
    compiled_bumps = [_version(t) - v for t, v in zip(compiled_inputs, versions_before, strict=True)]
    eager_bumps = [_version(t) - v for t, v in zip(eager_inputs, eager_versions_before, strict=True)]
    assert compiled_bumps == eager_bumps, f"version counter bumps {compiled_bumps} != eager {eager_bumps}"

    if not backward:
        return
    differentiable = [
        i for i, e in enumerate(eager_outs) if e.requires_grad and (e.is_floating_point() or e.is_complex())
    ]
    if not differentiable:
        return
    generator = torch.Generator().manual_seed(0)
    cotangents = [
        torch.randn(eager_outs[i].shape, generator=generator, dtype=eager_outs[i].dtype) for i in differentiable
    ]
    compiled_leaves_in, eager_leaves_in = leaves_behind(compiled_graph_roots), leaves_behind(eager_graph_roots)
    assert len(compiled_leaves_in) == len(eager_leaves_in), "inputs reach a different number of autograd leaves"
    wrt = list(range(len(eager_leaves_in)))

    # Inputs requiring grad that are no leaf (views, non-leaf inputs, inputs a mutation gave history): their
    # ``.grad`` stays empty, so ``torch.autograd.grad`` w.r.t. each is compared too, as a caller would ask it.
    # Only when asked (``tests/test_input_grads.py``; torch's AOTAutograd differs in both classes):
    # - for inputs whose data the program wrote (eager's version counter moved): eager's gradient w.r.t. the
    #   written input flows through every value later computed from it; the core cuts the forward there
    #   (``aot.compile.written_split``), except where the cut would differentiate what eager did not (an
    #   autograd.Function, a self-overlapping write ...) or a layer above writes the input back (a view input's
    #   synthetic base): there ours flows only through the outputs that are views of it;
    # - for inputs sharing memory with another input, written: eager takes a view's node again from its root
    #   after the write (the shared counter moved), a node after our single one; where the counter stays (a
    #   write through ``.data``) the synthetic-base layer routes the view's gradient through its own node.
    def inner_inputs(inputs: list[torch.Tensor]) -> list[int]:
        return [
            i
            for i, t in enumerate(inputs)
            if t.requires_grad
            and _autograd_state(t)[:2] == (False, False)
            and (eager_bumps[i] == 0 or WRITTEN_INPUT_GRADS)
            and (i not in eager_aliased or ALIASED_INPUT_GRADS)
        ]

    eager_inner, compiled_inner = inner_inputs(eager_inputs), inner_inputs(compiled_inputs)
    assert compiled_inner == eager_inner, f"inputs with history after the call: {compiled_inner} != {eager_inner}"

    def grads(
        outs: list[torch.Tensor], leaves: list[torch.Tensor], inputs: list[torch.Tensor]
    ) -> tuple[list[torch.Tensor | None], list[torch.Tensor | None]] | BaseException:
        try:
            # (Using an output may raise already: eager refuses to take a stale no_grad view's history again.)
            loss = sum((outs[i] * cot).sum() for i, cot in zip(differentiable, cotangents, strict=True))
            assert isinstance(loss, torch.Tensor)
            # One backward: a hook on each input's current history gets what ``torch.autograd.grad`` w.r.t. it
            # would (``retain_grad`` would not: it keeps None for a view restrided in place).
            inner: list[list[torch.Tensor]] = [[] for _ in eager_inner]
            for i, seen in zip(eager_inner, inner, strict=True):
                inputs[i].register_hook(seen.append)
            loss.backward()
        except RuntimeError as error:  # eager's backward may raise (a saved tensor modified in place)
            return error
        return [leaf.grad for leaf in leaves], [seen[0] if seen else None for seen in inner]

    compiled_result = grads(compiled_outs, compiled_leaves_in, compiled_inputs)
    eager_result = grads(eager_outs, eager_leaves_in, eager_inputs)
    if isinstance(eager_result, BaseException) or isinstance(compiled_result, BaseException):
        assert type(compiled_result) is type(eager_result), f"backward: eager {eager_result!r} vs {compiled_result!r}"
        return
    (compiled_grads, compiled_wrt_inner), (eager_grads, eager_wrt_inner) = compiled_result, eager_result
    for i, c, e in zip(eager_inner, compiled_wrt_inner, eager_wrt_inner, strict=True):
        assert (c is None) == (e is None), f"autograd.grad w.r.t. input {i}: {c} vs {e}"
        if c is not None and e is not None:
            _compare_values(f"autograd.grad w.r.t. input {i}", c, e, rtol * GRAD_FACTOR, atol * GRAD_FACTOR)

    for i, (c, e) in enumerate(zip(compiled_grads, eager_grads, strict=True)):
        assert (c is None) == (e is None), f"grad of autograd leaf {wrt[i]}: {c} vs {e}"
        if c is not None and e is not None:
            _compare_values(f"grad of autograd leaf {wrt[i]}", c, e, rtol * GRAD_FACTOR, atol * GRAD_FACTOR)
    # The inputs that are leaves requiring grad after the call, not before it (``requires_grad_()`` on an input
    # needing none), and such a leaf behind an input (its ``_base``, which the walk above does not reach from a
    # view made without grad): the backward fills their ``.grad`` in the caller's hands.
    compared = {id(leaf) for leaf in eager_leaves_in} | {id(leaf) for leaf in compiled_leaves_in}
    for i, (c_in, e_in) in enumerate(zip(compiled_inputs, eager_inputs, strict=True)):
        for what, c, e in (("input", c_in, e_in), ("base of input", c_in._base, e_in._base)):
            if not (_made_leaf(c, compared) or _made_leaf(e, compared)):
                continue
            compared.update((id(c), id(e)))
            assert _made_leaf(c, set()) and _made_leaf(e, set()), f"{what} {i} after the backward: a leaf in one only"
            assert (c.grad is None) == (e.grad is None), (
                f"grad of {what} {i}, a leaf after the call: {c.grad} vs {e.grad}"
            )
            if c.grad is not None and e.grad is not None:
                _compare_values(
                    f"grad of {what} {i}, a leaf after the call", c.grad, e.grad, rtol * GRAD_FACTOR, atol * GRAD_FACTOR
                )
    # An autograd.Function's backward may write a saved input in place: eager's caller sees it, also where
    # the write lands outside the input's own elements (an as_strided at an absolute offset).
    for i, (c, e) in enumerate(zip(compiled_inputs, eager_inputs, strict=True)):
        _compare_values(f"input {i} after the backward", c, e, rtol * GRAD_FACTOR, atol * GRAD_FACTOR)
        if deep:
            _compare_storage(f"storage of input {i} after the backward", c, e, rtol * GRAD_FACTOR, atol * GRAD_FACTOR)
    if deep:
        for i, (c, e) in enumerate(zip(compiled_leaves_in, eager_leaves_in, strict=True)):
            _compare_storage(
                f"storage of autograd leaf {wrt[i]} after the backward", c, e, rtol * GRAD_FACTOR, atol * GRAD_FACTOR
            )
