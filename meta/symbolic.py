"""Dynamic shapes: the inputs' chosen dimensions as symbols of one ``ShapeEnv`` per compile.

While an entry compiles, :func:`symbolic_inputs` makes the chosen dimensions of the
caller's tensors symbols; every fake made of those tensors then (meta collection,
each trace) has the same symbolic sizes, strides and storage offset, so the traced
graphs hold symbols where the caller's sizes may vary. What the trace relied on
about them (a broadcast, ``x.shape[0] == y.shape[0]``, a size read as a Python
int) is recorded by the ShapeEnv as guards; :class:`Guard` turns them into one
Python expression checked on every call before the entry is reused.

As torch does, a dimension of size 0 or 1 is never made a symbol: it is specialized
(its guard requires that size), since programs branch on it (broadcasting, empty
tensors) far more often than on other sizes. Duck shaping too, as torch: dimensions
of equal size when the entry compiles are one symbol, guarded equal.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._dispatch.python import enable_python_dispatcher
from torch._guards import GuardSource, Source
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import (
    DimDynamic,
    ShapeEnv,
    StatelessSymbolicContext,
    free_unbacked_symbols,
    guard_or_false,
)

from meta.errors import DataDependentError, DynamicShapesUnsupportedError
from meta.python_kernels import eager_kernels

__all__ = [
    "Guard",
    "RuntimeSize",
    "SharedMemoryWritten",
    "SymbolicInputs",
    "current",
    "fake_mode",
    "resolve_sizes",
    "run_with_sizes",
    "symbolic_fake",
    "symbolic_geometry",
    "symbolic_inputs",
    "with_runtime_sizes",
]

# (sizes, strides, storage offset) of a fake, each an int or a SymInt.
Geometry = tuple[tuple[Any, ...], tuple[Any, ...], Any]


@dataclass(frozen=True)
class _ArgSource(Source):
    """The ``index``-th dynamic tensor of a call: the name its symbols are reported under."""

    index: int

    @property
    def _name_template(self) -> str:
        return f"L['t{self.index}']"

    @property
    def guard_source(self) -> GuardSource:
        return GuardSource.LOCAL


@dataclass
class SymbolicInputs:
    """The shape environment of one compile and the symbolic geometry of each dynamic input."""

    # Sizes that depend on tensor data (``nonzero``, ``masked_select``, a boolean mask) are unbacked symbols,
    # as torch's; a Python scalar read from a tensor (``.item()``) stays refused (DataDependentError), as
    # torch.compile's default refuses it (capture_scalar_outputs=False).
    shape_env: ShapeEnv = field(
        default_factory=lambda: ShapeEnv(allow_scalar_outputs=False, allow_dynamic_output_shape_ops=True)
    )
    # id(real tensor) -> its symbolic geometry; the tensors are held so their ids stay theirs.
    geometry: dict[int, Geometry] = field(default_factory=dict)
    tensors: list[torch.Tensor] = field(default_factory=list)
    # symbol -> where a call's value of it is read: ``t0.size(1)`` (``tI`` the I-th dynamic input).
    bindings: dict[Any, str] = field(default_factory=dict)
    # Inputs asked to be dynamic but traced with their sizes, strides and offset as constants (see
    # ``SharedMemoryWritten``); the guard requires each call's to equal them.
    specialized: list[torch.Tensor] = field(default_factory=list)

    def add(self, tensor: torch.Tensor, dims: Sequence[int]) -> None:
        """Make ``dims`` of ``tensor`` symbols (sizes 0 and 1 stay constants, as torch specializes them)."""
        if tensor.layout != torch.strided or tensor.is_sparse:
            raise DynamicShapesUnsupportedError(f"dynamic shapes of a {tensor.layout} tensor")
        dims = [d % tensor.dim() for d in dims] if tensor.dim() else []
        dynamic = [DimDynamic.DYNAMIC if d in dims else DimDynamic.STATIC for d in range(tensor.dim())]
        context: StatelessSymbolicContext[Any, Any] = StatelessSymbolicContext(dynamic_sizes=dynamic)
        source = _ArgSource(len(self.tensors))
        sizes, strides, offset = self.shape_env.create_symbolic_sizes_strides_storage_offset(
            tensor, source, symbolic_context=context
        )
        self.geometry[id(tensor)] = (tuple(sizes), tuple(strides), offset)
        name = f"t{len(self.tensors)}"
        for reads, values in ((f"{name}.size", sizes), (f"{name}.stride", strides)):
            for dim, value in enumerate(values):
                self._bind(value, f"{reads}({dim})")
        self._bind(offset, f"{name}.storage_offset()")
        self.tensors.append(tensor)

    def _bind(self, value: Any, read: str) -> None:
        if isinstance(value, torch.SymInt) and value.node.expr.is_Symbol:
            self.bindings.setdefault(value.node.expr, read)

    def runtime_size(self, value: torch.SymInt) -> RuntimeSize:
        """``value`` (a traced size) as a :class:`RuntimeSize` computed from each call's inputs."""
        import sympy

        expr = value.node.expr
        unbound = [symbol for symbol in expr.free_symbols if symbol not in self.bindings]
        if unbound and free_unbacked_symbols(expr):
            raise DataDependentError(
                f"an output is a view whose view arguments hold a size that depends on tensor data ({value}): "
                "the layers replaying that view after the call read sizes from the inputs only. Return the view "
                "of a clone(), or keep the data-dependent part outside the compiled function."
            )
        if unbound:
            raise DynamicShapesUnsupportedError(f"a size ({value}) that no input's size determines")
        from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP

        body = str(expr.xreplace({symbol: sympy.Symbol(self.bindings[symbol]) for symbol in expr.free_symbols}))
        params = ", ".join(f"t{i}" for i in range(len(self.tensors)))
        evaluate = eval(f"lambda {params}: int({body})", dict(SYMPY_INTERP))
        return RuntimeSize(value, evaluate, body)

    def fakes(self) -> list[torch.Tensor]:
        """A fake per dynamic input, in order, with its symbolic geometry: what the guards are stated on."""
        mode = FakeTensorMode(shape_env=self.shape_env)
        with mode:
            return [symbolic_fake(t, self.geometry[id(t)]) for t in self.tensors]


_CURRENT: ContextVar[SymbolicInputs | None] = ContextVar("aotfx_symbolic_inputs", default=None)


def current() -> SymbolicInputs | None:
    """The symbolic inputs of the compile in progress, ``None`` when it is static."""
    return _CURRENT.get()


@contextlib.contextmanager
def symbolic_inputs(inputs: SymbolicInputs | None) -> Iterator[None]:
    """Compile with ``inputs``' dimensions symbolic (nothing changes for ``None``).

    Symbolic sizes need the Python dispatcher: torch's meta functions and
    decompositions for SymInts are registered there (those that disagree with
    eager corrected, ``meta.python_kernels``).
    """
    if inputs is None:
        yield
        return
    token = _CURRENT.set(inputs)
    try:
        with enable_python_dispatcher(), eager_kernels():
            yield
    finally:
        _CURRENT.reset(token)


def fake_mode() -> FakeTensorMode:
    """A fresh fake mode, on the compile's shape environment when it is symbolic."""
    inputs = current()
    return FakeTensorMode(shape_env=inputs.shape_env if inputs is not None else None)


def symbolic_geometry(tensor: torch.Tensor) -> Geometry | None:
    """The symbolic geometry ``tensor``'s fakes take in this compile, ``None`` for a static one."""
    inputs = current()
    return None if inputs is None else inputs.geometry.get(id(tensor))


def span_end(size: Sequence[Any], stride: Sequence[Any], offset: Any) -> Any:
    """One past the last storage element a tensor of this geometry reaches, ``offset`` for an empty one
    (symbolic sizes too; a size that depends on data counts as non-empty, an over-approximation)."""
    if any(guard_or_false(n == 0) for n in size):
        return offset
    return offset + 1 + sum((n - 1) * step for n, step in zip(size, stride, strict=True))


def symbolic_fake(tensor: torch.Tensor, geometry: Geometry) -> torch.Tensor:
    """A fake with ``geometry`` on a storage of its own, just large enough (inside a fake mode)."""
    sizes, strides, offset = geometry
    extent = span_end(sizes, strides, offset)
    storage = torch.empty(extent * tensor.element_size(), dtype=torch.uint8, device=tensor.device)
    return torch.empty(0, dtype=tensor.dtype, device=tensor.device).set_(
        storage.untyped_storage(), offset, sizes, strides
    )


@dataclass(frozen=True, eq=False)
class RuntimeSize:
    """A view op's argument traced as a symbolic size: the traced SymInt while tracing, and in a
    compiled call the call's value, computed from its dynamic inputs (``run_with_sizes``)."""

    traced: torch.SymInt
    evaluate: Callable[..., int]
    text: str

    def value(self) -> Any:
        inputs = _CALL.get()
        return self.traced if inputs is None else self.evaluate(*inputs)

    def __repr__(self) -> str:
        return self.text


_CALL: ContextVar[Sequence[torch.Tensor] | None] = ContextVar("aotfx_call_sizes", default=None)


def run_with_sizes(inputs: Sequence[torch.Tensor], run: Callable[[Any], Any], args: Any) -> Any:
    r"""``run(args)``: a compiled call, whose dynamic inputs (in the entry's order) give the values of
    ``RuntimeSize``\ s meanwhile. (No context manager: this is on every call's path.)"""
    token = _CALL.set(inputs)
    try:
        return run(args)
    finally:
        _CALL.reset(token)


def resolve_sizes(value: Any) -> Any:
    """``value`` (a view op's arguments) with each ``RuntimeSize`` replaced by its value now."""
    if isinstance(value, RuntimeSize):
        return value.value()
    if isinstance(value, tuple | list):
        return type(value)(resolve_sizes(v) for v in value)
    return value


def with_runtime_sizes(meta: Any, tensors: Sequence[torch.Tensor]) -> Any:
    r"""``meta`` (collected on symbolic fakes) ready for the layers to replay on the caller's tensors.

    The layers apply parts of it to real tensors: an input's final geometry after a
    metadata mutation, the view ops rebuilding an output that aliases an input or an
    intermediate. Symbolic view arguments become ``RuntimeSize``\ s; the rest is refused.
    (Specs, which only shape the fake tangents of a trace, may hold symbols.)
    """
    inputs = current()
    assert inputs is not None
    _refuse_writes_into_shared_memory(meta, tensors, inputs)
    input_info = tuple(
        _final_geometry_at_runtime(_reach(info, tensor, inputs), inputs)
        for info, tensor in zip(meta.input_info, tensors, strict=True)
    )

    def chain(steps: tuple[Any, ...]) -> tuple[Any, ...]:
        rewritten = []
        for step in steps:
            if _has_symbol((step.args, step.kwargs, step.from_geometry)):
                step = dataclasses.replace(
                    step,
                    args=_runtime(step.args, inputs),
                    kwargs=tuple((k, _runtime(v, inputs)) for k, v in step.kwargs),
                    from_geometry=_runtime(step.from_geometry, inputs),
                    runtime_sizes=True,
                )
            rewritten.append(step)
        return tuple(rewritten)

    outputs = []
    for out in meta.output_info:
        alias = out.computed_alias
        if alias is not None:
            alias = dataclasses.replace(alias, view_chain=chain(alias.view_chain))
        outputs.append(dataclasses.replace(out, view_chain=chain(out.view_chain), computed_alias=alias))
    return dataclasses.replace(meta, input_info=input_info, output_info=tuple(outputs))


def _reach(info: Any, tensor: torch.Tensor, inputs: SymbolicInputs) -> Any:
    """``storage_reach`` (how far into its storage the function read or wrote an input at absolute
    offsets) as the synthetic-base layer compares it with the caller's tensor: 0 where it provably stays
    within the input's own elements (an in-place geometry change), else its value now, guarded."""
    reach = info.storage_reach
    if not isinstance(reach, torch.SymInt):
        return info
    geometry = inputs.geometry.get(id(tensor))
    if geometry is not None:
        from torch.fx.experimental.symbolic_shapes import statically_known_true

        extent = span_end(*geometry)
        if statically_known_true(reach <= extent * tensor.element_size()):
            return dataclasses.replace(info, storage_reach=0)
    return dataclasses.replace(info, storage_reach=int(reach))


def _final_geometry_at_runtime(info: Any, inputs: SymbolicInputs) -> Any:
    """An input's geometry after an in-place geometry change (``t_``, ``unsqueeze_``, ``as_strided_``), as
    ``RuntimeSize``\\ s: the metadata-mutation layer gives the caller's tensor the call's values of it.

    Refused: the cases where that layer makes, while compiling, a tensor in the final geometry (an input
    requiring grad restrided before the call, ``set_``, a storage grown by ``resize_``): its fake would
    take the compile's sizes as constants."""
    if not info.mutates_metadata:
        return info
    restrided = info.requires_grad and (info.metadata_mutations_under_no_grad or info.sets_requires_grad)
    if restrided or info.storage_set_to is not None or info.storage_grown_to or info.moves_history:
        what = "set_()" if info.storage_set_to is not None else "resize_() growing its storage"
        if restrided:
            what = "an in-place geometry change autograd does not record (under no_grad) of an input requiring grad"
        elif info.moves_history:
            what = "set_() moving a view's history"
        raise DynamicShapesUnsupportedError(f"input '{info.name}': {what}")
    return dataclasses.replace(info, final_metadata=_runtime(info.final_metadata, inputs))


class SharedMemoryWritten(Exception):
    """Raised while collecting the meta: inputs of symbolic size share memory with another input, one of
    them written. Their fakes had storages of their own, so the trace missed writes reaching the others: the
    compile starts again with ``tensors`` specialized (static fakes sharing their storage, as on static shapes,
    their geometry guarded). The synthetic-base layer then merges them as it does on static shapes."""

    def __init__(self, tensors: Sequence[torch.Tensor]) -> None:
        super().__init__("inputs of symbolic size sharing memory, one written: traced again, specialized")
        self.tensors = list(tensors)


def _refuse_writes_into_shared_memory(meta: Any, tensors: Sequence[torch.Tensor], inputs: SymbolicInputs) -> None:
    """Distinct inputs sharing memory, one of symbolic size, one written: ``SharedMemoryWritten`` names the
    symbolic ones (the synthetic-base layer regenerates them from their storage, whose geometry is not
    symbolic). Read only, they were collected on storages of their own, which no read can tell from shared
    ones."""
    groups: dict[int, dict[int, int]] = {}  # storage -> id(tensor) -> position
    for position, tensor in enumerate(tensors):
        if tensor.layout == torch.strided:
            groups.setdefault(int(tensor.untyped_storage()._cdata), {}).setdefault(id(tensor), position)
    for group in groups.values():
        if len(group) < 2 or not any(id(t) in group for t in inputs.tensors):
            continue
        written = any(meta.input_info[p].mutates_data or meta.input_info[p].mutates_metadata for p in group.values())
        if written:
            symbolic = {id(t) for t in inputs.tensors}
            raise SharedMemoryWritten([tensors[p] for p in group.values() if id(tensors[p]) in symbolic])


def _runtime(value: Any, inputs: SymbolicInputs) -> Any:
    if isinstance(value, torch.SymInt):
        return inputs.runtime_size(value) if value.node.expr.free_symbols else int(value)
    if isinstance(value, torch.SymFloat | torch.SymBool):
        raise DynamicShapesUnsupportedError(f"a view argument {value} of type {type(value).__name__}")
    if isinstance(value, tuple | list):
        return type(value)(_runtime(v, inputs) for v in value)
    return value


def _has_symbol(value: Any) -> bool:
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        return True
    if isinstance(value, tuple | list):
        return any(_has_symbol(v) for v in value)
    if isinstance(value, dict):
        return any(_has_symbol(v) for v in value.values())
    return False


_ARG = re.compile(r"L\['t(\d+)'\]")


class Guard:
    """The conditions an entry compiled on symbolic inputs holds under, as one compiled expression.

    ``guard(tensors)`` (the dynamic inputs, in the order they were added, then the specialized
    ones) is True when the entry computes eager's result for them. Every size, stride and offset
    the trace saw is checked: the symbolic ones by the ShapeEnv's guards, the rest equal.
    """

    def __init__(self, inputs: SymbolicInputs) -> None:
        # Fakes and the ShapeEnv only: the caller's tensors are not held.
        self._fakes: list[Any] = inputs.fakes()
        self._shape_env = inputs.shape_env
        self._specialized = [(tuple(t.shape), t.stride(), t.storage_offset()) for t in inputs.specialized]
        self._compile()

    def _compile(self) -> None:
        from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP

        self._num_guards = len(self._shape_env.guards)
        code = self._shape_env.produce_guards_expression(self._fakes, ignore_static=False) or "True"
        self.code = code
        count = len(self._fakes)
        # The ShapeEnv's own guard code, on each input's size, strides and offset read once.
        body = _ARG.sub(r"t\1", code)
        for reads, local in ((".size()", "z"), (".stride()", "r"), (".storage_offset()", "o")):
            body = re.sub(rf"t(\d+){re.escape(reads)}", rf"{local}\1", body)
        lines = [f"def check({', '.join(f't{i}' for i in range(count))}):"]
        lines += [f"    z{i}, r{i}, o{i} = t{i}.size(), t{i}.stride(), t{i}.storage_offset()" for i in range(count)]
        lines.append(f"    return {body}")
        if self._specialized:
            # The specialized inputs, after the symbolic ones: their geometry as traced, exactly.
            params = ", ".join(f"t{i}" for i in range(count))
            lines[0] = f"def check({params}{', ' if count else ''}*specialized):"
            lines[-1] = f"    return ({body}) and _same(specialized)"
        namespace: dict[str, Any] = dict(SYMPY_INTERP)
        namespace["_same"] = self._same
        exec("\n".join(lines), namespace)
        self._check: Callable[..., bool] = namespace["check"]

    def _same(self, tensors: Sequence[torch.Tensor]) -> bool:
        return all(
            t.shape == size and t.stride() == stride and t.storage_offset() == offset
            for t, (size, stride, offset) in zip(tensors, self._specialized, strict=True)
        )

    def __call__(self, tensors: Sequence[torch.Tensor]) -> bool:
        if len(self._shape_env.guards) != self._num_guards:
            # A backend compiling the backward lazily, after the guard was made, may have added guards.
            self._compile()
        return bool(self._check(*tensors))

    def __repr__(self) -> str:
        return f"Guard({self.code})"
