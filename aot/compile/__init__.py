"""The compile pipeline below the layers, in the order a compile runs it.

- :mod:`~aot.compile.trace`: trace the flat function on fakes into a joint
  ``(primals, tangents) -> (outputs, grads)`` graph or an inference graph
  (:mod:`~aot.compile.source_lines` records the user line of each op);
- :mod:`~aot.compile.functionalize`: remove every mutation and alias from a graph;
- :mod:`~aot.compile.partition`: split the joint graph into forward and backward;
  :mod:`~aot.compile.min_cut` does it saving the fewest bytes (recomputing cheap ops);
- :mod:`~aot.compile.core`: trace, partition, hand graphs to the backend compilers;
- :mod:`~aot.compile.autograd`: the ``autograd.Function`` that runs them;
- :mod:`~aot.compile.descriptors`: which input or output each graph value is;
- :mod:`~aot.compile.failures` / :mod:`~aot.compile.fallbacks`: clear errors naming the
  op and the user's line; fallbacks for fake kernels that refuse what eager runs;
- :mod:`~aot.compile.binding`: module parameters bound while a trace runs.
"""
