"""Split a joint graph under a byte budget for saved activations, recomputing the least compute.

``aot_function(..., activation_memory_budget=b)`` partitions with :class:`ActivationMemoryBudget`.
The budget is a byte count (an ``int``) or a fraction (a ``float`` in ``[0, 1]``) of the bytes
the default partitioner saves. Only *activations* count: values the forward computes and keeps
for the backward. Graph inputs the backward reads are held by the caller anyway and cost nothing.

The plan is an integer program over the joint graph's forward-side nodes ``n`` (those not
computed from a tangent), each with two binary choices, ``save[n]`` and ``recompute[n]``:

- a value the backward reads is saved or recomputed: ``save[n] + recompute[n] >= 1``;
- a recomputed value's inputs are saved or recomputed: ``save[m] + recompute[m] >= recompute[n]``;
- an input the function writes is saved only where the backward reads it itself: by the
  backward it holds the new values, so nothing may be recomputed from it;
- graph inputs are never recomputed, ops that write memory or make data-dependent sizes neither;
  a random draw is, from the generator state the forward saves (``aot.compile.rng_replay``: its
  bytes count as saved); a tuple cannot be saved as one value;
- the saved activations fit: ``sum(bytes[n] * save[n]) <= budget``.

It minimizes the recomputed FLOPs (``torch.utils.flop_counter``'s formulas for matmuls,
convolutions and attention; one per output element for the rest; none for views). Only values
the forward computes anyway count as recomputation: a value only the backward needs (a
weight's transpose) is computed once wherever it runs. Among the plans of least FLOPs it takes
the one saving the fewest bytes, so a larger budget never saves fewer bytes (the saved bytes
are monotone in the budget). Both problems are solved exactly by ``scipy.optimize.milp``
(HiGHS branch and bound) within :data:`TIME_LIMIT_S` seconds each; the plan records the
solver's optimality gap, 0 when proven optimal. A budget below the least bytes any plan saves
warns, naming that least, and takes the plan saving the least.

The plan is in the forward graph's ``meta["activation_plan"]`` (:class:`MemoryPlan`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.fx as fx
from torch.utils.flop_counter import flop_registry

from aot.compile.min_cut import can_run_again, node_bytes, size_hint
from aot.compile.partition import (
    JointParts,
    ancestors,
    default_saved,
    is_random,
    reads_across,
    split_joint,
    written_by_forward,
)
from aot.compile.policy import ActivationPolicy, Choice, policy_of, refuse_must_recompute
from aot.compile.rng_replay import STATE_BYTES, replay_draws, replayable

__all__ = ["TIME_LIMIT_S", "ActivationMemoryBudget", "MemoryPlan", "node_flops"]

# Per solve; a plan found in time but not proven optimal reports its gap.
TIME_LIMIT_S = 20.0


@dataclass(frozen=True)
class MemoryPlan:
    """What :class:`ActivationMemoryBudget` chose for one joint graph."""

    budget_bytes: int
    default_bytes: int  # the activations the default partitioner saves
    saved_bytes: int  # the activations this plan saves
    recompute_flops: int  # forward compute run again in the backward
    gap: float  # the solver's relative optimality gap: 0.0 when proven optimal
    saved: tuple[str, ...]  # saved nodes, graph inputs included
    recomputed: tuple[str, ...]  # forward nodes the backward runs again


class ActivationMemoryBudget:
    """A ``partition_fn`` saving at most ``budget`` bytes of activations (a fraction of the
    default partitioner's when a float), recomputing the fewest FLOPs."""

    def __init__(self, budget: float | int) -> None:
        if isinstance(budget, bool) or not isinstance(budget, (int, float)):
            raise TypeError(f"activation_memory_budget must be an int (bytes) or a float fraction, not {budget!r}")
        if budget < 0 or (isinstance(budget, float) and budget > 1):
            raise ValueError(f"activation_memory_budget={budget!r}: a fraction in [0, 1] or a byte count >= 0")
        self.budget = budget

    @property
    def cache_key(self) -> str:  # read by the compile cache: equal budgets share compiled entries
        return f"activation_memory_budget={self.budget!r}"

    def __repr__(self) -> str:
        return f"ActivationMemoryBudget({self.budget!r})"

    def __call__(
        self, joint_module: fx.GraphModule, _joint_inputs: Any = None, *, num_fwd_outputs: int, **_ignored: Any
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        parts = JointParts.of(joint_module, num_fwd_outputs)
        default_bytes = _activation_bytes(default_saved(parts))
        budget = int(self.budget * default_bytes) if isinstance(self.budget, float) else self.budget
        problem = _Problem(joint_module.graph, parts, policy_of(joint_module))
        save, gap = problem.solve(budget)
        saved_set = {node for node, chosen in zip(problem.nodes, save, strict=True) if chosen}
        backward_nodes = ancestors(parts.grads, stop=saved_set) | set(parts.tangents)
        saved = reads_across(parts, saved_set, backward_nodes)  # chosen but unread: not saved
        forward_nodes = ancestors([*parts.fwd_outputs, *saved, *parts.random_in_backward]) | set(parts.primals)
        recomputed = [n for n in joint_module.graph.nodes if n in backward_nodes and n in problem.forward_required]
        forward, backward = split_joint(joint_module, parts, forward_nodes, backward_nodes, saved)
        replay_draws(forward, backward, [node.name for node in recomputed if is_random(node)])
        forward.meta["activation_plan"] = MemoryPlan(
            budget_bytes=budget,
            default_bytes=default_bytes,
            saved_bytes=_activation_bytes(saved) + STATE_BYTES * sum(is_random(node) for node in recomputed),
            recompute_flops=sum(node_flops(node) for node in recomputed),
            gap=gap,
            saved=tuple(node.name for node in saved),
            recomputed=tuple(node.name for node in recomputed),
        )
        return forward, backward


def _activation_bytes(saved: list[fx.Node]) -> int:
    return sum(int(node_bytes(node)) for node in saved if node.op != "placeholder")


def node_flops(node: fx.Node) -> int:
    """Estimated FLOPs of running ``node`` once: torch's flop-counter formula where it has one,
    else one per output element, none for a view or a projection of a tuple."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload) or target.is_view:
        return 0
    if target.overloadpacket is torch.ops.aten._unsafe_view:
        return 0  # a view of a fresh tensor
    formula = flop_registry.get(target.overloadpacket)
    if formula is not None:
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda arg: arg.meta.get("val"))
        try:
            return int(formula(*args, out_val=node.meta.get("val"), **kwargs))
        except Exception:  # a formula that does not take these arguments: fall back to the size
            pass
    values = [node.meta.get("val")] + [arg.meta.get("val") for arg in node.all_input_nodes]
    # (a size hint, never a guard: a size that depends on data has none to give, and gets a guess)
    return max((size_hint(val.numel()) for val in values if isinstance(val, torch.Tensor)), default=1)


class _Problem:
    """The integer program of one joint graph: variables ``save`` then ``recompute`` per node."""

    def __init__(self, graph: fx.Graph, parts: JointParts, policy: ActivationPolicy | None) -> None:
        self.nodes = [n for n in graph.nodes if n.op != "output" and n not in parts.tangent_dependent]
        self.forward_required = ancestors([*parts.fwd_outputs, *parts.random_in_backward])
        index = {node: i for i, node in enumerate(self.nodes)}
        count = len(self.nodes)
        self.count = count
        backward_ops = (node for node in parts.tangent_dependent if node.op != "output")
        needed = {arg for node in backward_ops for arg in node.all_input_nodes if arg in index}
        needed |= {grad for grad in parts.grads if isinstance(grad, fx.Node) and grad in index}
        # save[n] + recompute[n] >= 1 for what the backward reads ...
        rows: list[dict[int, float]] = [{index[node]: 1.0, count + index[node]: 1.0} for node in needed]
        # ... and save[m] + recompute[m] - recompute[n] >= 0 for each input m of n.
        rows += [
            {index[arg]: 1.0, count + index[arg]: 1.0, count + index[node]: -1.0}
            for node in self.nodes
            for arg in node.all_input_nodes
        ]
        self.cover = _matrix(rows, 2 * count)
        self.cover_lower = np.array([1.0] * len(needed) + [0.0] * (len(rows) - len(needed)))
        # A written input holds new values by the backward: saved only where the backward reads it itself.
        saveable = [node_bytes(n) != math.inf and (not written_by_forward(n) or n in needed) for n in self.nodes]
        self.bytes = np.array(
            [node_bytes(n) if ok and n.op != "placeholder" else 0.0 for n, ok in zip(self.nodes, saveable, strict=True)]
        )
        self.flops = np.array([float(node_flops(n)) if n in self.forward_required else 0.0 for n in self.nodes])
        # A random draw runs again from the generator state the forward saves (``aot.compile.rng_replay``).
        recomputable = [n.op != "placeholder" and (can_run_again(n) or replayable(n)) for n in self.nodes]
        self.state_bytes = np.array(
            [float(STATE_BYTES) if is_random(n) and ok else 0.0 for n, ok in zip(self.nodes, recomputable, strict=True)]
        )
        if policy is not None:  # the user's word: a saved value is not recomputed, a recomputed one not saved
            for i, node in enumerate(self.nodes):
                decided = policy.choice(node) if node.op == "call_function" else None
                if decided is None:
                    continue
                choice, must = decided
                if choice is Choice.SAVE and saveable[i]:
                    recomputable[i] = False
                elif choice is Choice.RECOMPUTE and recomputable[i]:
                    saveable[i] = False
                elif choice is Choice.RECOMPUTE and must:
                    refuse_must_recompute(node)
        self.upper = np.array([float(ok) for ok in saveable + recomputable])

    def solve(self, budget: int) -> tuple[list[bool], float]:
        """The saved set of the least-FLOPs plan under ``budget`` (the least-bytes plan if none fits)."""
        count = self.count
        zeros = np.zeros(count)
        save_bytes = np.concatenate([self.bytes, self.state_bytes])  # a replayed draw saves its state
        recompute_flops = np.concatenate([zeros, self.flops])
        least = self._milp(save_bytes, [])
        if least is None:
            raise RuntimeError("activation memory budget: no plan (a value the backward needs cannot be saved)")
        least_bytes = float(save_bytes @ least[0])
        if least_bytes > budget:
            warnings.warn(
                f"activation_memory_budget: {budget} bytes cannot be met; the least any plan saves is "
                f"{round(least_bytes)} bytes, which is used",
                stacklevel=2,
            )
            budget = round(least_bytes)
        fits = (save_bytes, -np.inf, budget + 0.5)
        fastest = self._milp(recompute_flops, [fits])
        assert fastest is not None  # the least-bytes plan fits
        flops = float(recompute_flops @ fastest[0])
        # Among the plans of (near) least FLOPs, the fewest bytes: monotone saved bytes in the budget.
        as_fast = (recompute_flops, -np.inf, flops + max(0.5, 1e-9 * flops))
        smallest = self._milp(save_bytes, [fits, as_fast]) or fastest
        return [bool(round(x)) for x in smallest[0][:count]], max(fastest[1], smallest[1])

    def _milp(self, cost: np.ndarray, extra: list[tuple[np.ndarray, float, float]]) -> tuple[np.ndarray, float] | None:
        from scipy.optimize import Bounds, LinearConstraint, milp  # here: scipy costs 0.3 s to import

        scale = float(np.abs(cost).max()) or 1.0
        constraints = [LinearConstraint(self.cover, self.cover_lower, np.inf)]
        constraints += [LinearConstraint(row[None, :], low, high) for row, low, high in extra]
        result = milp(
            cost / scale,
            integrality=np.ones(2 * self.count),
            bounds=Bounds(np.zeros(2 * self.count), self.upper),
            constraints=constraints,
            options={"time_limit": TIME_LIMIT_S, "mip_rel_gap": 0.0},
        )
        if result.x is None:
            return None
        gap = float(getattr(result, "mip_gap", 0.0) or 0.0)
        return np.round(result.x), gap


def _matrix(rows: list[dict[int, float]], width: int) -> Any:
    from scipy.sparse import csr_array

    data, cols, indptr = [], [], [0]
    for row in rows:
        cols += list(row)
        data += list(row.values())
        indptr.append(len(cols))
    return csr_array((np.array(data), np.array(cols, dtype=np.int64), np.array(indptr)), shape=(len(rows), width))
