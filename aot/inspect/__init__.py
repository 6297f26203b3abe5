"""What was compiled, for people: graphs with shapes, saved activations with source lines, op counts, pictures.

Every function here takes a *compiled thing*: a ``CompiledEntry`` (one input
signature), or an ``AOTFunction`` / ``AOTModule`` / the callable
``aot_module_simplified`` returns, meaning its most recently compiled entry
(pick another from ``.entries``).

- :func:`graphs` / :func:`graph_code`: the joint, forward, backward and inference
  graphs, as Python with dtype, shape and strides on every value;
- :func:`saved_values` / :func:`saved_report`: what the forward saves for the
  backward, with shape, dtype, bytes, the op and the user source line that made
  it, and why it is saved (like JAX's ``print_saved_residuals``); :func:`recomputed_ops`:
  what the backward runs again, with its estimated FLOPs;
- :func:`op_count_table`: ops per overload, forward next to backward;
- :func:`graph_svg` / :func:`svgs`: a picture of each graph. With ``pydot`` (``pip install
  aotfx[viz]``) and graphviz's ``dot`` binary it is graphviz's layout; without them a
  built-in renderer draws the same nodes and edges, so notebooks work anywhere;
- :func:`report`: all of the above in text, with the meta in words.

Source lines come from ``node.meta["stack_trace"]``, which the tracer records
while :func:`recording_source_lines` (``aot.compile.source_lines``) is active.
The text lives in :mod:`aot.inspect.report`, the pictures in :mod:`aot.inspect.svg`.
"""

from __future__ import annotations

from aot.compile.source_lines import recording_source_lines, source_line
from aot.inspect.report import *  # noqa: F403
from aot.inspect.report import __all__ as _report_names
from aot.inspect.svg import *  # noqa: F403
from aot.inspect.svg import __all__ as _svg_names

__all__ = [*_report_names, *_svg_names, "recording_source_lines", "source_line"]
