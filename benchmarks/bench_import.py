"""Import cost with a warm kernel cache, against ``import torch`` (goal: at most 50 ms more).

Three fresh-interpreter commands are timed round by round (interleaved, so a noisy machine moves all
alike) and their medians compared:

  torch           python -c "import torch"
  package         python -c "import ascend_rmsnorm"
  package + hit   the same, then the cache hit that build-on-import does: toolchain discovery, key,
                  manifest check and dlopen of the cached library (emu toolchain here: no NPU needed)

The cache is warmed first in a temporary directory. This is a report, not a test: exit status 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HIT = (
    "import ascend_rmsnorm\n"
    "from ascend_rmsnorm.jit import cache, toolchain\n"
    "cache.get_library(toolchain.get_toolchain('emu'), 'dav-2201')\n"
)
COMMANDS = {
    "torch": "import torch",
    "package": "import ascend_rmsnorm",
    "package + hit": HIT,
}


def _time(code: str, env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ascend-rmsnorm-bench-") as tmp:
        env = {
            **os.environ,
            "ASCEND_RMSNORM_CACHE_DIR": tmp,
            "ASCEND_RMSNORM_LOCK_DIR": os.path.join(tmp, "locks"),  # leave nothing behind in /dev/shm
            "ASCEND_RMSNORM_LOG_LEVEL": "WARNING",
        }
        # An installed wheel has its .pyc files; let the warm-up write ours as pip would have.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([sys.executable, "-m", "ascend_rmsnorm", "warm", "--toolchain", "emu"], env=env, check=True)
        for code in COMMANDS.values():  # page everything in once
            _time(code, env)
        samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
        for _ in range(args.rounds):
            for name, code in COMMANDS.items():
                samples[name].append(_time(code, env))
    base = statistics.median(samples["torch"])
    print(f"median of {args.rounds} fresh interpreters each:")
    for name, values in samples.items():
        med = statistics.median(values)
        extra = (med - base) * 1000
        verdict = "" if name == "torch" else f"  {extra:+7.1f} ms over torch  ({'ok' if extra <= 50 else 'OVER'} <= 50)"
        print(f"  {name:14} {med * 1000:8.1f} ms  ratio {med / base:5.3f}{verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
