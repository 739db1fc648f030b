"""ascend-rmsnorm in one minute. Runs anywhere (`make demo`):

- on an Ascend NPU host it runs the Ascend C kernel and checks it against the torch path on the CPU;
- elsewhere it runs the torch path, and (with a C++ compiler) the same Ascend C kernel on the CPU
  through the emulation, and shows both give the same bits;
- everywhere it shows the batch invariance that plain PyTorch loses on long rows.
"""

from __future__ import annotations

import shutil
import sys

import torch

import ascend_rmsnorm


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
    view = torch.int32 if a.dtype == torch.float32 else torch.int16
    return a.shape == b.shape and torch.equal(a.view(view), b.view(view))


def npu_available() -> bool:
    try:
        import torch_npu  # noqa: F401
    except ImportError:
        return False
    return torch.npu.is_available()


def main() -> int:
    print(f"ascend-rmsnorm {ascend_rmsnorm.__version__}, torch {torch.__version__}")
    device = torch.device("npu") if npu_available() else torch.device("cpu")
    g = torch.Generator().manual_seed(0)

    # 1. A call, with autograd, in bf16, on whatever this machine has.
    x = torch.randn(4, 256, 4096, generator=g).to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(4096, generator=g)).to(torch.bfloat16)
    xd = x.to(device).requires_grad_()
    wd = w.to(device).requires_grad_()
    y = ascend_rmsnorm.rms_norm(xd, wd, eps=1e-6)
    y.float().pow(2).mean().backward()
    grads = f"{tuple(xd.grad.shape)} and {tuple(wd.grad.shape)}"
    print(f"\n1. rms_norm on {device}: y {tuple(y.shape)} {y.dtype}, grads {grads}")

    # 2. The same bits from another implementation of the contract.
    reference, ref_rstd = ascend_rmsnorm.rms_norm(x, w, backend="torch", return_rstd=True)
    if device.type == "npu":
        y_npu, rstd_npu = ascend_rmsnorm.rms_norm(x.to(device), w.to(device), backend="npu", return_rstd=True)
        print(
            f"2. NPU kernel vs torch path on the CPU: y identical = {same_bits(y_npu, reference)}, "
            f"rstd identical = {same_bits(rstd_npu, ref_rstd)}"
        )
    elif shutil.which("c++") or shutil.which("g++"):
        print("2. building the Ascend C kernel for the CPU emulation (first run only; cached) ...", flush=True)
        y_emu, rstd_emu = ascend_rmsnorm.rms_norm(x, w, backend="emu", return_rstd=True)
        print(
            f"   emu kernel vs torch path: y identical = {same_bits(y_emu, reference)}, "
            f"rstd identical = {same_bits(rstd_emu, ref_rstd)}"
        )
    else:
        print("2. skipped: no C++ compiler here to build the emulated kernel (set ASCEND_RMSNORM_CXX)")

    # 3. Why: PyTorch's own reduction changes a long row's bits with the batch around it.
    torch.set_num_threads(max(2, torch.get_num_threads()))
    long_rows = torch.randn(8, 1 << 17, generator=g)
    plain_batch = long_rows.pow(2).mean(-1)
    plain_alone = torch.cat([r.unsqueeze(0).pow(2).mean(-1) for r in long_rows])
    ours_batch = ascend_rmsnorm.rms_norm(long_rows, None, return_rstd=True, backend="torch")[1]
    ours_alone = torch.cat(
        [ascend_rmsnorm.rms_norm(r.unsqueeze(0), None, return_rstd=True, backend="torch")[1] for r in long_rows]
    )
    differ = int((plain_batch.view(torch.int32) != plain_alone.view(torch.int32)).sum())
    print(f"\n3. rows of 2^17 elements, alone vs in a batch of 8 ({torch.get_num_threads()} threads):")
    print(f"   x.pow(2).mean(-1): {differ} of 8 rows change their bits")
    print(f"   ascend_rmsnorm:    rstd identical for all 8 rows = {same_bits(ours_batch, ours_alone)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
