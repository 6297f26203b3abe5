"""Options torch's AOTAutograd accepts do what torch's do: ``keep_inference_input_mutations``,
``num_params_buffers``."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch

import aot
from aot.cache import keys
from tests.oracle import assert_close, check


def _recording(graphs: list[torch.fx.GraphModule]) -> Callable[..., Any]:
    def compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm

    return compiler


def _input_copies(gm: torch.fx.GraphModule) -> list[str]:
    """The placeholders the graph writes with ``copy_``."""
    return [
        node.args[0].name
        for node in gm.graph.nodes
        if node.target is torch.ops.aten.copy_.default and node.args[0].op == "placeholder"
    ]


def _running_stats(x, w, buf):
    buf.mul_(0.9).add_(x.mean(0), alpha=0.1)
    return x @ w


def _returns_written_input(x, y):
    x.add_(y)
    return x, x.t(), y * 2


def _writes_one_of_two(x, y):
    y.mul_(2)
    return x.sum() + y.sum()


def _three_args():
    generator = torch.Generator().manual_seed(0)
    return torch.randn(4, 3, generator=generator), torch.randn(3, 2, generator=generator), torch.zeros(3)


def _two_args():
    generator = torch.Generator().manual_seed(1)
    return torch.randn(3, 3, generator=generator), torch.randn(3, 3, generator=generator)


PROGRAMS = {
    "running_stats": (_running_stats, _three_args, ["primals_3"]),
    "returns_written_input": (_returns_written_input, _two_args, ["primals_1"]),
    "writes_one_of_two": (_writes_one_of_two, _two_args, ["primals_2"]),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_keep_inference_input_mutations_writes_in_the_graph(name):
    fn, make_args, written = PROGRAMS[name]
    graphs: list[torch.fx.GraphModule] = []
    compiled = aot.aot_function(fn, _recording(graphs), keep_inference_input_mutations=True)
    with torch.no_grad():
        check(fn, make_args, compiled_fn=compiled)
    (graph,) = graphs
    assert _input_copies(graph) == written
    # the written value is no longer returned for the runtime to copy
    assert list(graph.graph.output_node().args[0]).count(None) == len(written)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_keep_inference_input_mutations_off_keeps_graphs_functional(name):
    fn, make_args, _ = PROGRAMS[name]
    graphs: list[torch.fx.GraphModule] = []
    with torch.no_grad():
        check(fn, make_args, compiled_fn=aot.aot_function(fn, _recording(graphs)))
    assert not _input_copies(graphs[0])


def test_keep_inference_input_mutations_leaves_training_graphs_functional():
    def make_args():
        x, w, buf = _three_args()
        return x, w.requires_grad_(), buf

    graphs: list[torch.fx.GraphModule] = []
    compiled = aot.aot_function(_running_stats, _recording(graphs), keep_inference_input_mutations=True)
    check(_running_stats, make_args, compiled_fn=compiled)
    assert graphs and not any(_input_copies(gm) for gm in graphs)


@pytest.mark.filterwarnings("ignore:Use of index_put_ on expanded tensors")
@pytest.mark.parametrize(
    "make_args",
    [
        # an expanded input has several indices per element: the runtime writes each element once
        lambda: (torch.zeros(3, 1).expand(3, 3), torch.ones(3, 3)),
        # overlapping inputs: the synthetic base writes back only the written member's region
        lambda: (lambda base: (base[:3].view(3, 1).expand(3, 3), base[1:4].view(3, 1).expand(3, 3)))(torch.ones(5)),
    ],
)
def test_keep_inference_input_mutations_only_where_a_copy_reproduces_eager(make_args):
    def fn(x, y):
        x.index_put_((torch.tensor([0]), torch.tensor([0])), torch.tensor(5.0))
        return x + y

    graphs: list[torch.fx.GraphModule] = []
    compiled = aot.aot_function(fn, _recording(graphs), keep_inference_input_mutations=True)
    with torch.no_grad():
        check(fn, make_args, compiled_fn=compiled)
    assert not _input_copies(graphs[0])


def test_keep_inference_input_mutations_inside_inference_mode():
    graphs: list[torch.fx.GraphModule] = []
    compiled = aot.aot_function(_running_stats, _recording(graphs), keep_inference_input_mutations=True)
    with torch.inference_mode():
        check(_running_stats, _three_args, compiled_fn=compiled)
    # inference tensors are written through the runtime, as eager allows them to be
    assert not _input_copies(graphs[0])


def _static_indices(graphs: list[torch.fx.GraphModule]) -> list[list[str]]:
    """Per graph, the placeholders it marks as parameters or buffers."""
    named = []
    for gm in graphs:
        placeholders = [node.name for node in gm.graph.nodes if node.op == "placeholder"]
        named.append([placeholders[i] for i in gm.meta["static_input_indices"]])
    return named


def test_num_params_buffers_marks_static_inputs_of_every_graph():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8))
    reference = copy.deepcopy(model)
    graphs: list[torch.fx.GraphModule] = []
    compiled = aot.aot_module(model, _recording(graphs))
    x = torch.randn(5, 4)
    out = compiled(x)
    out.sum().backward()
    expected = reference(x)
    expected.sum().backward()
    assert_close(out, expected)
    for param, ref in zip(model.parameters(), reference.parameters(), strict=True):
        assert_close(param.grad, ref.grad, grad=True)
    with torch.no_grad():
        assert_close(compiled(x), reference(x))
    for buffer, ref in zip(model.buffers(), reference.buffers(), strict=True):
        assert_close(buffer, ref)
    forward, backward, inference = _static_indices(graphs)
    # 2 weights, 2 biases, 3 buffers; not the input x (primals_8)
    assert forward == inference == [f"primals_{i}" for i in range(1, 8)]
    # the backward reads the Linear's input and the BatchNorm weight as saved values
    assert backward and set(backward) <= set(forward)


def test_num_params_buffers_of_aot_function_and_the_cache_key():
    def fn(w, b, x):
        return torch.addmm(b, x, w)

    args = (torch.randn(3, 2), torch.randn(2), torch.randn(4, 3))
    graphs: list[torch.fx.GraphModule] = []
    with torch.no_grad():
        out = aot.aot_function(fn, _recording(graphs), num_params_buffers=2)(*args)
        aot.aot_function(fn, _recording(graphs))(*args)
    assert_close(out, fn(*args))
    assert _static_indices(graphs) == [["primals_1", "primals_2"], []]
    # equal graphs with other static inputs are compiled apart: a backend may compile them differently
    context = keys.KeyContext.of({}, None)
    assert keys.graph_key(graphs[0], aot.nop, context) != keys.graph_key(graphs[1], aot.nop, context)
