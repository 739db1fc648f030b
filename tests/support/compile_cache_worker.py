"""One fresh process of ``test_compile_caches.py``: compile ``F.rms_norm`` with Inductor (caches on,
the cache dir the test gives) and print, per step, the cache counters, the graphs Dynamo made so
far and a digest of the output's bits, as one JSON line.

    python compile_cache_worker.py STEP...      STEP: plain | outside | inside | inside-thread
``plain`` runs without importing ascend_rmsnorm (and checks that nothing imported it); ``outside``
and ``inside`` import it and call the same compiled function outside / inside batch_invariant_mode;
``inside-thread`` enters the mode here and compiles and calls in another thread.
"""

import hashlib
import json
import sys

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

from helpers import in_a_thread

HIDDEN = 256


def norm(x, w):
    return F.rms_norm(x, (HIDDEN,), w, 1e-6)


def inputs():
    g = torch.Generator().manual_seed(18)
    x = torch.randn(33, HIDDEN, generator=g) * torch.logspace(-3, 3, 33).unsqueeze(-1)
    return x, 1.0 + 0.25 * torch.randn(HIDDEN, generator=g)


def main(steps):
    compiled = torch.compile(norm, backend="inductor", fullgraph=True)
    x, w = inputs()
    for step in steps:
        counters.clear()
        if step == "plain":
            y = compiled(x, w)
            assert "ascend_rmsnorm" not in sys.modules, "something imported ascend_rmsnorm"
        else:
            import ascend_rmsnorm

            if step == "inside":
                with ascend_rmsnorm.batch_invariant_mode():
                    y = compiled(x, w)
            elif step == "inside-thread":  # the mode entered here, the compile in another thread
                with ascend_rmsnorm.batch_invariant_mode():
                    y = in_a_thread(lambda: compiled(x, w))
            else:
                y = compiled(x, w)
        record = {
            "step": step,
            "aot": {k: v for k, v in counters["aot_autograd"].items() if k.startswith("autograd_cache")},
            "fx": {k: v for k, v in counters["inductor"].items() if k.startswith("fxgraph_cache")},
            "new_graphs": counters["stats"]["unique_graphs"],
            "bits": hashlib.sha256(y.contiguous().view(torch.int32).numpy().tobytes()).hexdigest()[:16],
        }
        if step != "plain":
            ours = ascend_rmsnorm.rms_norm(x, w, 1e-6)
            record["ours"] = hashlib.sha256(ours.view(torch.int32).numpy().tobytes()).hexdigest()[:16]
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
