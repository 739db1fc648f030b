"""DTensor through the registered ops (docs/design.md §2), over gloo on localhost: Replicate and Shard on any
dim but the last give the plain tensor's bits for y, rstd, residual_out and dx; dw of row-sharded
inputs is Partial (each rank sums its rows, then the ranks are summed: the value of the plain dw to
rounding, not its bits, as dw depends on how the rows are split); Shard on the normalised dim is
redistributed to Replicate first. One rank in this process, two ranks in forked processes."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

import ascend_rmsnorm

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")


def _iv(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_iv(a), _iv(b))


def _check_placements(world: int) -> list[str]:
    """Every placement against the plain tensor; returns what went wrong (empty when all is well)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 64, generator=g).to(torch.bfloat16)
    r = torch.randn(4, 6, 64, generator=g).to(torch.bfloat16)
    w = (1 + 0.2 * torch.randn(64, generator=g)).to(torch.bfloat16)
    dy = torch.randn(4, 6, 64, generator=g).to(torch.bfloat16)
    xr, rr, wr = (t.clone().requires_grad_() for t in (x, r, w))
    y, r_out, rstd = ascend_rmsnorm.add_rms_norm(xr, rr, wr, return_rstd=True)
    want = (y, r_out, rstd, *torch.autograd.grad((y, r_out), (xr, rr, wr), (dy, dy)))
    bad = []
    for pl in (Replicate(), Shard(0), Shard(1), Shard(2)):
        dxs, drs = (distribute_tensor(t, mesh, [pl]).requires_grad_() for t in (x, r))
        dws = distribute_tensor(w, mesh, [Replicate()]).requires_grad_()
        yd, rd, sd = ascend_rmsnorm.add_rms_norm(dxs, drs, dws, return_rstd=True)
        cot = distribute_tensor(dy, mesh, [pl])
        got = (yd, rd, sd, *torch.autograd.grad((yd, rd), (dxs, drs, dws), (cot, cot)))
        rows_sharded = isinstance(pl, Shard) and pl.dim < 2
        expect = pl if rows_sharded else Replicate()  # Shard(2), the normalised dim: redistributed
        for name, a, b in zip(("y", "residual_out", "rstd", "dx", "dresidual"), got, want):
            if tuple(a.placements) != (expect,):
                bad.append(f"{pl}: {name} placed {a.placements}, want {expect}")
            if not _same(a.full_tensor(), b.detach()):
                bad.append(f"{pl}: {name} differs from the plain tensor's bits")
        dw = got[5]
        if tuple(dw.placements) != ((Partial(),) if rows_sharded else (Replicate(),)):
            bad.append(f"{pl}: dw placed {dw.placements}")
        if rows_sharded and world > 1:
            if not torch.allclose(dw.full_tensor().float(), want[5].float(), rtol=2e-2, atol=1e-2):
                bad.append(f"{pl}: dw is not close to the plain dw")
        elif not _same(dw.full_tensor(), want[5]):
            bad.append(f"{pl}: dw differs from the plain tensor's bits")
    # which gradients a backward makes changes its outputs' shapes: a frozen weight's first (no dw) must
    # not give a later backward that needs dw its (empty) dw, nor a frozen input's a later dx
    x3, w3 = x.reshape(24, 64)[:8].float(), w.float()
    for x_grad, w_grad in ((True, False), (True, True), (False, True), (True, True)):
        xd = distribute_tensor(x3, mesh, [Shard(0)]).requires_grad_(x_grad)
        wd = distribute_tensor(w3, mesh, [Replicate()]).requires_grad_(w_grad)
        leaves = [t for t, needed in ((xd, x_grad), (wd, w_grad)) if needed]
        try:
            grads = torch.autograd.grad(ascend_rmsnorm.rms_norm(xd, wd).sum(), leaves)
        except RuntimeError as err:
            bad.append(f"grads of x {x_grad}, w {w_grad} after the others: {err}")
            continue
        if [tuple(g.shape) for g in grads] != [tuple(t.shape) for t in leaves]:
            bad.append(f"grads of x {x_grad}, w {w_grad}: shapes {[tuple(g.shape) for g in grads]}")
    # rms_norm too, without a weight, 2-D, rows sharded
    x2 = x.reshape(24, 64)
    yd = ascend_rmsnorm.rms_norm(distribute_tensor(x2, mesh, [Shard(0)]), None, casting_mode="gemma")
    if not _same(yd.full_tensor(), ascend_rmsnorm.rms_norm(x2, None, casting_mode="gemma")):
        bad.append("rms_norm Shard(0) without a weight differs")
    return bad


def test_the_sharding_rules_are_registered_once(monkeypatch):
    """The first subclass call registers the three ops' rules (ops/dtensor.py); every later call finds them
    registered and registers nothing again (each time would cost tens of microseconds per DTensor call)."""
    from torch.distributed.tensor import experimental

    from ascend_rmsnorm import ops
    from ascend_rmsnorm.ops import dtensor

    registered = []
    real = experimental.register_sharding

    def counting(op):
        registered.append(op)
        return real(op)

    monkeypatch.setattr(experimental, "register_sharding", counting)
    monkeypatch.setattr(dtensor, "_sharding_registered", False)  # as in a fresh process
    for _ in range(3):
        assert ops.ensure_sharding()
        assert ops.sharding_registered()
    assert registered == [ops.rms_norm_op, ops.add_rms_norm_op, ops.rms_norm_backward_op]


def _rank_main(rank: int, world: int, store_file: str, errors) -> None:
    # a FileStore, not a TCP port picked beforehand (which another process may take meanwhile)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=world)
    try:
        errors.extend([f"rank {rank}: {e}" for e in _check_placements(world)])
    except Exception as err:  # noqa: BLE001 - reported to the parent, which fails the test
        errors.append(f"rank {rank}: {type(err).__name__}: {err}")
    finally:
        dist.destroy_process_group()


def test_dtensor_one_rank():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert _check_placements(1) == []
        mesh = init_device_mesh("cpu", (1,))
        x, w = torch.randn(8, 32), torch.randn(32)
        compiled = torch.compile(lambda x, w: ascend_rmsnorm.rms_norm(x, w), fullgraph=True, backend="aot_eager")
        y = compiled(distribute_tensor(x, mesh, [Shard(0)]), distribute_tensor(w, mesh, [Replicate()]))
        assert tuple(y.placements) == (Shard(0),) and _same(y.full_tensor(), ascend_rmsnorm.rms_norm(x, w))
    finally:
        dist.destroy_process_group()


def test_dtensor_two_ranks(tmp_path):
    import multiprocessing

    ctx = multiprocessing.get_context("fork")  # a fresh interpreter per rank would re-import torch (slow)
    with ctx.Manager() as manager:
        errors = manager.list()
        store = str(tmp_path / "store")
        procs = [ctx.Process(target=_rank_main, args=(rank, 2, store, errors)) for rank in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=600)  # a bound for a hang only: the ranks take seconds, more on a loaded machine
        codes = [p.exitcode for p in procs]
        for p in procs:
            if p.is_alive():
                p.kill()
        assert codes == [0, 0] and list(errors) == [], (codes, list(errors))


def _check_unused_outputs(mesh) -> list[str]:
    """Gradients when an output does not reach the loss, against the plain tensor's; returns what went wrong.

    Autograd hands an ``autograd.Function``'s backward a zero tensor for such an output, and that zero is a
    plain tensor even when the output is a DTensor; mixed with the DTensor gradients it reaches DTensor's
    dispatch, which refuses it. add_rms_norm with only y used (the last layer's residual_out) or only
    residual_out, and a double backward through dx only or dw only."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    g = torch.Generator().manual_seed(1)
    x, r, dy = (torch.randn(6, 32, generator=g).to(torch.bfloat16) for _ in range(3))
    w = (1 + 0.2 * torch.randn(32, generator=g)).to(torch.bfloat16)
    bad = []
    for used in ("y", "residual_out"):
        grads = []
        for dt in (True, False):
            xs, rs, ws = (
                (distribute_tensor(t, mesh, [pl]) if dt else t.clone()).requires_grad_()
                for t, pl in ((x, Shard(0)), (r, Shard(0)), (w, Replicate()))
            )
            out = ascend_rmsnorm.add_rms_norm(xs, rs, ws)[0 if used == "y" else 1]
            cot = distribute_tensor(dy, mesh, [Shard(0)]) if dt else dy
            try:
                grads.append(torch.autograd.grad(out, (xs, rs, ws), cot))
            except RuntimeError as err:
                bad.append(f"add_rms_norm, only {used} used: {err}")
                break
        else:
            for name, a, b in zip(("dx", "dresidual", "dw"), *grads):
                if not _same(a.full_tensor(), b):
                    bad.append(f"add_rms_norm, only {used} used: {name} differs from the plain tensor's bits")
    xf, wf, dyf = x.float(), w.float(), dy.float()
    for which in (0, 1):  # the second loss sees dx only, or dw only
        grads = []
        for dt in (True, False):
            xs = (distribute_tensor(xf, mesh, [Shard(0)]) if dt else xf.clone()).requires_grad_()
            ws = (distribute_tensor(wf, mesh, [Replicate()]) if dt else wf.clone()).requires_grad_()
            cot = distribute_tensor(dyf, mesh, [Shard(0)]) if dt else dyf
            first = torch.autograd.grad(ascend_rmsnorm.rms_norm(xs, ws), (xs, ws), cot, create_graph=True)
            try:
                grads.append(torch.autograd.grad((first[which] ** 2).sum(), (xs, ws)))
            except RuntimeError as err:
                bad.append(f"double backward through {('dx', 'dw')[which]} only: {err}")
                break
        else:
            for name, a, b in zip(("x", "w"), *grads):
                if not torch.allclose(a.full_tensor(), b, rtol=1e-5, atol=1e-5):
                    bad.append(f"double backward through {('dx', 'dw')[which]} only: the grad of {name} differs")
    return bad


def test_dtensor_gradients_when_an_output_is_unused():
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        problems = _check_unused_outputs(init_device_mesh("cpu", (1,)))
        if torch.torch_version.TorchVersion(torch.__version__) < "2.9":
            # torch 2.8's DTensor autograd gets this one wrong for the same math in plain torch ops too
            # (README, Which torch); what this package adds is checked on every other line
            assert problems == ["double backward through dw only: the grad of x differs"]
            return
        assert problems == []
    finally:
        dist.destroy_process_group()
