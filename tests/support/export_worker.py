"""One fresh process of ``test_export_loading.py``.

    python export_worker.py make DIR     export a tiny RMSNorm model (torch.export, saved to DIR/program.pt2)
                                         and compile it with AOTInductor (DIR/aoti.pt2); print its bits
    python export_worker.py load DIR [--import]
                                         load both, with or without ``import ascend_rmsnorm`` first; print
                                         per artifact the bits, or the error
One JSON line each. The AOTInductor wrapper is compiled at -O0 without precompiled headers: it only
has to run once here, and that halves its compile time.
"""

import hashlib
import json
import sys

import torch


def inputs():
    g = torch.Generator().manual_seed(8)
    return torch.randn(4, 64, generator=g).to(torch.bfloat16), torch.randn(4, 64, generator=g).to(torch.bfloat16)


def digest(outputs) -> str:
    h = hashlib.sha256()
    for t in outputs:
        h.update(t.contiguous().view(torch.int16).numpy().tobytes())
    return h.hexdigest()[:16]


def make(directory: str) -> dict:
    import ascend_rmsnorm

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = ascend_rmsnorm.RMSNorm(64, eps=1e-6, casting_mode="llama", dtype=torch.bfloat16)

        def forward(self, x, residual):
            return self.norm(x, residual)

    block = Block()
    with torch.no_grad():
        block.norm.weight.copy_(torch.linspace(0.5, 1.5, 64))
    x, r = inputs()
    program = torch.export.export(block, (x, r))
    torch.export.save(program, f"{directory}/program.pt2")
    options = {"aot_inductor.compile_wrapper_opt_level": "O0", "aot_inductor.precompile_headers": False}
    torch._inductor.aoti_compile_and_package(program, package_path=f"{directory}/aoti.pt2", inductor_configs=options)
    return {"eager": digest(block(x, r))}


def load(directory: str, with_import: bool) -> dict:
    import torch._inductor.codecache  # noqa: F401  (torch 2.10's aoti_load_package fails where nothing imported it)

    if with_import:
        import ascend_rmsnorm  # noqa: F401  (registers the ops the artifacts call)
    x, r = inputs()
    result = {}
    for name, run in (
        ("program", lambda: torch.export.load(f"{directory}/program.pt2").module()(x, r)),
        ("aoti", lambda: torch._inductor.aoti_load_package(f"{directory}/aoti.pt2")(x, r)),
    ):
        try:
            result[name] = digest(run())
        except Exception as err:  # noqa: BLE001 - reported to the test
            result[name] = f"{type(err).__name__}: {err}"
    result["imported"] = "ascend_rmsnorm" in sys.modules
    return result


if __name__ == "__main__":
    action, directory = sys.argv[1:3]
    out = make(directory) if action == "make" else load(directory, "--import" in sys.argv[3:])
    print(json.dumps(out), flush=True)
