"""aotfx: ahead-of-time autograd for PyTorch on torch.fx.

Trace a function's forward and backward into ATen-level FX graphs, hand them to
the backend compiler of your choice, and get back a callable that behaves like
the eager function.
"""

from aot import inspect, logs  # logs: AOTFX_LOGS takes effect on import
from aot.api import AOTFunction, AOTModule, aot_export_joint, aot_function, aot_module, aot_module_simplified
from aot.backends import boxed_nop, eager, make_boxed_func, nop
from aot.compile.min_cut import min_cut_rematerialization_partition
from aot.compile.partition import default_partition
from aot.compile.policy import ActivationPolicy, checkpoint_name, save_only_these_names

__version__ = "0.1.0"

__all__ = [
    "AOTFunction",
    "AOTModule",
    "ActivationPolicy",
    "aot_export_joint",
    "aot_function",
    "aot_module",
    "aot_module_simplified",
    "boxed_nop",
    "checkpoint_name",
    "default_partition",
    "eager",
    "inspect",
    "logs",
    "make_boxed_func",
    "min_cut_rematerialization_partition",
    "nop",
    "save_only_these_names",
]
