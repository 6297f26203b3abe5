"""One generated function per compiled entry: a cheap guard, then the call, straight-line.

``AOTFunction.__call__`` first tries the function of the entry it used last. Its
guard compares only what can differ from that entry's signature (``aot.signature``),
for a flat tuple of tensors: each tensor's exact type, shape, strides, dtype, device,
``requires_grad`` (and leafness or view-ness where the signature has it), that none
is an inference tensor or marked dynamic, which share a storage (and of those: which
are one object, their offsets, view-ness and shared version counters), the grad and
inference modes, the module modes and hooks. Passing the
guard implies the full signature equals the entry's; failing it says nothing: the
call falls back to the full signature and the entry table (a new entry where none
matches). The call itself is the layers' generated code (``wrappers.codegen``), then
the grad mode the function leaves and the output structure, baked in.

``AOTFX_RUNTIME=interpreted`` in the environment (or :data:`INTERPRETED` set) runs
the interpreted layer closures instead, with the full signature on every call: the
reference the generated code is tested against.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from meta.storage import how_made
from meta.versions import counter_groups
from wrappers.codegen import Emitter, Source

__all__ = ["ENV_VAR", "MISS", "entry_function", "interpreted"]

ENV_VAR = "AOTFX_RUNTIME"
MISS: Any = object()  # a guard's answer: not this entry
_INTERPRETED = os.environ.get(ENV_VAR, "generated") == "interpreted"


def interpreted() -> bool:
    """Whether entries run the interpreted reference (``AOTFX_RUNTIME=interpreted``, read at import)."""
    return _INTERPRETED


def fast_path_applies(leaves: Sequence[Any]) -> bool:
    """The guard's case: plain tensors with storages, no inference tensor, none marked dynamic."""
    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor) or leaf.is_inference() or leaf.is_sparse or leaf.is_nested:
            return False
        if getattr(leaf, "_dynamo_dynamic_indices", None):
            return False
        try:
            leaf.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return False
    return True


def _storage_address(tensor: torch.Tensor) -> int:
    """The address of ``tensor``'s storage: equal for two tensors exactly when they share one."""
    address: int = tensor.untyped_storage()._cdata
    return address


# torch's own accessor of the same address, where it has one: without making a storage object.
_storage_address = getattr(torch._C, "_storage_address", _storage_address)


def _strides_check(name: str, leaf: torch.Tensor) -> str:
    """The expression checking ``name``'s strides are ``leaf``'s: contiguity, where that implies them (every
    dimension longer than 1: only those of length 0 or 1 may take any stride in a contiguous tensor)."""
    if leaf.is_contiguous() and all(size > 1 for size in leaf.shape):
        return f"{name}.is_contiguous()"
    return f"{name}.stride() == {tuple(leaf.stride())!r}"


def _tensor_checks(source: Source, name: str, leaf: torch.Tensor) -> list[str]:
    """What ``tensor_guards`` checks, one attribute at a time (where torch has no ``TensorGuards``)."""
    return [
        # The exact type: a subclass (or a parameter where a plain tensor was) takes the full check.
        f"type({name}) is {source.const(type(leaf), type(leaf).__name__)}",
        f"{name}.shape == {source.const(leaf.shape, 'size')}",
        _strides_check(name, leaf),
        f"{name}.dtype is {source.const(leaf.dtype, 'dtype')}",
        f"{name}.is_cpu" if leaf.device.type == "cpu" else f"{name}.device == {source.const(leaf.device, 'dev')}",
        f"{name}.requires_grad" if leaf.requires_grad else f"not {name}.requires_grad",
    ]


def _tensor_guards(leaves: Sequence[torch.Tensor]) -> Any:
    """torch's C++ check of a list of tensors (dynamo's ``TensorGuards``: each one's exact Python type, dispatch
    keys, dtype, device, requires_grad, sizes and strides, in one call, a tenth of the attribute reads), made for
    ``leaves``; None where this torch has none (the generated code reads the attributes then). It checks more
    than the signature (the dispatch keys: conjugate and negative bits): a miss there only takes the full path."""
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    make = getattr(guards, "TensorGuards", None)
    if make is None or not leaves:
        return None
    try:
        tensor_guards = make(*leaves, dynamic_dims_sizes=None, dynamic_dims_strides=None)
        if tensor_guards.check(*leaves) is not True:
            return None
    except Exception:  # another signature in another torch: the attribute reads
        return None
    return tensor_guards


def _emit_storage_checks(source: Source, names: list[str], leaves: Sequence[torch.Tensor]) -> None:
    """Which inputs share a storage, as the entry's; and of those, what the signature says of them
    (``aot.signature``: which are the same object, their offsets, view-ness, shared version counters)."""
    address = source.const(_storage_address, "storage")
    groups: dict[int, list[int]] = {}
    for position, leaf in enumerate(leaves):
        groups.setdefault(_storage_address(leaf), []).append(position)
    if len(groups) == len(leaves):
        storages = ", ".join(f"{address}({name})" for name in names)
        source.line(f"if len({{{storages}}}) != {len(names)}: return MISS  # no two share storage")
        return
    shared = sorted(p for group in groups.values() if len(group) > 1 for p in group)
    stores = [source.fresh(f"s{i}") for i in range(len(names))]
    source.line(f"{', '.join(stores)}, = {', '.join(f'{address}({name})' for name in names)},")
    source.line("# the storages shared as the entry's: the same within each group, distinct across groups")
    for group in groups.values():
        if len(group) > 1:
            same = " and ".join(f"{stores[p]} == {stores[group[0]]}" for p in group[1:])
            source.line(f"if not ({same}): return MISS")
    firsts = ", ".join(stores[group[0]] for group in groups.values())
    source.line(f"if len({{{firsts}}}) != {len(groups)}: return MISS")
    checks = []
    first_of: dict[int, int] = {}
    for p in shared:
        q = first_of.setdefault(id(leaves[p]), p)
        if q != p:
            checks.append(f"{names[p]} is {names[q]}")
            continue
        checks += [f"{names[p]} is not {names[r]}" for r in shared if r < p and first_of.get(id(leaves[r])) == r]
        checks.append(f"{names[p]}.storage_offset() == {leaves[p].storage_offset()}")
        checks.append(f"{names[p]}._is_view()" if leaves[p]._is_view() else f"not {names[p]}._is_view()")
    source.line(f"if not ({' and '.join(checks)}): return MISS  # the same objects, offsets, view-ness")
    _emit_counter_check(source, [names[p] for p in shared], counter_groups([leaves[p] for p in shared]))


def _emit_counter_check(source: Source, names: list[str], groups: list[int]) -> None:
    """Which of ``names`` share a version counter, as ``groups`` (``meta.versions.counter_groups``) says,
    straight-line: each set to a distinct value in turn, a group reads its last member's, then put back.
    (The guard checked above that none is an inference tensor: each has a counter.)"""
    set_counters = source.const(torch._C._autograd._unsafe_set_version_counter, "set_counters")
    listed = f"({', '.join(names)},)"
    tensors, versions, start = source.fresh("shared"), source.fresh("versions"), source.fresh("start")
    source.line("# the version counters they share: each set to start + its position, a group reads its last's")
    source.line(f"{tensors} = {listed}")
    source.line(f"{versions} = ({''.join(f'{name}._version, ' for name in names)})")
    source.line(f"{start} = max({versions}) + 1")
    source.line(f"{set_counters}({tensors}, tuple(range({start}, {start} + {len(names)})))")
    last = {group: k for k, group in enumerate(groups)}
    marks = " and ".join(f"{name}._version == {start} + {last[groups[k]]}" for k, name in enumerate(names))
    marked = source.fresh("marked")
    source.line(f"{marked} = {marks}")
    source.line(f"{set_counters}({tensors}, {versions})")
    source.line(f"if not {marked}: return MISS")


def entry_function(
    leaves: Sequence[torch.Tensor],
    emit: Emitter,
    state_key: Callable[[], Hashable] | None,
    hooked: Callable[[], bool],
    exit_grad_mode: bool | None,
    rebuild: Callable[[list[Any]], Any],
    rebuild_kind: str,
) -> tuple[Callable[[tuple[Any, ...]], Any], str]:
    """The guarded call of one entry, for calls like ``leaves`` (which ``fast_path_applies`` to).

    ``rebuild_kind``: ``"tuple"`` (a tuple of the tensors), ``"single"`` (the one tensor) or
    ``"tree"`` (``rebuild`` makes the output pytree).
    """
    source = Source()
    names = [source.fresh(f"a{i}") for i in range(len(leaves))]
    source.line("# guard: what can differ from this entry's signature; a miss takes the full check")
    with source.block("try:"):
        source.line(f"if len(args) != {len(leaves)}: return MISS")
        if names:
            source.line(f"{', '.join(names)}, = args")
        grad_on = source.const(torch.is_grad_enabled, "grad_on")
        inference_on = source.const(torch.is_inference_mode_enabled, "inference_on")
        grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
        source.line(f"if {grad_on}() is not {grad} or {inference_on}() is not {inference}: return MISS")
        if state_key is not None:
            key = source.const(state_key(), "state")
            source.line(f"if {source.const(state_key, 'state_key')}() != {key}: return MISS")
        source.line(f"if {source.const(hooked, 'hooked')}(): return MISS")
        tensor_guards = _tensor_guards(leaves)
        if tensor_guards is not None:
            source.line(
                f"if not {source.const(tensor_guards, 'tensor_guards')}.check({', '.join(names)}): return MISS"
                "  # exact types, shapes, strides, dtypes, devices, requires_grad, dispatch keys"
            )
        for name, leaf in zip(names, leaves, strict=True):
            checks = [] if tensor_guards is not None else _tensor_checks(source, name, leaf)
            if leaf.requires_grad:
                checks.append(f"{name}.is_leaf" if leaf.is_leaf else f"not {name}.is_leaf")
                if leaf._base is None:
                    checks.append(f"{name}._base is None")  # so made in grad mode (``how_made`` 0), no leaf view
                else:
                    # (a view made under no_grad is a leaf too)
                    checks.append(f"{source.const(how_made, 'how_made')}({name}) == {how_made(leaf)}")
                    if leaf.is_leaf:  # a leaf view: whether its base requires grad (``leaf_of_ungraded_base``)
                        checks.append(f"{name}._base.requires_grad is {leaf._base.requires_grad}")
            else:
                # The signature tells views needing no grad apart (``requires_grad_()`` on one makes a leaf).
                checks.append(f"{name}._is_view()" if leaf._is_view() else f"not {name}._is_view()")
            if tensor_guards is None or inference:
                # (Outside inference mode an inference tensor's dispatch keys differ: ``tensor_guards`` tells.)
                checks.append(f"not {name}.is_inference()")
            source.line(f"if not ({' and '.join(checks)}): return MISS")
        if names:
            # Only torch._dynamo's mark_dynamic marks a tensor: while it is not imported, nothing to look at.
            marked = " or ".join(f"getattr({name}, '_dynamo_dynamic_indices', None)" for name in names)
            modules = source.const(sys.modules, "modules")
            source.line(f"if 'torch._dynamo' in {modules} and ({marked}): return MISS")
        if len(names) > 1:
            _emit_storage_checks(source, names, leaves)
    with source.block("except Exception:"):
        source.line("return MISS")
    source.line("# the call")
    source.grad_mode = grad  # what the guard checked: the emitters below need not ask again
    tensors = source.fresh("tensors")
    source.line(f"{tensors} = [{', '.join(names)}]")
    outs = emit(source, tensors)
    if exit_grad_mode is not None:
        source.line(f"{source.const(torch._C._set_grad_enabled, 'set_grad_enabled')}({exit_grad_mode})")
    if rebuild_kind == "tuple":
        source.line(f"return tuple({outs})")
    elif rebuild_kind == "single":
        source.line(f"return {outs}[0]")
    else:
        source.line(f"return {source.const(rebuild, 'rebuild')}({outs})")
    source.constants["MISS"] = MISS
    fn, text = source.build("aotfx_call", "args")
    return fn, text
