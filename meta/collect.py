"""Fill ``ViewAndMutationMeta`` by running the flat function once on fake tensors.

A dispatch mode under the function records two things per ATen call: which
tensors an op writes (its schema's alias annotations) and which tensor each view
was taken from, with the op and arguments to take it again. From those:

- an input is *data-mutated* when a write lands on its storage, and
  *metadata-mutated* when an ``inplace_view`` op (``t_``, ``unsqueeze_``,
  ``as_strided_`` ...) is applied to the input itself;
- an output aliases an input or an intermediate when its recorded view chain
  reaches it; the chain is kept so the epilogue can replay it on real tensors.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from meta.alias import written_positions
from meta.indices import IntermediateBase, UserArg, UserOut
from meta.view_and_mutation import (
    InputAliasInfo,
    OutputAliasInfo,
    OutputType,
    TensorSpec,
    ViewAndMutationMeta,
    ViewStep,
)

__all__ = [
    "ViewRecorder",
    "collect_meta",
    "fake_input",
    "fake_inputs",
    "overlaps",
    "saved_tensor_hooks_suspended",
    "storage_extent",
    "storage_key",
]


@contextlib.contextmanager
def saved_tensor_hooks_suspended() -> Iterator[None]:
    """Take the caller's saved-tensor hooks off while tracing, so they are not traced into graphs.

    They still apply at runtime, to what the compiled forward saves.
    """
    autograd = torch._C._autograd
    hooks = []
    while (top := autograd._top_saved_tensors_default_hooks(True)) is not None:
        hooks.append(top)
        autograd._pop_saved_tensors_default_hooks()
    try:
        yield
    finally:
        for pack, unpack in reversed(hooks):
            autograd._push_saved_tensors_default_hooks(pack, unpack)


def _geometry(tensor: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    return tuple(tensor.shape), tuple(tensor.stride()), int(tensor.storage_offset())


def storage_key(tensor: torch.Tensor) -> int:
    """An id of the tensor's storage: equal for tensors that share memory."""
    return int(tensor.untyped_storage()._cdata)


def fake_input(fake_mode: FakeTensorMode, tensor: torch.Tensor) -> torch.Tensor:
    """A fake with the real tensor's size, stride, dtype, device, ``requires_grad`` and leafness.

    Inputs reaching the graph never alias one another (the layers above see to
    that), so each gets its own fake storage rather than a copy of the real
    tensor's view relationships.
    """
    with fake_mode:
        fake = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device=tensor.device)
        fake.requires_grad_(tensor.requires_grad)
        if tensor.requires_grad and not tensor.is_leaf:
            # A non-leaf may be mutated in place where a leaf may not: keep autograd's verdict eager's.
            fake = fake.clone()
    return fake


def storage_extent(tensor: torch.Tensor) -> tuple[int, int]:
    """The storage interval ``[start, end)`` a tensor's elements lie in (over-approximated by strides)."""
    start = int(tensor.storage_offset())
    if tensor.numel() == 0:
        return start, start
    return start, start + 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))


def _touch_interval(tensor: torch.Tensor) -> tuple[int, int]:
    """The storage extent, an empty tensor counted as touching its offset: an in-place op on it is
    still a mutation of that input to eager (its version counter moves), so it must meet it."""
    start, end = storage_extent(tensor)
    return (start, start + 1) if end == start else (start, end)


def _intersect(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors may share an element: same storage and intersecting extents."""
    return storage_key(a) == storage_key(b) and _intersect(_touch_interval(a), _touch_interval(b))


def fake_inputs(fake_mode: FakeTensorMode, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Fakes of ``tensors`` that alias one another as the real ones do.

    A tensor passed twice gets one fake; tensors sharing storage become views of
    one fake storage at their real offsets, so a write through one is seen by the
    others. The fake storage is a leaf when the tensors' common base is, so
    autograd refuses in-place writes exactly where eager does.
    """
    fakes: dict[int, torch.Tensor] = {}
    groups: dict[int, list[torch.Tensor]] = {}
    for tensor in tensors:
        if id(tensor) not in fakes:
            fakes[id(tensor)] = tensor
            groups.setdefault(storage_key(tensor), []).append(tensor)
    for members in groups.values():
        if len(members) == 1 or len({m.dtype for m in members}) > 1:
            for member in members:
                fakes[id(member)] = fake_input(fake_mode, member)
            continue
        start = min(storage_extent(m)[0] for m in members)
        end = max(storage_extent(m)[1] for m in members)
        bases = {id(m._base if m._base is not None else m): m._base if m._base is not None else m for m in members}
        common = next(iter(bases.values())) if len(bases) == 1 else None
        requires_grad = any(m.requires_grad for m in members)
        is_leaf = common.is_leaf if common is not None else not requires_grad
        with fake_mode:
            storage = torch.empty(end - start, dtype=members[0].dtype, device=members[0].device)
            storage.requires_grad_(requires_grad)
            if requires_grad and not is_leaf:
                storage = storage.clone()
            for member in members:
                source = storage if member.requires_grad else storage.detach()
                offset = int(member.storage_offset()) - start
                fakes[id(member)] = source.as_strided(member.shape, member.stride(), offset)
    return [fakes[id(tensor)] for tensor in tensors]


@dataclasses.dataclass
class _Write:
    tensor: torch.Tensor
    metadata_only: bool
    grad_enabled: bool
    hidden_from_autograd: bool
    seq: int
    # The written tensor's storage extent when it was written: later metadata changes do not move it.
    storage: int = -1
    extent: tuple[int, int] = (0, 0)

    def __post_init__(self) -> None:
        self.storage, self.extent = storage_key(self.tensor), _touch_interval(self.tensor)

    def hits(self, tensor: torch.Tensor) -> bool:
        """Whether this write may have changed an element of ``tensor``."""
        return self.storage == storage_key(tensor) and _intersect(self.extent, _touch_interval(tensor))


class ViewRecorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Records, below autograd, each view's parent and each write's target."""

    def __init__(self, alias_sources: Sequence[torch.Tensor] = ()) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        # id(view) -> (parent tensor, step); the view is kept alive in ``_keep``.
        self.parents: dict[int, tuple[torch.Tensor, ViewStep]] = {}
        self.writes: list[_Write] = []
        self._keep: list[Any] = []
        # Tensors whose aliases made by non-view ops (unsafe_split ...) are recorded too, so that
        # replaying the op reproduces eager's storage sharing without autograd view tracking.
        self._alias_sources = {id(t): storage_key(t) for t in alias_sources}
        self._initial_geometry = {id(t): _geometry(t) for t in alias_sources}
        self._initial_offset = {id(t): int(t.storage_offset()) for t in alias_sources}
        self._initial_version = {storage_key(t): t._version for t in alias_sources}
        self.clock = 0  # orders views and writes

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        self.clock += 1
        from_geometry = None
        if args and id(args[0]) in self._initial_geometry:
            geometry = _geometry(args[0])
            if geometry != self._initial_geometry[id(args[0])]:
                size, stride, offset = geometry
                from_geometry = (size, stride, offset - self._initial_offset[id(args[0])])
        out = func(*args, **kwargs)
        schema = func._schema
        metadata_only = torch.Tag.inplace_view in func.tags
        grad_enabled = torch.is_grad_enabled()
        for position in written_positions(func, args):
            argument = schema.arguments[position]
            value = kwargs.get(argument.name) if argument.kwarg_only or position >= len(args) else args[position]
            for tensor in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(tensor, torch.Tensor):
                    hidden = not tensor.requires_grad
                    self.writes.append(_Write(tensor, metadata_only, grad_enabled, hidden, self.clock))
        if args and isinstance(args[0], torch.Tensor) and (func.is_view or self._aliases_source(args[0], out)):
            step_kwargs = tuple(sorted(kwargs.items()))
            views = [(None, out)] if isinstance(out, torch.Tensor) else list(enumerate(out))
            initial_version = self._initial_version.get(storage_key(args[0]))
            version = -1 if initial_version is None else args[0]._version - initial_version
            for item, view in views:
                key = self.clock * 1024 + (item or 0)
                step = ViewStep(func, tuple(args[1:]), step_kwargs, item, grad_enabled, key, from_geometry, version)
                self._record(view, args[0], step)
        return out

    def _aliases_source(self, arg: torch.Tensor, out: Any) -> bool:
        key = self._alias_sources.get(id(arg))
        if key is None:
            return False
        outs = out if isinstance(out, (list, tuple)) else (out,)
        return any(isinstance(o, torch.Tensor) and o is not arg and storage_key(o) == key for o in outs)

    def _record(self, view: torch.Tensor, parent: torch.Tensor, step: ViewStep) -> None:
        self._keep.append(view)
        self.parents[id(view)] = (parent, step)

    def chain_to_root(
        self, tensor: torch.Tensor, stop: Callable[[torch.Tensor], bool]
    ) -> tuple[torch.Tensor, tuple[ViewStep, ...]]:
        """Walk parents from ``tensor`` up to a tensor with none, or one ``stop`` accepts."""
        steps: list[ViewStep] = []
        while id(tensor) in self.parents and not stop(tensor):
            tensor, step = self.parents[id(tensor)]
            steps.append(step)
        return tensor, tuple(reversed(steps))

    def root(self, tensor: torch.Tensor, depth: int) -> torch.Tensor:
        """The tensor ``depth`` view steps above ``tensor``."""
        for _ in range(depth):
            tensor = self.parents[id(tensor)][0]
        return tensor


def collect_meta(
    flat_fn: Callable[..., Sequence[torch.Tensor]],
    flat_args: Sequence[torch.Tensor],
    names: Sequence[str],
    fake_mode: FakeTensorMode | None = None,
) -> ViewAndMutationMeta:
    """Run ``flat_fn`` once on fakes of ``flat_args`` and describe its inputs and outputs.

    Args:
        flat_fn: takes the tensors positionally, returns a sequence of tensors.
        flat_args: real (or fake) tensors giving the input signature.
        names: a readable name per input, for errors and reports.
    """
    fake_mode = fake_mode or FakeTensorMode()
    fakes = fake_inputs(fake_mode, flat_args)
    initial_offsets = [int(fake.storage_offset()) for fake in fakes]
    recorder = ViewRecorder(alias_sources=fakes)
    with saved_tensor_hooks_suspended(), fake_mode, recorder:
        outs = list(flat_fn(*fakes))

    fake_ids = {id(fake) for fake in fakes}
    written_through = {
        id(recorder.chain_to_root(w.tensor, lambda t: id(t) in fake_ids)[0])
        for w in recorder.writes
        if not w.metadata_only
    }
    input_info = tuple(
        _input_info(name, real, fake, offset, recorder.writes, id(fake) in written_through)
        for name, real, fake, offset in zip(names, flat_args, fakes, initial_offsets, strict=True)
    )
    input_position: dict[int, UserArg] = {}
    input_storage: dict[int, UserArg] = {}
    for i, fake in enumerate(fakes):
        input_position.setdefault(id(fake), UserArg(i))
        input_storage.setdefault(storage_key(fake), UserArg(i))

    # The last data write sharing each input's version counter (its storage), overlapping or not:
    # a view taken before it was modified under eager's eyes, whatever region the write touched.
    last_write: dict[UserArg, int] = {}
    for w in recorder.writes:
        if not w.metadata_only:
            for i, fake in enumerate(fakes):
                if storage_key(fake) == w.storage:
                    last_write[UserArg(i)] = max(last_write.get(UserArg(i), -1), w.seq)

    first_position: dict[int, UserOut] = {}
    for out_idx, out in enumerate(outs):
        first_position.setdefault(id(out), UserOut(out_idx))

    output_info: list[OutputAliasInfo] = []
    intermediate_bases: list[OutputAliasInfo] = []
    base_of_root: dict[int, IntermediateBase] = {}
    for out_idx, out in enumerate(outs):
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"output {out_idx}: the flat function must return tensors, got {type(out).__name__}")

        def info(kind: OutputType, tensor: torch.Tensor = out, **base: Any) -> OutputAliasInfo:
            return OutputAliasInfo(kind, requires_grad=tensor.requires_grad, spec=TensorSpec.of(tensor), **base)

        if id(out) in input_position:
            output_info.append(info(OutputType.IS_INPUT, base_input=input_position[id(out)]))
            continue
        if first_position[id(out)] != out_idx:
            output_info.append(info(OutputType.IS_OUTPUT, base_output=first_position[id(out)]))
            continue
        root, chain = recorder.chain_to_root(out, lambda t: id(t) in input_position)
        if not chain:
            if storage_key(out) in input_storage:
                # An alias of an input made by an op that is not a view op: rebuild it by strides.
                base = input_storage[storage_key(out)]
                step = ViewStep(torch.ops.aten.as_strided.default, (out.shape, out.stride(), out.storage_offset()))
                output_info.append(info(OutputType.ALIAS_OF_INPUT, base_input=base, view_chain=(step,)))
            else:
                output_info.append(info(OutputType.NON_ALIAS))
        elif id(root) in input_position:
            base = input_position[id(root)]
            before = chain[-1].key // 1024 < last_write.get(base, -1)
            output_info.append(
                info(OutputType.ALIAS_OF_INPUT, base_input=base, view_chain=chain, replay_before_write_back=before)
            )
        elif id(root) in first_position:
            base_out = first_position[id(root)]
            output_info.append(info(OutputType.ALIAS_OF_INTERMEDIATE, base_output=base_out, view_chain=chain))
        else:
            if id(root) not in base_of_root:
                base_of_root[id(root)] = IntermediateBase(len(intermediate_bases))
                intermediate_bases.append(
                    OutputAliasInfo(OutputType.NON_ALIAS, requires_grad=root.requires_grad, spec=TensorSpec.of(root))
                )
            base_k = base_of_root[id(root)]
            output_info.append(info(OutputType.ALIAS_OF_INTERMEDIATE, base_intermediate=base_k, view_chain=chain))
    backward_error = None
    if any(info.mutates_data for info in input_info):
        with saved_tensor_hooks_suspended(), fake_mode:
            backward_error = _eager_backward_error(outs, fakes)
    return ViewAndMutationMeta(tuple(input_info), tuple(output_info), tuple(intermediate_bases), backward_error)


def _eager_backward_error(outs: Sequence[torch.Tensor], fakes: Sequence[torch.Tensor]) -> str | None:
    """Run eager's backward on the fakes: the in-place-modification error it raises, if any.

    Writes into inputs bump version counters shared with other inputs and their
    views, which the compiled graphs (working on copies) cannot see.
    """
    differentiable = [o for o in outs if o.requires_grad and (o.is_floating_point() or o.is_complex())]
    if not differentiable or not any(f.requires_grad for f in fakes):
        return None
    try:
        # All the way to the leaves, as ``loss.backward()`` goes (``autograd.grad`` to the inputs stops short).
        torch.autograd.backward(differentiable, [torch.ones_like(o) for o in differentiable])
    except RuntimeError as error:
        if "modified by an inplace operation" in str(error):
            return str(error)
    return None


def _input_info(
    name: str, real: torch.Tensor, fake: torch.Tensor, initial_offset: int, writes: list[_Write], through: bool
) -> InputAliasInfo:
    data_writes = [w for w in writes if not w.metadata_only and w.hits(fake)]
    metadata_writes = [w for w in writes if w.metadata_only and w.tensor is fake]
    final_metadata = None
    if metadata_writes:
        # Relative to the input's own offset: the real input's offset differs from the fake's.
        final_metadata = (tuple(fake.shape), tuple(fake.stride()), int(fake.storage_offset()) - initial_offset)
    return InputAliasInfo(
        name=name,
        requires_grad=real.requires_grad,
        is_leaf=real.is_leaf,
        mutates_data=bool(data_writes),
        mutates_metadata=bool(metadata_writes),
        mutations_under_no_grad=bool(data_writes) and not any(w.grad_enabled for w in data_writes),
        # Every write autograd could have seen went through an untracked alias (the rest were under no_grad).
        mutations_hidden_from_autograd=any(w.grad_enabled for w in data_writes)
        and real.requires_grad
        and all(w.hidden_from_autograd or not w.grad_enabled for w in data_writes),
        written_through=bool(data_writes) and through,
        requires_grad_after=bool(data_writes) and fake.requires_grad,
        version_bumps=fake._version,
        final_metadata=final_metadata,
    )
