"""Saving or recomputing by the user's word: named values and per-op policies for the partitioners.

Two ways to say what the backward keeps, as JAX and torch users say it:

- **names** (JAX's ``checkpoint_name`` / ``save_only_these_names``): ``aot.checkpoint_name(x, "attn")``
  inside the compiled function names the value ``x`` (eagerly it returns ``x``; while tracing it
  tags the node that made it). ``aot.save_only_these_names("attn")`` saves the named values and
  recomputes every other one that can be (a random op, an op writing memory cannot);
- **ops** (torch's selective activation checkpointing): a ``policy_fn(ctx, op, *args, **kwargs)``
  returning a ``torch.utils.checkpoint.CheckpointPolicy`` per op: ``MUST_SAVE`` / ``PREFER_SAVE``
  save its output, ``MUST_RECOMPUTE`` / ``PREFER_RECOMPUTE`` recompute it in the backward.

``aot_function(..., activation_policy=policy)`` hands the policy to the min-cut partitioner (the
default with a policy) or to the memory-budget planner, through ``joint.meta["activation_policy"]``:
a saved value is never recomputed, a recomputed one never saved. ``MUST_RECOMPUTE`` of an op that
cannot run again (a random draw, an op writing memory) is an error naming the op; ``PREFER_*`` and
names only apply where they can.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot
from torch.utils.checkpoint import CheckpointPolicy

__all__ = [
    "NAMES",
    "POLICY",
    "ActivationPolicy",
    "Choice",
    "PolicyPartition",
    "checkpoint_name",
    "policy_of",
    "refuse_must_recompute",
    "save_only_these_names",
]

NAMES = "checkpoint_names"  # node.meta key: the names aot.checkpoint_name gave the node's value
POLICY = "activation_policy"  # joint GraphModule.meta key: the ActivationPolicy in force


def checkpoint_name(x: torch.Tensor, name: str) -> torch.Tensor:
    """``x``, named ``name`` for an :class:`ActivationPolicy` (JAX's ``checkpoint_name``)."""
    mode = get_proxy_mode()
    if mode is not None and isinstance(x, torch.Tensor):
        tracked = get_proxy_slot(x, mode.tracer, None)
        if tracked is not None:
            tracked.proxy.node.meta.setdefault(NAMES, []).append(name)
    return x


class Choice(enum.Enum):
    SAVE = "save"
    RECOMPUTE = "recompute"


@dataclass(frozen=True)
class ActivationPolicy:
    """What to save and what to recompute, by name or by op (see the module docstring)."""

    save_names: frozenset[str] = frozenset()
    recompute_names: frozenset[str] = frozenset()
    recompute_unnamed: bool = False  # save_only_these_names: what is not named to save is recomputed
    policy_fn: Callable[..., CheckpointPolicy] | None = field(default=None, compare=False)

    @property
    def cache_key(self) -> str:
        from aot.cache.keys import function_identity

        fn_key = None if self.policy_fn is None else function_identity(self.policy_fn).text
        names = (sorted(self.save_names), sorted(self.recompute_names), self.recompute_unnamed)
        return f"policy{names}/{fn_key}"

    def choice(self, node: fx.Node) -> tuple[Choice, bool] | None:
        """(save or recompute, whether it must) for ``node``, or None where the partitioner decides."""
        names = set(node.meta.get(NAMES, ()))
        if names & self.save_names:
            return Choice.SAVE, False
        if names & self.recompute_names:
            return Choice.RECOMPUTE, False
        if self.policy_fn is not None and isinstance(node.target, torch._ops.OpOverload):
            decided = _ask(self.policy_fn, node)
            if decided is not None:
                return decided
        if self.recompute_unnamed and node.op == "call_function":
            return Choice.RECOMPUTE, False
        return None


def save_only_these_names(*names: str) -> ActivationPolicy:
    """JAX's policy: the values named by :func:`checkpoint_name` with one of ``names`` are saved,
    every other value the backward needs is recomputed where it can be."""
    return ActivationPolicy(save_names=frozenset(names), recompute_unnamed=True)


class _PolicyContext:
    """The ``ctx`` torch's selective-checkpoint policies receive: this is the forward, not a recompute."""

    is_recompute = False


_CHOICES = {
    CheckpointPolicy.MUST_SAVE: (Choice.SAVE, True),
    CheckpointPolicy.PREFER_SAVE: (Choice.SAVE, False),
    CheckpointPolicy.MUST_RECOMPUTE: (Choice.RECOMPUTE, True),
    CheckpointPolicy.PREFER_RECOMPUTE: (Choice.RECOMPUTE, False),
}


def _ask(policy_fn: Callable[..., CheckpointPolicy], node: fx.Node) -> tuple[Choice, bool] | None:
    args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda arg: arg.meta.get("val"))
    answer = policy_fn(_PolicyContext(), node.target, *args, **kwargs)
    if isinstance(answer, bool):  # torch's older policies answered "save?"
        return (Choice.SAVE, False) if answer else (Choice.RECOMPUTE, False)
    return _CHOICES.get(answer)


def policy_of(joint_module: fx.GraphModule) -> ActivationPolicy | None:
    policy = joint_module.meta.get(POLICY)
    return policy if isinstance(policy, ActivationPolicy) else None


class PolicyPartition:
    """``partition_fn`` with ``policy`` in force: records it on the joint graph for ``partition_fn`` to read."""

    def __init__(self, partition_fn: Callable[..., Any], policy: ActivationPolicy) -> None:
        self.partition_fn = partition_fn
        self.policy = policy

    @property
    def cache_key(self) -> str:
        from aot.cache.keys import function_identity

        return f"{function_identity(self.partition_fn).text}+{self.policy.cache_key}"

    def __call__(self, joint_module: fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
        joint_module.meta[POLICY] = self.policy
        return self.partition_fn(joint_module, *args, **kwargs)


def refuse_must_recompute(node: fx.Node) -> None:
    raise ValueError(
        f"activation_policy: {node.target} ({node.name}) must be recomputed, but it cannot run again in the "
        "backward (a random draw or an op writing memory): save it, or make the policy PREFER_RECOMPUTE"
    )
