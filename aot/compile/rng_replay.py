"""Random draws the backward runs again, replaying the forward's numbers.

A random op whose value the backward needs is saved by the default partitioner: a second draw
would differ. The rematerializing partitioners (min-cut, the memory budget) may instead run it
again in the backward when that saves bytes (a dropout mask is as large as its input): the
forward then draws through ``run_and_save_rng_state`` (the generator's state before the draw,
then the draw itself, advancing the caller's generator as eager's draw does), saves the state,
and the backward runs ``run_with_rng_state(state, op, ...)``, which draws the same numbers and
leaves the caller's generator as it was. Gradients equal eager's for the same seed.

Only CPU draws with the default generator are replayed (a CUDA state is a seed and offset, and
``generator=`` draws from a generator the graph does not own); a state costs
:data:`STATE_BYTES` bytes, which the partitioners weigh against the draw's.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

import torch
import torch.fx as fx
from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state

from aot.compile.descriptors import DESC, Saved
from aot.compile.partition import is_random, output_values

__all__ = ["STATE_BYTES", "replay_draws", "replayable"]

STATE_BYTES = torch.get_rng_state().numel()  # the CPU generator's state: 5056 bytes


def replayable(node: fx.Node) -> bool:
    """A random op on CPU drawing from the default generator: the backward can replay its draw."""
    if not is_random(node) or node.kwargs.get("generator") is not None:
        return False
    devices = {val.device.type for val in _tensors(node)}
    return devices == {"cpu"}


def _tensors(node: fx.Node) -> list[torch.Tensor]:
    values = [node.meta.get("val"), *(arg.meta.get("val") for arg in node.all_input_nodes)]
    flat: list[torch.Tensor] = []
    for value in values:
        items = value if isinstance(value, (tuple, list)) else [value]
        flat += [item for item in items if isinstance(item, torch.Tensor)]
    return flat


def replay_draws(forward: fx.GraphModule, backward: fx.GraphModule, draws: Iterable[str]) -> None:
    """Make the backward's copies of the random ops named ``draws`` replay the forward's draws.

    ``forward`` and ``backward`` are a partitioner's split in which each of ``draws`` is computed
    in both graphs. The forward saves each draw's state after its other saved values; the
    backward takes the states after its other saved inputs, before the tangents.
    """
    draws = list(draws)
    if not draws:
        return
    forward_nodes = {node.name: node for node in forward.graph.nodes}
    backward_nodes = {node.name: node for node in backward.graph.nodes}
    placeholders = [node for node in backward.graph.nodes if node.op == "placeholder"]
    saved_placeholders = [node for node in placeholders if isinstance(node.meta.get(DESC), Saved)]
    anchor = saved_placeholders[-1] if saved_placeholders else None
    output = forward.graph.output_node()
    outputs = output_values(forward)
    descs = list(output.meta.get(DESC, []))
    for name in draws:
        draw = forward_nodes[name]
        fake_mode = getattr(_tensors(draw)[0], "fake_mode")  # noqa: B009  (a FakeTensor's)
        with fake_mode:
            state_value = torch.empty(STATE_BYTES, dtype=torch.uint8)
        with forward.graph.inserting_before(draw):
            pair = forward.graph.call_function(run_and_save_rng_state, (draw.target, *draw.args), dict(draw.kwargs))
            pair.meta.update(draw.meta)
            pair.meta["val"] = (state_value, draw.meta["val"])
            state = forward.graph.create_node("call_function", operator.getitem, (pair, 0), name=f"{name}_rng_state")
            state.meta["val"] = state_value
            value = forward.graph.call_function(operator.getitem, (pair, 1))
            value.meta.update(draw.meta)
        draw.replace_all_uses_with(value)
        forward.graph.erase_node(draw)
        outputs.append(state)
        descs.append(Saved(state.name))

        copy = backward_nodes[name]
        where = (
            backward.graph.inserting_before(placeholders[0])
            if anchor is None
            else backward.graph.inserting_after(anchor)
        )
        with where:
            placeholder = backward.graph.placeholder(state.name)
        placeholder.meta.update({"val": state_value, DESC: Saved(state.name)})
        anchor = placeholder
        with backward.graph.inserting_before(copy):
            replay = backward.graph.call_function(
                run_with_rng_state, (placeholder, copy.target, *copy.args), dict(copy.kwargs)
            )
        replay.meta.update(copy.meta)
        copy.replace_all_uses_with(replay)
        backward.graph.erase_node(copy)
    output.args = (outputs,)
    output.meta[DESC] = descs
    for gm in (forward, backward):
        gm.graph.lint()
        gm.recompile()
