"""Public entry points: ``aot_function``, ``aot_module``, ``aot_module_simplified``, ``aot_export_joint``.

The signatures follow torch's AOTAutograd, so a backend written for it ports by
changing one import. A compiled function keeps one entry per input signature
(``aot.signature``) and traces again whenever the signature changes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import operator
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.fx as fx
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import is_lazy
from torch.utils._pytree import (
    SequenceKey,
    TreeSpec,
    tree_flatten,
    tree_flatten_with_path,
    tree_unflatten,
    treespec_leaf,
)

from aot import logs, runtime_code
from aot.backends import nop
from aot.cache import entries, keys
from aot.compile.binding import defer_unbinding
from aot.compile.core import CompiledEntry, compile_core, runtime_from_graphs
from aot.compile.failures import trace_errors
from aot.compile.fallbacks import fake_kernel_fallbacks, fallback_applies
from aot.compile.memory_budget import ActivationMemoryBudget
from aot.compile.min_cut import min_cut_rematerialization_partition
from aot.compile.partition import default_partition
from aot.compile.policy import ActivationPolicy, PolicyPartition
from aot.compile.trace import REACHED_FROM, trace_joint
from aot.config import AOTConfig, Compiler, PartitionFn
from aot.errors import DataDependentError, UnsupportedInputError
from aot.hooks import call_with_hooks, has_own_hooks, hook_tables, refusing_hooks
from aot.signature import input_signature
from aot.symbolic_sizes import dynamic_dims_of, sizes_read_from_tensors, symbolic_examples
from aot.wrapped_scalars import scalar_inputs, specialized
from meta import symbolic
from meta.collect import collect_meta
from meta.indices import UserArg, UserOut
from meta.storage import CALLER_IN_INFERENCE_MODE
from meta.symbolic import Guard
from wrappers import Stage, compile_through, default_layers
from wrappers.base import CoreStage, compile_generated

__all__ = ["AOTFunction", "aot_export_joint", "aot_function", "aot_module", "aot_module_simplified"]


def _leaf_names(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    """A readable name for every flattened leaf of ``(args, kwargs)``: ``x``, ``inputs_0_key``."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var_name = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), "args")
    names = []
    for path, _ in tree_flatten_with_path((args, kwargs))[0]:
        top, first, rest = path[0], path[1], path[2:]
        if isinstance(top, SequenceKey) and top.idx == 0:
            index = getattr(first, "idx", 0)
            base = positional[index] if index < len(positional) else f"{var_name}_{index - len(positional)}"
        else:
            base = str(getattr(first, "key", first))
        names.append(base + "".join(f"_{getattr(k, 'idx', getattr(k, 'key', k))}" for k in rest))
    return names


def _check_call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Raise eager's ``TypeError`` for a call ``fn`` cannot take, before any tracing."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins and C functions: the call itself will say
    try:
        signature.bind(*args, **kwargs)
    except TypeError as error:
        name = getattr(fn, "__qualname__", repr(fn))
        raise TypeError(f"{name}(): {error}") from None


@dataclass
class _CallingConvention:
    """How one signature's pytree call maps to the flat tensors the stack compiles, and back."""

    tensor_positions: list[int]
    only_tensors: bool
    out_spec: TreeSpec | None = None
    out_template: list[Any] | None = None
    out_is_tuple_of_tensors: bool = False
    out_has_size: bool = False
    # The grad mode the function leaves behind when it differs from the caller's (it ran
    # ``torch.set_grad_enabled`` and did not restore it); set after every call, as eager leaves it.
    exit_grad_mode: bool | None = None

    def record_outputs(self, out_leaves: list[Any], out_spec: TreeSpec) -> None:
        self.out_spec = out_spec
        self.out_has_size = _has_size(out_spec)
        self.out_template = [_TENSOR if isinstance(v, torch.Tensor) else v for v in out_leaves]
        self.out_is_tuple_of_tensors = (
            out_spec.type is tuple
            and all(child.is_leaf() for child in out_spec.children())
            and all(v is _TENSOR for v in self.out_template)
        )

    def rebuild(self, outs: list[Any]) -> Any:
        """The user's output pytree from the flat tensor outputs."""
        spec, template = self.out_spec, self.out_template
        assert spec is not None and template is not None, "outputs rebuilt before the function was traced"
        if spec.is_leaf():
            return outs[0] if outs else template[0]
        if self.out_is_tuple_of_tensors:
            return tuple(outs)
        out_leaves = list(template)
        tensor_iter = iter(outs)
        for position, value in enumerate(out_leaves):
            if value is _TENSOR:
                out_leaves[position] = next(tensor_iter)
        if self.out_has_size:
            return _unflatten_keeping_sizes(iter(out_leaves), spec)
        return tree_unflatten(out_leaves, spec)


def _has_size(spec: TreeSpec) -> bool:
    return spec.type is torch.Size or any(_has_size(child) for child in spec.children())


def _unflatten_keeping_sizes(leaves: Iterator[Any], spec: TreeSpec) -> Any:
    """``tree_unflatten``, but a ``torch.Size`` comes back a ``torch.Size``: pytree rebuilds it as a plain
    tuple, where eager's function returned the Size itself (``torch.broadcast_shapes``, ``x.shape``)."""
    if spec.is_leaf():
        return next(leaves)
    children = [_unflatten_keeping_sizes(leaves, child) for child in spec.children()]
    if spec.type is torch.Size:
        return torch.Size(children)
    return tree_unflatten(children, TreeSpec(spec.type, spec.context, [treespec_leaf()] * len(children)))


# Leaf position -> the dimensions traced as symbols (``meta.symbolic``).
_Dims = dict[int, frozenset[int]]
# What a compile gives: the entry, and how a call of its signature maps to the entry's flat tensors.
_Compiled = tuple[CompiledEntry, _CallingConvention]


@contextlib.contextmanager
def _reseeded(reseed: tuple[int, bool] | None) -> Iterator[None]:
    """Seed torch's global generator as the function does before its draws, and put the caller's state back
    after them if it does (``ViewAndMutationMeta.reseed``)."""
    assert reseed is not None
    seed, restores = reseed
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        yield
    finally:
        if restores:
            torch.random.set_rng_state(state)


class AOTFunction:
    """A function compiled ahead of time, one compiled entry per input signature.

    ``entries`` lists what was compiled (graphs, meta, timings) for inspection.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        config: AOTConfig,
        leading_names: Sequence[str] = (),
        state_key: Callable[[], Hashable] | None = None,
        program_key: str | None = None,
        module: torch.nn.Module | None = None,
    ) -> None:
        self.fn = fn
        self.config = config
        self._leading_names = list(leading_names)
        # State outside the arguments that the trace depends on (a module's train/eval modes).
        self._state_key = state_key
        # Set when the program is a GraphModule: compiled entries may then persist across processes.
        self._program_key = program_key
        # The module whose forward ``fn`` runs: its submodules' paths name them in errors.
        self._module = module
        # Modules the traces called, and their hook dicts: a hook added to one later must be refused, not dropped.
        self._called_modules: list[torch.nn.Module] = []
        self._hook_tables: list[dict[int, Any]] = []
        self._cache: dict[Hashable, _Compiled] = {}
        # Entries with symbolic sizes: under a signature that leaves the sizes out, each with its guard.
        self._dynamic_entries: dict[Hashable, list[tuple[Guard, list[int], _Compiled]]] = {}
        self._named_dims: dict[Hashable, _Dims] = {}
        self._lock = threading.Lock()
        # The guarded generated call of the entry used last, tried first (``aot.runtime_code``); by key.
        self._fast: Callable[[tuple[Any, ...]], Any] | None = None
        self._fast_functions: dict[Hashable, Callable[[tuple[Any, ...]], Any] | None] = {}
        self._reference = runtime_code.interpreted()

    def use_reference_runtime(self, reference: bool = True) -> None:
        """Run every entry's interpreted layer runtimes (the reference the generated code is tested against),
        with the full signature check on every call; False: the generated code again."""
        self._reference = reference
        self._fast = None

    @property
    def entries(self) -> list[CompiledEntry]:
        dynamic = [entry for found in self._dynamic_entries.values() for _, _, (entry, _) in found]
        return [entry for entry, _ in self._cache.values()] + dynamic

    def report(self) -> str:
        """Every compiled entry's graphs, meta and saved activations, as text."""
        from aot.inspect import report

        return "\n\n".join(report(entry) for entry in self.entries)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fast = self._fast
        if fast is not None and not kwargs:
            result = fast(args)  # the last entry's guard and call (``aot.runtime_code``)
            if result is not runtime_code.MISS:
                return result
        if not kwargs and all(isinstance(arg, torch.Tensor) for arg in args):
            leaves, structure = args, len(args)  # flat tensors, the hot case: no pytree needed
        else:
            leaves, structure = tree_flatten((args, kwargs))  # type: ignore[assignment]
        dynamic = self._dynamic_dims(leaves, structure, args, kwargs)
        key = input_signature(leaves, structure, lambda position: self._names(args, kwargs)[position], dynamic)
        if self._state_key is not None:
            key = (key, self._state_key())
        if any(self._hook_tables):
            key = (key, "hooked")  # traced again: the trace refuses the hook
        found = self._cache.get(key) if not dynamic else self._guarded(key, leaves)
        if found is None:
            with self._lock:
                found = (self._cache.get(key) if not dynamic else self._guarded(key, leaves)) or (
                    self._compile_outside_inference_mode(args, kwargs, key, dynamic)
                )
        entry, convention = found
        assert entry.runtime is not None
        tensors = list(leaves) if convention.only_tensors else [leaves[i] for i in convention.tensor_positions]
        if entry.offset_guard and any(tensors[i].storage_offset() != offset for i, offset in entry.offset_guard):
            # The program reads storage at absolute offsets (as_strided ...): specialized on them too.
            key = (key, "storage_offsets", tuple(t.storage_offset() for t in tensors))
            found = self._cache.get(key)
            if found is None:
                with self._lock:
                    found = self._cache.get(key) or self._compile_outside_inference_mode(args, kwargs, key)
            entry, convention = found
        runtime = entry.reference_runtime if self._reference else entry.runtime
        assert runtime is not None
        # A function seeding the global generator is seeded around each call: not on the generated fast path.
        guardable = isinstance(structure, int) and not dynamic and not entry.offset_guard and entry.meta.reseed is None
        if guardable and not self._reference and entry.emit is not None:
            # The next call tries this entry's guarded generated function first.
            self._fast = self._fast_function(key, entry, convention, leaves)
        with _reseeded(entry.meta.reseed) if entry.meta.reseed is not None else contextlib.nullcontext():
            if entry.dynamic_positions:
                # Views the layers replay take this call's sizes where the trace had symbols.
                outs = symbolic.run_with_sizes([leaves[p] for p in entry.dynamic_positions], runtime, tensors)
            else:
                outs = runtime(tensors)
        if convention.exit_grad_mode is not None:
            torch.set_grad_enabled(convention.exit_grad_mode)
        return convention.rebuild(outs)

    def _fast_function(
        self, key: Hashable, entry: CompiledEntry, convention: _CallingConvention, leaves: Sequence[Any]
    ) -> Callable[[tuple[Any, ...]], Any] | None:
        """The guarded generated call of ``entry`` for calls like this one; None where the guard cannot say."""
        if key in self._fast_functions:
            return self._fast_functions[key]
        fast = None
        if convention.only_tensors and runtime_code.fast_path_applies(leaves):
            spec = convention.out_spec
            assert spec is not None
            kind = "tuple" if convention.out_is_tuple_of_tensors else "tree"
            if spec.is_leaf() and convention.out_template == [_TENSOR]:
                kind = "single"
            hook_tables = self._hook_tables

            def hooked() -> bool:
                # A hook added later (or modules adopted since) makes the full signature differ.
                return self._hook_tables is not hook_tables or any(hook_tables)

            with logs.silenced(not self.config.enable_log):
                fast, source = runtime_code.entry_function(
                    leaves, entry.emit, self._state_key, hooked, convention.exit_grad_mode, convention.rebuild, kind
                )
            entry.runtime_source = source
        self._fast_functions[key] = fast
        return fast

    def _dynamic_dims(
        self, leaves: Sequence[Any], structure: Hashable, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> _Dims:
        """Leaf position -> the dimensions traced as symbols (``meta.symbolic``); empty: static shapes.

        ``dynamic=True``: every dimension of every tensor but the parameters and buffers;
        ``dynamic_dims``: the named ones; and the ones ``torch._dynamo.mark_dynamic`` marked.
        """
        config = self.config
        dims: _Dims = {}
        if config.dynamic:
            static = config.num_params_buffers
            for position, leaf in enumerate(leaves):
                if isinstance(leaf, torch.Tensor) and position >= static and leaf.dim():
                    dims[position] = frozenset(range(leaf.dim()))
        elif config.dynamic_dims:
            named = self._named_dims.get(structure)
            if named is None:
                named = self._named_dims[structure] = self._resolve_dims(args, kwargs, len(leaves))
            dims.update(named)
        for position, leaf in enumerate(leaves):
            marked = getattr(leaf, "_dynamo_dynamic_indices", None)
            if marked and isinstance(leaf, torch.Tensor):
                dims[position] = dims.get(position, frozenset()) | frozenset(marked)
        return dims

    def _resolve_dims(self, args: tuple[Any, ...], kwargs: dict[str, Any], count: int) -> _Dims:
        names = self._names(args, kwargs)
        resolved: _Dims = {}
        for name, dims in self.config.dynamic_dims:
            if isinstance(name, int):
                position = name if name >= 0 else count + name
            elif name in names:
                position = names.index(name)
            else:
                raise ValueError(f"dynamic_dims names input {name!r}, which the call does not have: {names}")
            if not 0 <= position < count:
                raise ValueError(f"dynamic_dims names input position {name}, the call has {count} inputs")
            resolved[position] = resolved.get(position, frozenset()) | frozenset(dims)
        return resolved

    def _guarded(self, key: Hashable, leaves: Sequence[Any]) -> _Compiled | None:
        """The first entry compiled under ``key`` whose guard the call's sizes satisfy."""
        for guard, positions, found in self._dynamic_entries.get(key, ()):
            if guard([leaves[p] for p in positions]):
                return found
        return None

    def _names(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
        names = _leaf_names(self.fn, args, kwargs)
        names[: len(self._leading_names)] = self._leading_names
        return names

    def _adopt_modules(self, modules: Sequence[torch.nn.Module]) -> None:
        """Watch ``modules`` too (called by a trace this function reuses) for hooks added later."""
        self._called_modules += [m for m in modules if all(m is not seen for seen in self._called_modules)]
        self._hook_tables = hook_tables(self._called_modules) if self._called_modules else []

    def _module_name(self, module: torch.nn.Module) -> str:
        if self._module is not None:
            for path, sub in self._module.named_modules(remove_duplicate=False):
                if sub is module and path:
                    return f"submodule {path!r} ({type(module).__name__})"
        return f"module {type(module).__name__}"

    def _flat(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], leaves: list[Any], spec: TreeSpec
    ) -> tuple[Stage[UserArg, UserOut], _CallingConvention]:
        """The flat function over the tensor leaves, with the call's other leaves baked in."""
        positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        template = [None if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        convention = _CallingConvention(positions, only_tensors=len(positions) == len(leaves))
        fn = self.fn

        def flat_fn(*tensors: torch.Tensor) -> list[torch.Tensor]:
            filled = list(template)
            for position, tensor in zip(positions, tensors, strict=True):
                filled[position] = tensor
            call_args, call_kwargs = tree_unflatten(filled, spec)
            grad_mode = torch.is_grad_enabled()
            try:
                with _caller_inference_mode():
                    result = fn(*call_args, **call_kwargs)
                    left = torch.is_grad_enabled()
            finally:
                # Each trace starts from the caller's mode; the compiled call sets the mode left behind.
                torch.set_grad_enabled(grad_mode)
            convention.exit_grad_mode = None if left == grad_mode else left
            out_leaves, out_spec = tree_flatten(result)
            convention.record_outputs(out_leaves, out_spec)
            return [v for v in out_leaves if isinstance(v, torch.Tensor)]

        names = self._names(args, kwargs)
        tensors = [leaves[i] for i in positions]
        with refusing_hooks(self._module_name, self._called_modules):
            meta = collect_meta(flat_fn, tensors, [names[i] for i in positions])
        if symbolic.current() is not None:
            meta = symbolic.with_runtime_sizes(meta, tensors)
        self._adopt_modules(())
        if self.config.num_params_buffers:
            static = self.config.num_params_buffers
            infos = (dataclasses.replace(info, static=i < static) for i, info in enumerate(meta.input_info))
            meta = dataclasses.replace(meta, input_info=tuple(infos))
        return Stage(flat_fn, tensors, meta), convention

    def _compile_outside_inference_mode(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], key: Hashable, dynamic: _Dims | None = None
    ) -> _Compiled:
        """Compile; under ``inference_mode``, trace with autograd off but outside it.

        Inference tensors have no version counter, which meta collection reads to see
        mutations: the fakes of the inputs are made outside inference mode, and only the
        function itself runs inside it (``_caller_inference_mode``), where ``enable_grad``
        records no built-in op and only autograd.Functions record. The compiled call itself
        runs in the caller's inference mode.
        """
        # A function seeding the global generator seeds it again at each trace: the caller's state is put back.
        with logs.silenced(not self.config.enable_log), torch.random.fork_rng(devices=[]):
            if not torch.is_inference_mode_enabled():
                return self._compile(args, kwargs, key, dynamic)
            token = CALLER_IN_INFERENCE_MODE.set(True)
            try:
                with torch.inference_mode(False), torch.no_grad():
                    return self._compile(args, kwargs, key, dynamic)
            finally:
                CALLER_IN_INFERENCE_MODE.reset(token)

    def _compile(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], key: Hashable, dynamic: _Dims | None = None
    ) -> _Compiled:
        if dynamic:
            return self._compile_symbolic(args, kwargs, key, dynamic)
        if symbolic.current() is None:
            try:
                return self._compile_traced(args, kwargs, key)
            except DataDependentError:
                # A size that depends on tensor data (``nonzero``): traced again on a shape environment, the
                # size an unbacked symbol; what is still refused then (a branch on a value) raises again.
                return self._compile_unbacked(args, kwargs, key)
        return self._compile_traced(args, kwargs, key)

    def _compile_unbacked(self, args: tuple[Any, ...], kwargs: dict[str, Any], key: Hashable) -> _Compiled:
        """Compile static shapes on a shape environment: data-dependent sizes become unbacked symbols.

        Every input size is a constant (the key holds them all), so no guard is needed beyond the key's.
        """
        with symbolic.symbolic_inputs(symbolic.SymbolicInputs()):
            found = self._compile_traced(args, kwargs, key)
        self._cache[key] = found
        keys.remember_trace(self.fn, self.config, key, found)
        return found

    def _compile_traced(self, args: tuple[Any, ...], kwargs: dict[str, Any], key: Hashable) -> _Compiled:
        reused = keys.reuse_trace(self.fn, self.config, key)
        if reused is not None:
            self._cache[key] = reused
            self._adopt_modules(reused[0].extra.get("called_modules", ()))
            return reused  # type: ignore[no-any-return]
        start = time.perf_counter()
        _check_call(self.fn, args, kwargs)
        leaves, spec = tree_flatten((args, kwargs))
        directory = self.config.cache_dir or os.environ.get(keys.ENV_DIR)
        # An entry with symbolic sizes is not stored whole (its guard is not): its graphs are, by the graph cache.
        stored_key = (
            entries.entry_key(self._program_key, key)
            if directory and self._program_key and symbolic.current() is None
            else None
        )
        loaded = entries.load(directory, stored_key) if directory and stored_key else None

        def build() -> _Compiled:
            if loaded is not None:
                return self._restore(leaves, *loaded)
            stage, convention = self._flat(args, kwargs, leaves, spec)
            entry = CompiledEntry(meta=stage.meta)
            core = partial(compile_core, config=self.config, entry=entry, compile_function=AOTFunction)
            _set_runtime(entry, stage, core)
            # Not stored: a forward-only entry, or one whose backward writes its inputs or runs an
            # autograd.Function's backward with reachability the trace told (which the graphs alone do not say:
            # restored without it, an input's gradient could differ from the fresh entry's).
            if (
                directory
                and stored_key
                and not entry.extra.get("forward_only")
                and not entry.extra.get("written_split")
                and not entry.extra.get("backward_writes")
                and not entry.extra.get(REACHED_FROM)
            ):
                graphs = {"forward": entry.forward, "backward": entry.backward, "inference": entry.inference}
                entries.save(directory, stored_key, stage.meta, convention, graphs)
            return entry, convention

        with trace_errors():
            try:
                entry, convention = build()
            except Exception as error:
                # Only then: a torch-function mode changes library code paths (has_torch_function).
                if not fallback_applies(error):
                    raise
                with fake_kernel_fallbacks():
                    entry, convention = build()
        entry.compile_seconds = time.perf_counter() - start
        tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        entry.offset_guard = tuple(
            (i, int(tensors[i].storage_offset()))
            for i, info in enumerate(entry.meta.input_info)
            if info.offset_sensitive
        )
        entry.extra["called_modules"] = tuple(self._called_modules)
        if symbolic.current() is None:
            self._cache[key] = (entry, convention)
            keys.remember_trace(self.fn, self.config, key, (entry, convention))
        return entry, convention

    def _compile_symbolic(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], key: Hashable, dynamic: _Dims
    ) -> _Compiled:
        """Compile with the ``dynamic`` dimensions as symbols; the entry serves every call its guard admits."""
        leaves, _ = tree_flatten((args, kwargs))
        specialized: set[int] = set()  # positions traced with constant sizes (``symbolic.SharedMemoryWritten``)
        while True:
            inputs = symbolic.SymbolicInputs()
            positions = [p for p in sorted(dynamic) if p not in specialized]
            for position in positions:
                inputs.add(leaves[position], sorted(dynamic[position]))
            inputs.specialized = [leaves[p] for p in sorted(specialized)]
            try:
                with symbolic.symbolic_inputs(inputs):
                    entry, convention = self._compile(args, kwargs, key)
                    guard = symbolic.Guard(inputs)
                break
            except symbolic.SharedMemoryWritten as shared:
                ids = {id(t) for t in shared.tensors}
                specialized |= {p for p in positions if id(leaves[p]) in ids}
        entry.extra["guard"] = guard
        entry.dynamic_positions = tuple(positions)
        guarded = positions + sorted(specialized)
        self._dynamic_entries.setdefault(key, []).append((guard, guarded, (entry, convention)))
        return entry, convention

    def _restore(
        self, leaves: list[Any], meta: Any, convention: _CallingConvention, graphs: dict[str, fx.GraphModule | None]
    ) -> _Compiled:
        """A compiled entry from a stored one: the layers rebuild their runtimes, nothing is traced."""
        entry = CompiledEntry(meta=meta, forward=graphs["forward"], backward=graphs["backward"])
        entry.inference = graphs["inference"]
        stage = Stage(_not_traced, [leaves[i] for i in convention.tensor_positions], meta)

        def core(inner: CoreStage) -> Any:
            entry.core_meta = inner.meta
            return runtime_from_graphs(inner.meta, self.config, entry, AOTFunction, restored=True)

        _set_runtime(entry, stage, core)
        entry.extra["restored"] = True
        return entry, convention


def _set_runtime(entry: CompiledEntry, stage: Stage[UserArg, UserOut], core: Any) -> None:
    """The entry's runtime: generated from the layers' code, or their interpreted closures (the reference)."""
    if runtime_code.interpreted():
        entry.runtime = entry.reference_runtime = compile_through(default_layers(), stage, core)
        return
    reference, generated = compile_generated(default_layers(), stage, core)
    entry.runtime, entry.reference_runtime = generated.fn, reference
    entry.runtime_source, entry.emit = generated.source, generated.emit


def _not_traced(*args: Any) -> Any:
    raise AssertionError("a restored entry's function is never traced")


def _caller_inference_mode() -> contextlib.AbstractContextManager[Any]:
    """The caller's inference mode, around the function while it is traced (the tracing itself runs
    outside it, see ``_compile_outside_inference_mode``): there ``enable_grad`` records nothing, the values
    the function makes are inference tensors, and views of the inputs are made as eager makes them."""
    return torch.inference_mode() if CALLER_IN_INFERENCE_MODE.get() else contextlib.nullcontext()


class _TensorSlot:
    def __repr__(self) -> str:
        return "<tensor>"

    def __reduce__(self) -> str:
        return "_TENSOR"  # unpickles as the module's one instance, so ``is _TENSOR`` holds


_TENSOR = _TensorSlot()


def _make_config(
    fw_compiler: Compiler,
    bw_compiler: Compiler | None,
    partition_fn: PartitionFn | None,
    decompositions: Mapping[Any, Callable[..., Any]] | None,
    num_params_buffers: int,
    keep_inference_input_mutations: bool,
    inference_compiler: Compiler | None,
    dynamic: bool,
    cache_dir: str | os.PathLike[str] | None = None,
    enable_log: bool = True,
    activation_memory_budget: float | int | None = None,
    activation_policy: ActivationPolicy | None = None,
    dynamic_dims: Mapping[Any, int | Sequence[int]] | None = None,
) -> AOTConfig:
    if activation_memory_budget is not None:
        if partition_fn is not None:
            raise ValueError("pass partition_fn or activation_memory_budget, not both (the budget is a partitioner)")
        partition_fn = ActivationMemoryBudget(activation_memory_budget)
    if activation_policy is not None:
        if partition_fn is default_partition:
            raise ValueError(
                "activation_policy: default_partition saves whatever the backward reads and follows no policy; "
                "leave partition_fn unset (min-cut) or set activation_memory_budget"
            )
        partition_fn = PolicyPartition(partition_fn or min_cut_rematerialization_partition, activation_policy)
    return AOTConfig(
        fw_compiler=fw_compiler,
        bw_compiler=bw_compiler or fw_compiler,
        inference_compiler=inference_compiler or fw_compiler,
        partition_fn=partition_fn or default_partition,
        decompositions=dict(decompositions or {}),
        num_params_buffers=num_params_buffers,
        keep_inference_input_mutations=keep_inference_input_mutations,
        cache_dir=None if cache_dir is None else os.fspath(cache_dir),
        enable_log=enable_log,
        dynamic=dynamic,
        dynamic_dims=tuple(
            (name, (dims,) if isinstance(dims, int) else tuple(dims)) for name, dims in (dynamic_dims or {}).items()
        ),
    )


def aot_function(
    fn: Callable[..., Any],
    fw_compiler: Compiler,
    bw_compiler: Compiler | None = None,
    partition_fn: PartitionFn | None = None,
    decompositions: Mapping[Any, Callable[..., Any]] | None = None,
    num_params_buffers: int = 0,
    keep_inference_input_mutations: bool = False,
    inference_compiler: Compiler | None = None,
    *,
    dynamic: bool = False,
    dynamic_dims: Mapping[str | int, int | Sequence[int]] | None = None,
    enable_log: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    activation_memory_budget: float | int | None = None,
    activation_policy: ActivationPolicy | None = None,
) -> AOTFunction:
    """Compile ``fn`` ahead of time: trace forward and backward, hand each graph to its compiler.

    Args:
        fn: takes (pytrees of) tensors and Python constants, returns (pytrees of) tensors.
        fw_compiler: compiles the forward graph; also the backward and inference
            graphs when those compilers are not given.
        bw_compiler: compiles the backward graph, on the first backward.
        partition_fn: splits the joint graph; torch's partitioner convention.
        decompositions: ATen op -> Python decomposition, applied while tracing.
        num_params_buffers: how many leading tensor inputs are parameters/buffers: every
            graph marks them in ``gm.meta["static_input_indices"]`` (inductor's static inputs).
        keep_inference_input_mutations: the inference graph writes mutated inputs itself
            (``copy_`` into the input at its end, as torch's does, for a backend to fuse)
            where a plain copy reproduces eager; training graphs stay functional.
        inference_compiler: compiles the graph used when no gradient is needed.
        dynamic: trace every dimension of every tensor input (but the ``num_params_buffers``
            leading ones) as a symbol: one entry then serves every size its guards admit
            (``meta.symbolic``). Sizes 0 and 1 are specialized, as torch does.
        dynamic_dims: only these dimensions symbolic: input name (as the function names
            it; nested leaves as ``inputs_0_key``) or flat tensor position -> dimension(s).
            Dimensions marked with ``torch._dynamo.mark_dynamic`` are symbolic too.
        enable_log: False: compiling this function logs nothing on the ``aot.*`` channels.
        cache_dir: persistent compile cache (``aot.cache``) for warm starts in new
            processes; default ``$AOTFX_CACHE_DIR``, unset: in-process cache only.
        activation_memory_budget: at most this many bytes of activations saved for the
            backward (an int), or this fraction of what the default partitioner saves (a
            float in [0, 1]); the plan recomputing the fewest FLOPs is chosen
            (``aot.compile.memory_budget``). Replaces ``partition_fn``.
        activation_policy: what to save or recompute by name (``aot.checkpoint_name``,
            ``aot.save_only_these_names``) or by op (torch's selective-checkpoint policy
            functions, ``aot.ActivationPolicy(policy_fn=...)``); followed by the min-cut
            partitioner (the default then) and the memory budget (``aot.compile.policy``).

    Returns:
        A callable with ``fn``'s calling convention that behaves as ``fn`` does
        eagerly: same values, gradients, aliasing and ``requires_grad``.
    """
    config = _make_config(
        fw_compiler,
        bw_compiler,
        partition_fn,
        decompositions,
        num_params_buffers,
        keep_inference_input_mutations,
        inference_compiler,
        dynamic,
        cache_dir,
        enable_log,
        activation_memory_budget,
        activation_policy,
        dynamic_dims,
    )
    return AOTFunction(fn, config)


def _named_tensors(module: torch.nn.Module) -> list[list[tuple[torch.nn.Module, str, bool]]]:
    """Parameters then buffers, each as the list of (owner, attribute, is_buffer) it is bound to.

    A tensor bound under several names (tied weights) is one group, one graph input.
    """
    groups: dict[int, list[tuple[torch.nn.Module, str, bool]]] = {}
    for is_buffer, named in ((False, module.named_parameters), (True, module.named_buffers)):
        for name, tensor in named(remove_duplicate=False):
            owner_path, _, attr = name.rpartition(".")
            owner = module.get_submodule(owner_path)
            groups.setdefault(id(tensor), []).append((owner, attr, is_buffer))
    return list(groups.values())


@contextlib.contextmanager
def _bound(groups: list[list[tuple[torch.nn.Module, str, bool]]], tensors: Sequence[torch.Tensor]) -> Iterator[None]:
    """Temporarily bind ``tensors`` in place of the module's parameters and buffers.

    Inside a trace's ``bindings_held`` scope the binding lasts until the trace ends: the
    backward may re-run the forward's code (activation checkpointing) and must see them.
    """
    saved: list[tuple[dict[str, Any], str, Any]] = []

    def restore() -> None:
        for table, attr, original in reversed(saved):
            table[attr] = original

    completed = False
    try:
        for group, tensor in zip(groups, tensors, strict=True):
            for owner, attr, is_buffer in group:
                table = owner._buffers if is_buffer else owner._parameters
                saved.append((table, attr, table[attr]))
                table[attr] = tensor  # type: ignore[assignment]
        yield
        completed = True
    finally:
        if not (completed and defer_unbinding(restore)):
            restore()


def _uninitialized(module: torch.nn.Module) -> bool:
    """A lazy module (``LazyLinear`` ...) whose parameters or buffers its first call has not yet shaped."""
    own = [*module.parameters(recurse=False), *module.buffers(recurse=False)]
    return isinstance(module, LazyModuleMixin) and any(is_lazy(t) for t in own)


class AOTModule(torch.nn.Module):
    """An ``nn.Module`` whose forward runs compiled; parameters and buffers are graph inputs."""

    _module: torch.nn.Module  # ``orig_module``, as a plain attribute

    def __init__(self, module: torch.nn.Module, config: AOTConfig, program_key: str | None = None) -> None:
        super().__init__()
        self.orig_module = module
        groups = _named_tensors(module)
        self._groups = groups
        # Where each graph input is read from at every call: its first binding.
        self._bindings = [group[0] for group in groups]
        object.__setattr__(self, "_module", module)  # a plain attribute: read at every call
        names = [self._qualified(module, owner, attr) for owner, attr, _ in (group[0] for group in groups)]
        num = len(groups)

        def functional_call(*args: Any, **kwargs: Any) -> Any:
            # The module's own hooks run around the compiled call, on the real tensors (``forward``).
            with _bound(groups, args[:num]):
                return module.forward(*args[num:], **kwargs)

        submodules = [m for _, m in module.named_modules(remove_duplicate=False)]

        training = operator.attrgetter("training")

        def modes() -> Hashable:
            return tuple(map(training, submodules))

        self._compiled = AOTFunction(
            functional_call, config, leading_names=names, state_key=modes, program_key=program_key, module=module
        )
        self._lazy = any(_uninitialized(m) for m in submodules)

    @staticmethod
    def _qualified(root: torch.nn.Module, owner: torch.nn.Module, attr: str) -> str:
        for path, sub in root.named_modules(remove_duplicate=False):
            if sub is owner:
                return f"{path}.{attr}" if path else attr
        return attr

    def _current_tensors(self) -> list[torch.Tensor]:
        tensors: list[torch.Tensor] = []
        for owner, attr, is_buffer in self._bindings:
            tensor = (owner._buffers if is_buffer else owner._parameters)[attr]
            assert tensor is not None, f"{attr} of {type(owner).__name__} was set to None"
            tensors.append(tensor)
        return tensors

    @property
    def compiled(self) -> AOTFunction:
        return self._compiled

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._lazy:
            self._initialize_lazy(args, kwargs)
        module = self._module  # not ``orig_module``: a submodule's lookup goes through nn.Module.__getattr__
        fast = self._compiled._fast
        if fast is None or kwargs or has_own_hooks(module):
            return call_with_hooks(module, self._call_compiled, args, kwargs)
        # The hot case, as ``_call_compiled`` then ``AOTFunction.__call__`` would run it: the last entry's guarded
        # call (a parameter set to None fails its guard: the full path below says so).
        tensors = [(owner._buffers if buffer else owner._parameters)[attr] for owner, attr, buffer in self._bindings]
        result = fast((*tensors, *args))
        return result if result is not runtime_code.MISS else self._call_compiled(*args)

    def _call_compiled(self, *args: Any, **kwargs: Any) -> Any:
        # Parameters read after the pre-hooks: they may swap them (FSDP gathers the unsharded ones).
        return self._compiled(*self._current_tensors(), *args, **kwargs)

    def _initialize_lazy(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Materialize a lazy module's parameters from the first call's inputs, as its eager pre-hook would.

        ``UninitializedParameter.materialize`` keeps the parameter object, so the bound groups stay valid.
        A lazy submodule below the root sees inputs only the traced forward computes: refused.
        """
        root = self.orig_module
        if _uninitialized(root):
            lazy: Any = root
            lazy._infer_parameters(root, args, kwargs)
        pending = [name or type(sub).__name__ for name, sub in root.named_modules() if _uninitialized(sub)]
        if pending:
            raise UnsupportedInputError(
                f"aot_module: lazy submodule(s) {pending} are not initialized; call the module once eagerly "
                "(a dry run) before compiling it, so that their parameters have shapes"
            )
        self._lazy = False


def aot_module(
    mod: torch.nn.Module,
    fw_compiler: Compiler,
    bw_compiler: Compiler | None = None,
    partition_fn: PartitionFn | None = None,
    decompositions: Mapping[Any, Callable[..., Any]] | None = None,
    keep_inference_input_mutations: bool = False,
    inference_compiler: Compiler | None = None,
    *,
    dynamic: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    activation_memory_budget: float | int | None = None,
    activation_policy: ActivationPolicy | None = None,
) -> AOTModule:
    """Compile ``mod``'s forward ahead of time; its parameters and buffers become graph inputs.

    Gradients land in the parameters' ``.grad`` as in eager. Parameters are read
    at every call, so optimizer steps (in place) and replaced parameters are seen.
    ``cache_dir``, ``activation_memory_budget`` and ``activation_policy`` as in :func:`aot_function`.
    """
    config = _make_config(
        fw_compiler,
        bw_compiler,
        partition_fn,
        decompositions,
        len(_named_tensors(mod)),
        keep_inference_input_mutations,
        inference_compiler,
        dynamic,
        cache_dir,
        activation_memory_budget=activation_memory_budget,
        activation_policy=activation_policy,
    )
    return AOTModule(mod, config)


def aot_module_simplified(
    mod: torch.nn.Module,
    args: Sequence[Any],
    fw_compiler: Compiler,
    bw_compiler: Compiler | None = None,
    partition_fn: PartitionFn | None = None,
    decompositions: Mapping[Any, Callable[..., Any]] | None = None,
    keep_inference_input_mutations: bool = False,
    inference_compiler: Compiler | None = None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    activation_memory_budget: float | int | None = None,
    activation_policy: ActivationPolicy | None = None,
    **_ignored: Any,
) -> Callable[..., Any]:
    """The entry a ``torch.compile`` backend calls: returns ``forward(*runtime_args)``.

    ``args`` are Dynamo's example inputs (possibly fake); compilation happens on
    the first real call, for that call's signature. With a persistent cache
    (``cache_dir``/``AOTFX_CACHE_DIR``), whole compiled entries are stored under the
    graph's canonical form, so a new process compiling the same graph skips tracing.
    Dimensions symbolic in the example inputs are traced symbolic, and size arguments
    are read from the tensors they are dimensions of (``aot.symbolic_sizes``).
    """
    dropped: list[int] = []
    examples = list(args)
    if isinstance(mod, fx.GraphModule):
        examples = symbolic_examples(mod, args)
        mod, dropped = sizes_read_from_tensors(mod, examples)
    kept_args = [example for position, example in enumerate(examples) if position not in dropped]
    num_params = len(_named_tensors(mod))
    dynamic_dims = {num_params + position: dims for position, dims in dynamic_dims_of(kept_args).items()}
    config = _make_config(
        fw_compiler,
        bw_compiler,
        partition_fn,
        decompositions,
        num_params,
        keep_inference_input_mutations,
        inference_compiler,
        False,
        cache_dir,
        activation_memory_budget=activation_memory_budget,
        activation_policy=activation_policy,
        dynamic_dims=dynamic_dims,
    )
    positions = scalar_inputs(mod) if isinstance(mod, fx.GraphModule) else []
    if dropped:
        # The graph reads these sizes from its tensors: the call's ints are not passed on.
        return _without_args(_compiled_forward(mod, config, positions), dropped)
    return _compiled_forward(mod, config, positions)


def _without_args(forward: Callable[..., Any], dropped: list[int]) -> Callable[..., Any]:
    drop = frozenset(dropped)

    def without(*runtime_args: Any) -> Any:
        return forward(*(arg for position, arg in enumerate(runtime_args) if position not in drop))

    for name in ("compiled", "zero_grad", "named_parameters", "named_buffers"):
        if hasattr(forward, name):
            setattr(without, name, getattr(forward, name))
    return without


def _compiled_forward(mod: torch.nn.Module, config: AOTConfig, positions: list[int]) -> Callable[..., Any]:
    """``aot_module_simplified`` once its size arguments are read from tensors: ``positions`` are
    the scalars Dynamo passes as tensors (``aot.wrapped_scalars``)."""
    if not positions:
        compiled = _simplified(mod, config)

        def forward(*runtime_args: Any) -> Any:
            return compiled(*runtime_args)

        forward.compiled = compiled.compiled  # type: ignore[attr-defined]
    else:
        per_value: dict[tuple[Any, ...], AOTModule] = {}

        def forward(*runtime_args: Any) -> Any:
            values = tuple(runtime_args[i].item() for i in positions)
            found = per_value.get(values)
            if found is None:
                assert isinstance(mod, fx.GraphModule)
                found = per_value[values] = _simplified(specialized(mod, positions, values), config)
                forward.compiled = found.compiled  # type: ignore[attr-defined]  # the latest value's
            return found(*runtime_args)

    forward.zero_grad = mod.zero_grad  # type: ignore[attr-defined]
    forward.named_parameters = mod.named_parameters  # type: ignore[attr-defined]
    forward.named_buffers = mod.named_buffers  # type: ignore[attr-defined]
    return forward


def _simplified(mod: torch.nn.Module, config: AOTConfig) -> AOTModule:
    # The program is the graph itself: its canonical form keys whole entries across processes.
    program = entries.program_key(mod, config) if isinstance(mod, fx.GraphModule) else None
    return AOTModule(mod, config, program_key=program)


def aot_export_joint(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None = None,
    decompositions: Mapping[Any, Callable[..., Any]] | None = None,
) -> fx.GraphModule:
    """The joint graph ``(primals..., tangents...) -> (outputs..., grads...)`` of ``fn`` on ``args``.

    The graph is what the core would partition: outputs that alias inputs or
    intermediates are already regenerated outside it. ``gm.meta["aot_meta"]``
    holds the user-level ``ViewAndMutationMeta``.
    """
    config = _make_config(nop, None, None, decompositions, 0, False, None, False)
    compiled = AOTFunction(fn, config)
    call_kwargs = dict(kwargs or {})
    leaves, spec = tree_flatten((tuple(args), call_kwargs))
    joint: list[fx.GraphModule] = []

    def trace_only(inner: CoreStage) -> Any:
        joint.append(trace_joint(inner.fn, inner.args, inner.meta, config.decompositions))
        return lambda flat_args: []

    try:
        stage, _ = compiled._flat(tuple(args), call_kwargs, leaves, spec)
        compile_through(default_layers(), stage, trace_only)
    except Exception as error:
        if not fallback_applies(error):
            raise
        joint.clear()
        with fake_kernel_fallbacks():
            stage, _ = compiled._flat(tuple(args), call_kwargs, leaves, spec)
            compile_through(default_layers(), stage, trace_only)
    joint[0].meta["aot_meta"] = stage.meta
    return joint[0]
