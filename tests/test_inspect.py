"""Inspection (saved values with source lines, op counts, pictures, report) and logging (AOTFX_LOGS)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import aot
import aot.cache
import aot.compile.trace
from aot import inspect as aot_inspect
from aot import logs

SVG = "{http://www.w3.org/2000/svg}"


def mlp(x, w1, b1, w2, b2):
    hidden = F.relu(F.linear(x, w1, b1))
    return F.linear(hidden, w2, b2)


def _mlp_args():
    torch.manual_seed(0)
    x = torch.randn(8, 16)
    return [x, *(torch.randn(shape, requires_grad=True) for shape in [(32, 16), (32,), (4, 32), (4,)])]


def _compiled_mlp():
    """A fresh trace each time: the compile cache would hand back an entry traced by an earlier test."""
    with aot.cache.disabled():
        compiled = aot.aot_function(mlp, aot.nop)
        compiled(*_mlp_args()).sum().backward()
    return compiled


@pytest.fixture
def recorded(monkeypatch):
    """Trace with ``recording_source_lines`` around ``make_fx``, as ``aot.compile.trace`` is meant to."""

    def make_fx_recording(fn, **kwargs):
        traced = make_fx(fn, **kwargs)

        def run(*args):
            with aot_inspect.recording_source_lines():
                return traced(*args)

        return run

    monkeypatch.setattr(aot.compile.trace, "make_fx", make_fx_recording)


@pytest.fixture(autouse=True)
def logs_off():
    yield
    logs.disable()


# --------------------------------------------------------------------------------------------
# Entries, saved values, report


def test_entries_of_function_module_and_entry():
    compiled = _compiled_mlp()
    (entry,) = aot_inspect.entries(compiled)
    assert aot_inspect.entries(entry) == [entry]
    module = aot.aot_module(torch.nn.Linear(3, 2), aot.nop)
    with pytest.raises(ValueError, match="nothing compiled yet"):
        aot_inspect.graphs(module)
    module(torch.randn(4, 3)).sum().backward()
    assert set(aot_inspect.graphs(module)) == {"joint", "forward", "backward"}
    with pytest.raises(TypeError, match="AOTFunction"):
        aot_inspect.entries(mlp)


def test_saved_values_shapes_bytes_and_producers():
    compiled = _compiled_mlp()
    rows = aot_inspect.saved_values(compiled)
    by_producer = {row.producer: row for row in rows}
    assert by_producer["input x"].shape == (8, 16) and by_producer["input x"].is_input
    relu = by_producer["aten.relu.default"]
    assert (relu.shape, relu.dtype, relu.nbytes) == ((8, 32), torch.float32, 8 * 32 * 4)
    assert aot_inspect.saved_bytes(compiled) == sum(row.nbytes for row in rows)
    assert aot_inspect.saved_for_backward(compiled) == [(r.name, r.shape, r.dtype, r.nbytes) for r in rows]


def test_saved_report_without_stack_traces_says_so():
    compiled = _compiled_mlp()
    entry = compiled.entries[0]
    for gm in (entry.joint, entry.forward, entry.backward):
        for node in gm.graph.nodes:
            node.meta.pop("stack_trace", None)
    text = aot_inspect.saved_report(compiled)
    relu_line = next(line for line in text.splitlines() if "aten.relu.default" in line)
    assert aot_inspect.NOT_RECORDED in relu_line and "f32[8, 32]" in relu_line and "1024" in relu_line
    x_line = next(line for line in text.splitlines() if "input x" in line)
    assert aot_inspect.NOT_RECORDED not in x_line  # an input has no source line to miss


def test_saved_report_says_why_and_what_is_recomputed():
    def mlp_gelu(x, w1, w2):
        return F.gelu(F.gelu(x @ w1) @ w2).sum()

    args = (torch.randn(8, 16), torch.randn(16, 32, requires_grad=True), torch.randn(32, 4, requires_grad=True))
    default = aot.aot_function(mlp_gelu, aot.nop)
    default(*args).backward()
    whys = {row.producer: row.why for row in aot_inspect.saved_values(default)}
    assert whys["input x"] == "input" and whys["aten.mm.default"] == "needed"
    assert whys["aten.gelu.default"] == "cheaper to save"  # a pointwise op the default partitioner keeps
    assert aot_inspect.recomputed_ops(default) == []

    budget = aot.aot_function(mlp_gelu, aot.nop, activation_memory_budget=0.0)
    budget(*args).backward()
    recomputed = aot_inspect.recomputed_ops(budget)
    matmul_flops = sum(op.flops for op in recomputed if op.producer == "aten.mm.default")
    assert matmul_flops == 2 * 8 * 16 * 32 + 2 * 8 * 32 * 4  # both matmuls run again: nothing is saved
    text = aot_inspect.saved_report(budget)
    assert "recomputed in the backward:" in text and "aten.gelu.default" in text.split("recomputed")[1]


def test_dropout_is_saved_because_random():
    compiled = aot.aot_function(lambda x: F.dropout(x, 0.5).sum(), aot.nop)
    compiled(torch.randn(16, requires_grad=True)).backward()
    whys = [row.why for row in aot_inspect.saved_values(compiled)]
    assert "random" in whys or "cheaper to save" in whys  # the draw's mask, or a value computed from it


def test_saved_report_names_the_user_source_line(recorded):
    text = aot_inspect.saved_report(_compiled_mlp())
    relu_line = next(line for line in text.splitlines() if "aten.relu.default" in line)
    assert "test_inspect.py:" in relu_line and "in mlp: hidden = F.relu(F.linear(x, w1, b1))" in relu_line


def test_recording_source_lines_marks_forward_ops_only():
    def joint(x, w):
        out = (x @ w).sin().sum()
        return [out, *torch.autograd.grad([out], [w])]

    x, w = torch.randn(2, 3), torch.randn(3, 4, requires_grad=True)
    with aot_inspect.recording_source_lines():
        gm = make_fx(joint)(x, w)
    lines = {node.name: aot_inspect.source_line(node) for node in gm.graph.nodes}
    assert "in joint: out = (x @ w).sin().sum()" in lines["sin"]
    assert lines["x_1"] is None
    # Without the context, nothing is recorded; and the previous state is restored.
    assert all(aot_inspect.source_line(n) is None for n in make_fx(joint)(x, w).graph.nodes)


def test_source_line_parses_the_innermost_frame():
    node = make_fx(lambda t: t + 1)(torch.ones(1)).graph.find_nodes(op="placeholder")[0]
    node.meta["stack_trace"] = (
        '  File "/a/model.py", line 3, in forward\n    y = self.block(x)\n'
        '  File "/a/block.py", line 9, in forward\n    return x.relu()\n'
    )
    assert aot_inspect.source_line(node) == "block.py:9 in forward: return x.relu()"
    node.meta["stack_trace"] = '  File "/tmp/ipykernel_7/123.py", line 3, in f\n    return x.sin()\n'
    assert aot_inspect.source_line(node) == "cell:3 in f: return x.sin()"


def test_recording_keeps_code_without_a_file_when_it_is_a_module():
    namespace = {"__name__": "__main__"}  # as for ``python -c`` or an exec'd script
    exec(compile("def f(x):\n    return x.cos()\n", "<string>", "exec"), namespace)
    with aot_inspect.recording_source_lines():
        gm = make_fx(namespace["f"])(torch.randn(2))
    (cos,) = gm.graph.find_nodes(op="call_function", target=torch.ops.aten.cos.default)
    assert aot_inspect.source_line(cos) == "<string>:2 in f"  # no source text to show, but the line


def test_op_count_table_forward_next_to_backward():
    compiled = _compiled_mlp()
    entry = compiled.entries[0]
    table = aot_inspect.op_count_table(compiled).splitlines()
    assert table[0].split() == ["op", "forward", "backward"]
    rows = {line.split()[0]: line.split()[1:] for line in table[1:]}
    forward, backward = aot_inspect.op_counts(entry.forward), aot_inspect.op_counts(entry.backward)
    assert rows["aten.relu.default"] == [str(forward["aten.relu.default"]), "0"]
    assert rows["aten.threshold_backward.default"] == ["0", "1"]
    assert rows["total"] == [str(sum(forward.values())), str(sum(backward.values()))]
    with torch.no_grad():
        inference = aot.aot_function(mlp, aot.nop)
        inference(*_mlp_args())
    assert aot_inspect.op_count_table(inference).splitlines()[0].split() == ["op", "inference"]


def test_report_has_meta_graphs_counts_and_saved_values():
    text = aot_inspect.report(_compiled_mlp())
    for part in ("input 1 (w1): requires grad", "forward graph", "backward graph", "op counts:", "saved for backward"):
        assert part in text
    assert "f32[8, 32][32, 1]" in text  # graph code carries shapes and strides


# --------------------------------------------------------------------------------------------
# Pictures


def test_builtin_svg_has_one_node_per_graph_node():
    entry = _compiled_mlp().entries[0]
    for gm in (entry.forward, entry.backward):
        root = ET.fromstring(aot_inspect.graph_svg(gm, engine="builtin"))
        assert root.tag == f"{SVG}svg"
        groups = [g for g in root.iter(f"{SVG}g") if g.get("class") == "node"]
        titles = [g.find(f"{SVG}title").text for g in groups]
        assert titles == [node.name for node in gm.graph.nodes]
        edges = [g for g in root.iter(f"{SVG}g") if g.get("class") == "edge"]
        assert len(edges) == sum(len(set(node.all_input_nodes)) for node in gm.graph.nodes)
        texts = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
        ops = {str(n.target) for n in gm.graph.nodes if isinstance(n.target, torch._ops.OpOverload)}
        assert ops and all(op in texts for op in ops)


def test_svgs_and_dot_cover_every_graph():
    compiled = _compiled_mlp()
    pictures = aot_inspect.svgs(compiled, engine="builtin")
    assert set(pictures) == {"joint", "forward", "backward"}
    forward = compiled.entries[0].forward
    dot = aot_inspect.graph_dot(forward, "forward")
    assert dot.startswith('digraph "forward" {')
    assert all(f'"{node.name}" [label=' in dot for node in forward.graph.nodes)


def test_graphviz_engine_without_pydot_names_the_extra(monkeypatch):
    gm = _compiled_mlp().entries[0].forward
    monkeypatch.setitem(sys.modules, "pydot", None)
    with pytest.raises(ImportError, match=r"pip install aotfx\[viz\]"):
        aot_inspect.graph_svg(gm, engine="graphviz")
    assert ET.fromstring(aot_inspect.graph_svg(gm)).tag == f"{SVG}svg"  # auto falls back to builtin


def test_graphviz_engine_without_dot_binary_says_what_to_install(monkeypatch):
    pytest.importorskip("pydot")
    gm = _compiled_mlp().entries[0].forward
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="install graphviz"):
        aot_inspect.graph_svg(gm, engine="graphviz")
    with pytest.raises(ValueError, match="engine"):
        aot_inspect.graph_svg(gm, engine="png")


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's dot is not installed")
def test_graphviz_engine_draws_every_node():
    pytest.importorskip("pydot")
    gm = _compiled_mlp().entries[0].forward
    root = ET.fromstring(aot_inspect.graph_svg(gm, engine="graphviz"))
    titles = {g.find(f"{SVG}title").text for g in root.iter(f"{SVG}g") if g.get("class") == "node"}
    assert titles == {node.name for node in gm.graph.nodes}


# --------------------------------------------------------------------------------------------
# Logging


def test_parse_channels():
    assert logs.parse("layers, graphs") == ("graphs", "layers")
    assert logs.parse("all") == logs.CHANNELS
    assert logs.parse("") == () and logs.parse(None) == ()
    with pytest.raises(ValueError, match="choose from graphs, cache, layers"):
        logs.parse("graphs,layer")


def test_configure_attaches_one_handler_and_disable_removes_it():
    assert logs.configure("layers") == ("layers",)
    logs.configure("layers,cache")
    layers = logging.getLogger("aot.layers")
    assert layers.level == logging.DEBUG and len(layers.handlers) == 1
    logs.disable("layers")
    assert layers.level == logging.NOTSET and not layers.handlers


def test_layer_logs_show_each_rewrite(caplog):
    def f(a, b, c):
        c.t_()
        a.mul_(2)
        return a + b, c

    logs.configure("layers")
    x, c = torch.randn(3, 3), torch.randn(2, 3)
    with caplog.at_level(logging.DEBUG, logger="aot.layers"):
        aot.aot_function(f, aot.nop)(x, x, c)
    records = [r for r in caplog.records if r.name == "aot.layers"]
    fields = {r.aot["layer"]: r.aot for r in records}
    assert list(fields) == ["Dedupe", "MetadataMutation", "SyntheticBase", "RuntimeEpilogue"]
    dedupe = fields["Dedupe"]
    assert (dedupe["outer_args"], dedupe["inner_args"]) == (["a", "b", "c"], ["a", "c"])
    assert dedupe["outer_mutated"] == ["a (data)", "b (data)", "c (metadata)"]
    assert fields["MetadataMutation"]["inner_mutated"] == ["a (data)"]
    assert "Dedupe: args 3 -> 2" in records[0].getMessage()


def test_log_graph_renders_only_when_on(caplog):
    gm = _compiled_mlp().entries[0].forward
    with caplog.at_level(logging.DEBUG, logger="aot.graphs"):
        logging.getLogger("aot.graphs").setLevel(logging.INFO)
        logs.log_graph("forward", gm)
        assert not caplog.records
        logs.configure("graphs")
        logs.log_graph("forward", gm)
    (record,) = caplog.records
    assert record.aot == {"kind": "forward", "num_ops": 5} and "f32[8, 32]" in record.getMessage()


def test_env_var_turns_channels_on_at_import():
    program = "import torch, aot; aot.aot_function(lambda a, b: a + b, aot.nop)(torch.ones(2), torch.ones(2))"
    env = {**os.environ, logs.ENV_VAR: "layers"}
    result = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True)
    assert "[aot.layers] Dedupe: args 2 -> 2" in result.stderr
    env[logs.ENV_VAR] = "nonsense"
    result = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True)
    assert "unknown AOTFX_LOGS channel" in result.stderr


def test_enable_log_false_silences_only_that_function(caplog):
    def f(x):
        return x.sin().cos()

    logs.configure("graphs,layers")
    with caplog.at_level(logging.DEBUG, logger="aot"):
        x = torch.randn(3, requires_grad=True)
        aot.aot_function(f, aot.nop, enable_log=False)(x).sum().backward()  # forward and backward compiles
        assert not [r for r in caplog.records if r.name.startswith("aot.")]
        aot.aot_function(f, aot.nop)(x).sum().backward()
    kinds = [r.aot.get("kind") for r in caplog.records if r.name == "aot.graphs"]
    assert kinds == ["forward", "backward"]
    assert any(r.name == "aot.layers" for r in caplog.records)
