"""The layer stack: each module rewrites the flat function's calling convention one way."""

from wrappers.base import CoreCompiler, FlatFn, Layer, Runtime, Stage, compile_through
from wrappers.stack import default_layers

__all__ = ["CoreCompiler", "FlatFn", "Layer", "Runtime", "Stage", "compile_through", "default_layers"]
