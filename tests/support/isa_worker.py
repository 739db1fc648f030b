"""The torch path's outputs for the cases of ``tests/numerics/test_cpu_isa_torch.py``, in a fresh process.

    python isa_worker.py IN OUT     load the cases from IN (torch.save'd by the test), run them, save
                                    their outputs, the capability torch ran with and the canary to OUT

The test runs this under ``ATEN_CPU_CAPABILITY=default`` (and ``avx2`` on an AVX-512 machine): torch then
runs its scalar (or narrower vector) CPU kernels, as on a host without those instructions. The inputs
come from the file, not from torch's random generator, whose normal samples themselves differ by ISA.
"""

from __future__ import annotations

import sys

import torch

import ascend_rmsnorm


def run_case(case: dict) -> dict[str, torch.Tensor]:
    """Forward (y, rstd) and backward (dx, dw) of rms_norm, and add_rms_norm's y and residual_out."""
    mode = case["mode"]
    x = case["x"].clone().requires_grad_()
    w = case["w"].clone().requires_grad_()
    y, rstd = ascend_rmsnorm.rms_norm(x, w, 1e-6, casting_mode=mode, backend="torch", return_rstd=True)
    y.backward(case["dy"])
    y2, residual_out = ascend_rmsnorm.add_rms_norm(
        case["x"], case["residual"], case["w"], 1e-6, casting_mode=mode, backend="torch"
    )
    return {"y": y.detach(), "rstd": rstd, "dx": x.grad, "dw": w.grad, "add y": y2, "residual_out": residual_out}


def canary(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.add with alpha: its vector kernels fuse the multiply-add and its scalar loop does not, so
    its bits under "default" show that torch ran its scalar kernels."""
    return torch.add(a, b, alpha=0.3)


def main(src: str, dst: str) -> None:
    data = torch.load(src)
    torch.save(
        {
            "capability": torch.backends.cpu.get_cpu_capability(),
            "canary": canary(*data["canary"]),
            "outputs": [run_case(case) for case in data["cases"]],
        },
        dst,
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
