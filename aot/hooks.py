"""Module and tensor hooks around compiled code: run on the real tensors at every call, or refused.

A hook inside the traced region would run on fake tensors while tracing and never
again: a silent wrong answer. So:

- the hooks of the module ``aot_module`` compiles (forward pre-hooks, forward hooks,
  full backward hooks and backward pre-hooks) run outside the graph, on the real
  inputs and outputs, at every call, in eager's order (:func:`call_with_hooks`);
- a module called inside the traced region that has hooks of its own, or any global
  module hook while one is called, is refused when tracing (:func:`refusing_hooks`),
  naming the module and the hook; the callers re-trace when such a hook is added
  later (:func:`hook_tables`), so the refusal comes at that call instead of a drop;
- ``register_hook`` / ``register_post_accumulate_grad_hook`` on a tensor inside the
  traced region is refused likewise. Hooks registered on the real inputs before the
  call, or on the outputs after it, are ordinary autograd hooks and just work.

``torch.compile(backend="aotfx")`` never gets here with hooks: Dynamo runs them
itself and hands aotfx hook-free graphs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.nn.modules import module as nn_module
from torch.nn.utils.prune import BasePruningMethod
from torch.nn.utils.spectral_norm import SpectralNorm
from torch.nn.utils.weight_norm import WeightNorm
from torch.utils.hooks import BackwardHook

from aot.errors import UnsupportedHookError

__all__ = ["call_with_hooks", "has_own_hooks", "hook_tables", "refusing_hooks"]

_ADVICE = (
    "Register it on the compiled module itself (aot_module(m) runs m's own hooks on the real tensors), "
    "compile the hooked submodule on its own and hook that, or use torch.compile(backend='aotfx'), "
    "whose front end runs hooks itself."
)
# torch's hooks that recompute a parameter-derived attribute (weight = g * v / |v|): outside the graph
# the weight would be a constant to it. Their parametrizations counterparts trace as ordinary code.
_ATTRIBUTE_HOOKS = (WeightNorm, SpectralNorm, BasePruningMethod)
_PARAMETRIZE = (
    "Use torch.nn.utils.parametrizations (weight_norm, spectral_norm) or torch.nn.utils.parametrize "
    "instead; those trace."
)
_TENSOR_HOOK_METHODS = frozenset({"register_hook", "register_post_accumulate_grad_hook"})


def hook_name(hook: Any) -> str:
    """``name (file:line)`` of a hook function, or its type for a callable object."""
    code = getattr(hook, "__code__", None)
    name = getattr(hook, "__qualname__", None) or type(hook).__qualname__
    return f"{name} ({code.co_filename}:{code.co_firstlineno})" if code is not None else name


_KINDS = ("forward pre-hook", "forward hook", "backward hook", "backward pre-hook")


def _module_tables(module: torch.nn.Module) -> list[dict[int, Any]]:
    """A module's own hook dicts, in the order of ``_KINDS``."""
    return [module._forward_pre_hooks, module._forward_hooks, module._backward_hooks, module._backward_pre_hooks]


def _global_tables() -> list[dict[int, Any]]:
    """The global module hook dicts, in the order of ``_KINDS``."""
    return [
        nn_module._global_forward_pre_hooks,
        nn_module._global_forward_hooks,
        nn_module._global_backward_hooks,
        nn_module._global_backward_pre_hooks,
    ]


def has_own_hooks(module: torch.nn.Module) -> bool:
    """Whether ``module`` has hooks of its own (not the global ones)."""
    return any(_module_tables(module))


def _global_hooks() -> list[tuple[str, Any]]:
    tables = zip(_KINDS, _global_tables(), strict=True)
    return [(kind, hook) for kind, table in tables for hook in table.values() if not isinstance(hook, _Refuser)]


def hook_tables(modules: Iterable[torch.nn.Module]) -> list[dict[int, Any]]:
    """The hook dicts of ``modules`` and the global module hook dicts: ``any(tables)`` at every call is cheap.

    A non-empty one means a hook was added since the trace: re-trace, to refuse it.
    """
    return [*_global_tables(), *(table for module in modules for table in _module_tables(module))]


def call_with_hooks(
    module: torch.nn.Module, forward: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``forward(*args, **kwargs)`` wrapped in ``module``'s own hooks, as ``module(...)`` wraps ``module.forward``.

    Pre-hooks may replace the arguments, forward hooks the result; full backward hooks
    see the gradients of the real inputs and outputs (``torch.utils.hooks.BackwardHook``,
    as eager). Global module hooks are not run here: they already ran around the
    compiled module's own call.
    """
    if not has_own_hooks(module):
        return forward(*args, **kwargs)
    _refuse_untraceable(module)
    for hook_id, hook in list(module._forward_pre_hooks.items()):
        if hook_id in module._forward_pre_hooks_with_kwargs:
            replaced = hook(module, args, kwargs)
            if replaced is not None:
                if not (isinstance(replaced, tuple) and len(replaced) == 2):
                    raise RuntimeError(
                        f"forward pre-hook must return None or a tuple of (new_args, new_kwargs), but got {replaced}."
                    )
                args, kwargs = replaced
        else:
            replaced = hook(module, args)
            if replaced is not None:
                args = replaced if isinstance(replaced, tuple) else (replaced,)
    backward_hook = None
    if module._backward_hooks or module._backward_pre_hooks:
        backward_hook = BackwardHook(
            module, list(module._backward_hooks.values()), list(module._backward_pre_hooks.values())
        )
        args = backward_hook.setup_input_hook(args)  # type: ignore[no-untyped-call]
    ran: set[int] = set()
    result = None
    try:
        result = forward(*args, **kwargs)
        for hook_id, hook in list(module._forward_hooks.items()):
            ran.add(hook_id)
            if hook_id in module._forward_hooks_with_kwargs:
                replaced = hook(module, args, kwargs, result)
            else:
                replaced = hook(module, args, result)
            result = result if replaced is None else replaced
    except Exception:
        # Eager runs the ``always_call`` forward hooks that did not run yet, then re-raises.
        for hook_id, hook in list(module._forward_hooks.items()):
            if hook_id in module._forward_hooks_always_called and hook_id not in ran:
                with contextlib.suppress(Exception):
                    if hook_id in module._forward_hooks_with_kwargs:
                        hook(module, args, kwargs, result)
                    else:
                        hook(module, args, result)
        raise
    if backward_hook is not None:
        result = backward_hook.setup_output_hook(result)  # type: ignore[no-untyped-call]
    return result


def _refuse_untraceable(module: torch.nn.Module) -> None:
    """Hooks whose eager effect cannot be had around the graph: refused, naming them."""
    if module._backward_hooks and module._is_full_backward_hook is False:
        hook = next(iter(module._backward_hooks.values()))
        raise UnsupportedHookError(
            f"{type(module).__name__} has a non-full backward hook {hook_name(hook)} (register_backward_hook): "
            "its gradients are those of the last op in the forward, which the compiled forward does not "
            "have. Use register_full_backward_hook."
        )
    for hook in (*module._forward_pre_hooks.values(), *module._forward_hooks.values()):
        if isinstance(hook, _ATTRIBUTE_HOOKS):
            raise UnsupportedHookError(
                f"{type(module).__name__} has the hook {hook_name(hook)}, which recomputes a weight from the "
                "parameters before each call: aotfx cannot run it on the real tensors and keep the weight a "
                "function of the parameters in the graph. " + _PARAMETRIZE
            )


class _Refuser:
    """The global forward pre-hook that, while tracing in this thread, refuses hooked modules.

    Registered first among the global pre-hooks, so it raises before any other hook sees a fake.
    """

    def __init__(self, names: Callable[[torch.nn.Module], str], called: list[torch.nn.Module]) -> None:
        self.names = names
        self.called = called
        self.seen = {id(module) for module in called}
        self.thread = threading.get_ident()

    def __call__(self, module: torch.nn.Module, args: Any) -> None:
        if threading.get_ident() != self.thread:
            return
        if id(module) not in self.seen:
            self.seen.add(id(module))
            self.called.append(module)
        for kind, table in zip(_KINDS, _module_tables(module), strict=True):
            for hook in table.values():
                raise UnsupportedHookError(
                    f"{self.names(module)} has the {kind} {hook_name(hook)}, and it is called inside the compiled "
                    "function: the hook would run on fake tensors while tracing and never on a real call. "
                    + _advice(hook)
                )
        for kind, hook in _global_hooks():
            raise UnsupportedHookError(
                f"the global module {kind} {hook_name(hook)} would run on {self.names(module)} inside the compiled "
                "function, on fake tensors while tracing and never on a real call. Remove it while compiling, "
                "or use torch.compile(backend='aotfx'), whose front end runs hooks itself."
            )


def _advice(hook: Any) -> str:
    """What works instead, for this hook."""
    if isinstance(hook, _ATTRIBUTE_HOOKS):
        return _PARAMETRIZE
    owner = type(getattr(hook, "__self__", None)).__module__
    if owner.startswith("torch.distributed.fsdp"):
        return (
            "FSDP2 shards this module: compile each sharded module on its own instead "
            "(aot_module before or after fully_shard), or torch.compile the sharded model."
        )
    return _ADVICE


class _TensorHookGuard:
    """Refuses ``Tensor.register_hook`` (and the post-accumulate variant) in threads that are tracing.

    The methods are wrapped only while some thread traces (a count under a lock), and the
    wrapper refuses only in a tracing thread: elsewhere it is the original method. (A
    torch-function mode would see the call too, but turns on library code paths made for
    tensor subclasses, so the trace would no longer follow eager's path.)
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._originals: dict[str, Any] = {}
        self._tracing = threading.local()

    def _wrapped(self, method: str) -> Callable[..., Any]:
        original = self._originals[method]

        def refuse_while_tracing(tensor: torch.Tensor, hook: Any) -> Any:
            if getattr(self._tracing, "depth", 0):
                raise UnsupportedHookError(
                    f"Tensor.{method}({hook_name(hook)}) inside the compiled function: the hook would run on "
                    "fake gradients while tracing and never on a real call. Register it on the input before the "
                    "call or on the output after it, or use torch.compile(backend='aotfx'), whose front end "
                    "runs tensor hooks itself."
                )
            return original(tensor, hook)

        return refuse_while_tracing

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        with self._lock:
            if self._users == 0:
                for method in _TENSOR_HOOK_METHODS:
                    self._originals[method] = getattr(torch.Tensor, method)
                    setattr(torch.Tensor, method, self._wrapped(method))
            self._users += 1
        self._tracing.depth = getattr(self._tracing, "depth", 0) + 1
        try:
            yield
        finally:
            self._tracing.depth -= 1
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    for method, original in self._originals.items():
                        setattr(torch.Tensor, method, original)


_TENSOR_HOOKS = _TensorHookGuard()


@contextlib.contextmanager
def refusing_hooks(names: Callable[[torch.nn.Module], str], called: list[torch.nn.Module]) -> Iterator[None]:
    """While the function is traced in this thread: refuse hooked modules and tensor hooks.

    Args:
        names: a module's name for the error (its path in the compiled module).
        called: gets every module called inside, for :func:`hook_tables` at later calls.
    """
    refuser = _Refuser(names, called)
    handle = nn_module.register_module_forward_pre_hook(refuser)
    pre_hooks: Any = nn_module._global_forward_pre_hooks  # an OrderedDict
    pre_hooks.move_to_end(handle.id, last=False)
    try:
        with _TENSOR_HOOKS.active():
            yield
    finally:
        handle.remove()
