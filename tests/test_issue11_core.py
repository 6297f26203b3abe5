"""Issue 11: programs we did not write, compared with eager (items 0, 4, 5, 6, 9, 10, 11)."""

from __future__ import annotations

import pytest
import torch

import aot
from tests.oracle import check


def seeded(*shapes: tuple[int, ...], requires_grad: bool = True, seed: int = 0) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(shape, generator=generator).requires_grad_(requires_grad) for shape in shapes)


# Item 11: partitioners written for torch's AOTAutograd find primals and tangents by placeholder target.


def test_item11_joint_placeholder_targets_are_their_names():
    def f(x, w):
        return (x @ w).tanh().sum(1)

    joint = aot.aot_export_joint(f, seeded((3, 4), (4, 5)))
    placeholders = [node for node in joint.graph.nodes if node.op == "placeholder"]
    assert [node.target for node in placeholders] == [node.name for node in placeholders]
    assert [node.name for node in placeholders] == ["primals_1", "primals_2", "tangents_1"]


@pytest.mark.parametrize("name", ["default_partition", "min_cut_rematerialization_partition"])
def test_item11_torch_partitioners_as_partition_fn(name):
    from torch._functorch import partitioners  # the test only: the package stays functorch-free

    partition_fn = getattr(partitioners, name)

    def f(x, w, b):
        h = torch.nn.functional.linear(x, w, b).tanh()
        return h.relu().sum(1), h * 2

    compiled = aot.aot_function(f, aot.nop, partition_fn=partition_fn)
    check(f, seeded((3, 4), (5, 4), (5,)), compiled_fn=compiled)
