"""Warm start: a fresh process compiling a small GPT with a cold vs a warm persistent cache.

The GPT (``aot/demo.py``) is captured as a flat ATen GraphModule (as ``torch.compile``
hands one to a backend) and compiled with ``aot_module_simplified``; the timed part is
compile + first forward + backward in a new process. Run: ``python benchmarks/bench_warm_start.py``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, time
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.func import functional_call
import aot
from aot.demo import GPTConfig, make_batches, make_model
config = GPTConfig()
model = make_model(config, 0)
names = [n for n, _ in model.named_parameters()]
params = [p for _, p in model.named_parameters()]
inputs, targets = next(make_batches(config, 0, 1))
n = len(params)
def program(*args):
    return functional_call(model, dict(zip(names, args[:n])), (args[n], args[n + 1]))
gm = make_fx(program)(*[p.detach() for p in params], inputs, targets)
start = time.perf_counter()
forward = aot.aot_module_simplified(gm, [*params, inputs, targets], aot.nop)
loss = forward(*params, inputs, targets)
(loss[0] if isinstance(loss, (tuple, list)) else loss).backward()
seconds = time.perf_counter() - start
print(json.dumps({"restored": bool(forward.compiled.entries[0].extra.get("restored")), "seconds": seconds}))
"""


def _child(cache_dir: str) -> dict[str, float]:
    env = {**os.environ, "AOTFX_CACHE_DIR": cache_dir, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, check=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(reps: int = 3) -> None:
    cold, warm = [], []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as cache_dir:
            first = _child(cache_dir)
            second = _child(cache_dir)
            assert not first["restored"] and second["restored"]
            cold.append(first["seconds"])
            warm.append(second["seconds"])
    c, w = statistics.median(cold), statistics.median(warm)
    print(f"TinyGPT compile + first step in a fresh process: cold {c * 1e3:.1f} ms, warm {w * 1e3:.1f} ms")
    print(f"warm start is {c / w:.1f}x faster (median of {reps})")


if __name__ == "__main__":
    main()
