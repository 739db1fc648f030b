#!/usr/bin/env python3
"""Type-check ``ascend_rmsnorm/kernels/*.asc`` (the kernel and the calibration kernels) and their headers with clang.

Why: there is no bisheng here, and the CPU emulation in ``kernels/emu`` is our own reading of the API. Running
clang in ``-fsyntax-only`` mode over the kernel with a fetched asc-devkit's headers checks every API call of the
kernel (names, overloads, argument and template types, structs) against the declarations bisheng itself uses.
It cannot check what only bisheng knows (its builtin intrinsics, address spaces, the device/host split); those
are stubbed below so the headers parse, and only diagnostics in *our* files count.

    tools/typecheck_asc.py /path/to/asc-devkit [--clang /usr/bin/clang++] [--source FILE] [-v]
    tools/typecheck_asc.py <CANN 8.0-8.3 root>/compiler/tikcpp/tikcfw    (the legacy build's own headers)

Exit status 0 when no define set gives a diagnostic (error or warning) in our files; 1 otherwise; 2 when the
devkit or clang cannot be found. Not part of CI: CI has no network to fetch the devkit.

Define sets (each one clang run, ``-D__NPU_ARCH__=2201``):
  asc-device  the device pass of ``bisheng -x asc --npu-arch=dav-2201`` (``__NPU_DEVICE__``, vector core)
  asc-host    the host pass of the same build (``__NPU_HOST__``): the launchers and the kernels' templates
  legacy      CANN 8.0-8.3 ``-xcce --cce-aicore-arch=dav-c220-vec`` (``ASCEND_RMSNORM_LEGACY_CCE``, no
              ``__NPU_HOST__``/``__NPU_DEVICE__``, so ``kernel_type.h`` defines ``DT_*`` as macros)

Given an installed CANN 8.0-8.3 ``tikcfw`` directory instead of a devkit, only the legacy build is checked,
against the headers that build really includes (the -I dirs of ``jit/build.py`` and no others: the tikcfw,
its ``impl`` and ``interface``; its ``lib`` reached through it; ``kernel_tiling/kernel_tiling.h`` is the
stub below, as for a devkit), with the macros that CANN 8.1's headers choose the dav-c220 vector
implementation by (``__CCE_AICORE__=220``, ``__DAV_C220_VEC__``).

What is stubbed (see PRELUDE): bisheng's qualifiers and address spaces (``__aicore__``, ``__gm__``,
``__ubuf__``, ...) and pipe annotations (``__inout_pipe__(S)``) as empty macros; the builtin types ``half`` and
``bfloat16_t`` (``bfloat16_t`` without a default constructor, as in bisheng's host pass, ``__clang_cce_types.h``);
``pipe_t``/``event_t`` and the other builtin enums (their constants are read from the headers); the builtin
intrinsics (``vadd``, ``copy_gm_to_ubuf``, ``set_flag``, ...) as variadic templates returning a value that
converts to anything; the CANN-generated ``kernel_tiling/kernel_tiling.h`` structs the advanced-API headers
name. The chevron launch ``k<<<blocks, 0, stream>>>(args)`` is rewritten, in a temporary copy of the kernel's
files (the ``.asc`` and every header of its tree but ``emu/``; line numbers kept), to
``(__asc_typecheck_launch(blocks, 0, stream), k(args))`` so the launch configuration and the kernel's
arguments are still checked. Templates are parsed when instantiated
(``-fdelayed-template-parsing``), so the headers' unused templates need no stubs.

With ``--discover``, names the headers use that the stubs lack are added automatically (never names used by
our own files) and printed, so the lists below can be extended for another devkit version.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNELS_DIR = HERE.parent / "ascend_rmsnorm" / "kernels"

#: Include directories of a devkit checkout (the source tree; an installed CANN lays them out under asc/).
INCLUDE_DIRS = ("", "include", "include/basic_api", "include/utils", "impl", "impl/basic_api", "impl/utils")

DEFINE_SETS = {
    "asc-device": ["-D__NPU_DEVICE__", "-D__DAV_VEC__"],
    "asc-host": ["-D__NPU_HOST__"],
    "legacy": ["-DASCEND_RMSNORM_LEGACY_CCE=1", "-D__DAV_VEC__"],
}
#: The one define set against an installed CANN 8.0-8.3 tikcfw (see the module docstring).
TIKCFW_DEFINE_SETS = {"legacy-cann": ["-DASCEND_RMSNORM_LEGACY_CCE=1", "-D__CCE_AICORE__=220", "-D__DAV_C220_VEC__"]}
#: The legacy build's -I dirs in its tikcfw (``jit/build.py`` ``compile_command``), the only ones searched.
TIKCFW_INCLUDE_DIRS = ("", "impl", "interface")
#: A tikcfw's entries, linked into the devkit-shaped view the enum constants are read from.
TIKCFW_VIEW = ("kernel_operator.h", "impl", "interface", "inner_interface", "lib", "kernel_tiling", "op_frame")


def tikcfw_view(tikcfw: Path, into: Path) -> Path:
    """A directory laid out as a devkit (``INCLUDE_DIRS``) whose entries link to an installed tikcfw's."""
    (into / "include").mkdir(parents=True)
    for name in TIKCFW_VIEW:
        if (tikcfw / name).exists():
            (into / "include" / name).symlink_to(tikcfw / name)
    (into / "include" / "basic_api").symlink_to(tikcfw / "interface")
    (into / "impl").symlink_to(tikcfw / "impl")
    return into


PRELUDE = r"""
// ---- ascend-rmsnorm typecheck prelude: stand-ins for what only bisheng knows --------------------------
#pragma once
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
using std::size_t;
// function qualifiers, address spaces and pipe annotations: no meaning for a syntax check
#define __aicore__
#define __global__
#define __vector__
#define __gm__
#define __ubuf__
#define __cbuf__
#define __cc__
#define __cb__
#define __ca__
#define __fbuf__
#define __biasbuf__
#define __ssbuf__
#define __simt_gm__
#define __local_mem__
#define __simd_callee__
#define __simd_vf__
#define __simt_callee__
#define __callee__
#define __no_simd_vf_fusion__
#define __sync_noalias__
#define __sync_alias__
#define __check_sync_alias__
#define __inout_pipe__(...)
#define __in_pipe__(...)
#define __out_pipe__(...)
#define __host__
#define __host_aicore__
#define __disable_kernel_type_autoinfer__
// a value of any type: what a builtin intrinsic returns here
struct __stub_any {
    template <class T> constexpr operator T() const { return T(); }
};
#define ASC_TC_BINOP(op) template <class T> constexpr __stub_any operator op(__stub_any, T) { return {}; } \
    template <class T> constexpr __stub_any operator op(T, __stub_any) { return {}; } \
    constexpr __stub_any operator op(__stub_any, __stub_any) { return {}; }
ASC_TC_BINOP(+) ASC_TC_BINOP(-) ASC_TC_BINOP(*) ASC_TC_BINOP(/) ASC_TC_BINOP(%) ASC_TC_BINOP(&) ASC_TC_BINOP(|)
ASC_TC_BINOP(^) ASC_TC_BINOP(>>) ASC_TC_BINOP(<<)
#undef ASC_TC_BINOP
template <class T> constexpr bool operator==(__stub_any, T) { return false; }
template <class T> constexpr bool operator!=(__stub_any, T) { return false; }
template <class T> constexpr bool operator<(__stub_any, T) { return false; }
template <class T> constexpr bool operator>(__stub_any, T) { return false; }
// bisheng's builtin 16-bit float types
struct half {
    half() = default;
    half(float) {}
    half(double) {}
    half(int) {}
    operator float() const { return 0.0f; }
};
struct bfloat16_t {
#if defined(__NPU_DEVICE__)
    bfloat16_t() = default;  // a builtin type in the device pass
#else
    bfloat16_t() = delete;  // the host pass's proxy has no default constructor (__clang_cce_types.h)
#endif
    bfloat16_t(float) {}
    operator float() const { return 0.0f; }
};
// builtin enums whose constants user code names
enum pipe_t : int { PIPE_S, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_MTE4, PIPE_MTE5,
                    PIPE_V2, PIPE_FIX };
enum event_t : int { EVENT_ID0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };
namespace bisheng { namespace cce {
template <class... A> inline void metrics_prof_start(A&&...) {}
template <class... A> inline void metrics_prof_stop(A&&...) {}
template <auto... P, class... A> inline void mark_stamp(A&&...) {}
} }
inline uint64_t get_imm(uint64_t) { return 0; }  // used as an address
// the kernel launch, rewritten from k<<<blocks, 0, stream>>>(args)
template <class L> inline void __asc_typecheck_launch(uint32_t numBlocks, L dynUbufOrL2ctrl, void* stream) {}
"""

#: bisheng builtins the headers call (found with --discover against asc-devkit 82b89a15).
INTRINSICS = """
asc_prof_start asc_prof_stop clz copy_cbuf_to_bt copy_cbuf_to_fbuf copy_cbuf_to_gm
copy_gm_to_cbuf_multi_nd2nz_b16 copy_gm_to_cbuf_multi_nd2nz_b32s copy_gm_to_cbuf_multi_nd2nz_b8
copy_gm_to_ubuf copy_gm_to_ubuf_align_b32 copy_gm_to_ubuf_align_b8 copy_ubuf_to_gm copy_ubuf_to_gm_align_b32
copy_ubuf_to_gm_align_b8 copy_ubuf_to_ubuf create_cbuf_matrix dc_preload dcci ffts_cross_core_sync
__get_kfc_workspace_addr __set_kfc_workspace_addr copy_gm_to_cbuf dsb get_acc_val get_arch_ver get_block_idx
get_block_num get_coreid get_ctrl get_icache_prl_st get_pc get_rsvd_cnt get_st_atomic_cfg get_subblockdim
get_subblockid get_sys_cnt get_vms4_sr img2colv2_cbuf_to_ca img2colv2_cbuf_to_cb mad_sp pipe_barrier preload
sbitset0 sbitset1 scatter_vnchwconv_b16 scatter_vnchwconv_b32 scatter_vnchwconv_b8 set_atomic_none set_cmpmask
set_ctrl set_data_exp_0 set_data_exp_1 set_data_exp_2 set_data_exp_3 set_deqscale set_ffts_base_addr set_flag
set_fmatrix set_fmatrix_b set_fpc set_l1_3d_size set_l3d_rpt set_mask_count set_mask_norm set_mov_pad_val
set_nd_para set_padding set_quant_pre set_va_reg_sb set_vector_mask sff0 sflbits trap vabs vadd vadds vand
vbrcb vcadd vcgadd vcgmax vcmax vcmpv_eq vcmpv_ge vcmpv_gt vcmpv_le vcmpv_lt vcmpv_ne vcmpvs_eq vcmpvs_ge
vcmpvs_gt vcmpvs_le vcmpvs_lt vcmpvs_ne vcopy vdiv vector_dup vexp vld_va_reg vln vmax vmaxs vmin vmins vmul
vmuls vnot vor vrec vreducev2 vsel vshr vsqrt vsub wait_flag wait_flag_dev vgather vshl vcpadd vmulconv
vaddrelu vsubrelu vaxpy vmla vrelu vrsqrt vtranspose
""".split()
#: the vconv_<from>2<to><round> family, all of them
INTRINSICS += [
    f"vconv_{pair}{r}"
    for pair in (
        "bf162f32 bf162s32 deq f162f32 f162s16 f162s32 f162s4 f162s8 f162u8 f322bf16 f322f16 f322f32 f322s16 "
        "f322s32 f322s64 s162f16 s162f32 s322f32 s322s16 s322s64 s42f16 s642f32 s642s32 s82f16 u82f16"
    ).split()
    for r in ("", "a", "c", "f", "r", "z", "o")
]
#: builtin struct/register types named in signatures
OPAQUE_TYPES = (
    "AddrReg MaskReg UnalignRegForLoad UnalignRegForStore vector_address vector_align vector_bool "
    "float4_e1m2x2_t float4_e2m1x2_t float8_e4m3_t float8_e5m2_t float8_e8m0_t"
).split()
#: builtin enums; their constants are collected from the headers (every ``Name::CONSTANT`` they write)
ENUMS = "Order_t QuantMode_t atomic_op_t atomic_type_t cache_line_t dcci_dst_t mem_dsb_t pad_t".split()
#: builtin constants
CONSTANTS = "H128 L128 VA0 VA1 VA2 VA3 VA4 VA5 VA6 VA7".split()
#: structs of the CANN-generated kernel_tiling/kernel_tiling.h that the advanced-API headers use (uint32 fields
#: unless written ``name:type``)
TILING = {
    "SoftMaxTiling": "outMaxK outMaxM outMaxSize rangeM reduceK reduceM reduceSize splitK splitM splitSize srcK srcM "
    "srcSize tailM tailReduceSize tailSplitSize",
    "LogSoftMaxTiling": "outMaxK outMaxM outMaxSize rangeM reduceK reduceM reduceSize splitK splitM splitSize srcK "
    "srcM srcSize tailM tailReduceSize tailSplitSize",
    "LayerNormTiling": "oneTmpSize tmpBufSize bsCurLength bshCurLength firstTmpStartPos hLength lastDimValueBack "
    "meanVarSize secondTmpStartPos thirdTmpStartPos",
    "LayerNormGradTiling": "bLength hLength lastDimValueBack lastDimValueBackMulTwo loopNum nohCalSize nohTailSize "
    "oneCalSize pdMeanTensorPos pdMeanTensorSize pdVarTensorPos pdVarTensorSize sLength tailSize tmpTensor1Pos "
    "tmpTensor1Size tmpTensor2Pos tmpTensor2Size tmpTensorBSHPos tmpTensorBSHSize tmpTensorPos tmpTensorSize "
    "x1TensorPos x1TensorSize x2TensorPos x2TensorSize x3TensorPos x3TensorSize",
    "LayerNormGradBetaTiling": "",
    "LayerNormSeparateTiling": "",
    "TopkTiling": "topkMrgSrc1MaskSizeOffset vreduceIdxMask0 vreduceIdxMask1 vreduceValMask0 vreduceValMask1 "
    + " ".join(f"vreducehalfValMask{i}" for i in range(8)),
    "DeepNormTiling": "tmpBufSize bsCurLength bshCurLength hLength meanVarSize oneTmpSize",
    "BatchNormTiling": "tmpBufSize bshCurLength meanVarSize originalBLength shCurLength shCurLengthBlockNum",
    "GroupNormTiling": "bsCurLength bshCurLength c d dhwAlignSize factor:float g hw hwAlignSize inputRoundSize "
    "meanVarRoundSize n numberOfTmpBuf",
    "RmsNormTiling": "",
    "PadTiling": "",
    "UnPadTiling": "",
    "ConfusionTransposeTiling": "",
}

DIAG = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): (?P<kind>error|warning|fatal error): (?P<msg>.*)$")


def _enum_constants(devkit: Path) -> dict[str, list[str]]:
    found: dict[str, set[str]] = {e: set() for e in ENUMS}
    pattern = re.compile(r"\b(" + "|".join(ENUMS) + r")::([A-Za-z_][A-Za-z_0-9]*)")
    for tree in ("include", "impl"):
        for root, _, files in os.walk(devkit / tree, followlinks=True):
            for name in files:
                if name.endswith(".h"):
                    for m in pattern.finditer(Path(root, name).read_text(errors="replace")):
                        found[m.group(1)].add(m.group(2))
    return {e: sorted(v) or ["NONE"] for e, v in found.items()}


def write_prelude(path: Path, devkit: Path, intrinsics, types, tiling, constants) -> None:
    lines = [PRELUDE]
    for enum, names in _enum_constants(devkit).items():
        lines.append(f"enum class {enum} {{ {', '.join(names)} }};")
    for t in sorted(types):
        lines.append(f"struct {t} {{ template <class... A> constexpr {t}(A&&...) {{}} }};")
    for t, members in sorted(tiling.items()):
        fields = ""
        for m in sorted(set(members.split())):
            name, _, ctype = m.partition(":")
            fields += f" {ctype or 'uint32_t'} {name}{{}};"
        lines.append(f"struct {t} {{ constexpr {t}() {{}} template <class... A> constexpr {t}(A&&...) {{}}{fields} }};")
        lines.append(f"namespace AscendC {{ namespace tiling {{ using {t} = ::{t}; }} }}")
    for c in sorted(constants):
        lines.append(f"constexpr __stub_any {c}{{}};")
    for f in sorted(set(intrinsics)):
        lines.append(f"template <class... A> inline __stub_any {f}(A&&...) {{ return {{}}; }}")
    path.write_text("\n".join(lines) + "\n")


def rewrite_launch(source: str) -> str:
    """``k<<<a, b, c>>>(args)`` -> ``(__asc_typecheck_launch(a, b, c), k(args))``, lines kept."""
    return re.sub(
        r"(\b[A-Za-z_]\w*)\s*<<<(.*?)>>>\s*\((.*)\)",
        lambda m: f"(__asc_typecheck_launch({m.group(2)}), {m.group(1)}({m.group(3)}))",
        source,
    )


def run_clang(clang: str, include: list[Path], work: Path, source: Path, defines: list[str]) -> str:
    argv = [
        clang,
        "-fsyntax-only",
        "-std=c++17",
        "-x",
        "c++",
        "-ferror-limit=0",
        "-fdelayed-template-parsing",
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        "-Wno-unknown-pragmas",
        "-include",
        str(work / "prelude.h"),
        "-I",
        str(work / "stubinc"),
        "-D__NPU_ARCH__=2201",
        *defines,
    ]
    for d in include:
        argv += ["-isystem", str(d)]
    argv += [str(work / "kernel" / source.name)]
    output = subprocess.run(argv, capture_output=True, text=True).stderr
    return output.replace(str(work / "kernel"), str(source.parent))  # report the real files (same line numbers)


def _ours(file: str, ours: set[str]) -> bool:
    """Whether a diagnostic's file is one of the kernel's (``ours``: their resolved paths)."""
    return str(Path(file).resolve()) in ours


def classify(output: str, ours: set[str]) -> tuple[list[str], list[str]]:
    """Split diagnostics into (ours, the headers'); a diagnostic counts as ours if its location is in our files."""
    mine, theirs = [], []
    lines = output.splitlines()
    for i, line in enumerate(lines):
        m = DIAG.match(line)
        if not m:
            continue
        text = line
        if i + 1 < len(lines) and not DIAG.match(lines[i + 1]):
            text += "\n    " + lines[i + 1].strip()
        (mine if _ours(m.group("file"), ours) else theirs).append(text)
    return mine, theirs


def discover(output: str, ours: set[str]) -> dict[str, set[str]]:
    """Names the headers (never our files) lack: intrinsics, types, tiling members."""
    new: dict[str, set[str]] = {"intrinsics": set(), "types": set(), "members": set()}
    for line in output.splitlines():
        m = DIAG.match(line)
        if not m or _ours(m.group("file"), ours):
            continue
        msg = m.group("msg")
        u = re.match(r"use of undeclared identifier '(\w+)'", msg)
        if u and (u.group(1)[0].islower() or u.group(1)[0] == "_"):
            new["intrinsics"].add(u.group(1))
        t = re.match(r"unknown type name '(\w+)'", msg)
        if t and not re.match(r"fp\d|fp4x2", t.group(1)):  # fp8_*/fp4x2_* are the headers' own aliases
            new["types"].add(t.group(1))
        mem = re.match(r"no member named '(\w+)' in '(\w+)'", msg)
        if mem and mem.group(2) in TILING:
            new["members"].add(f"{mem.group(2)}.{mem.group(1)}")
    return new


def _kernel_files(source: Path) -> list[Path]:
    """``source`` and the headers of the kernel tree beside it (the emulation's ``emu/`` excluded)."""
    root = source.parent
    headers = (p for p in root.rglob("*.h") if p.relative_to(root).parts[0] != "emu")
    return [source, *sorted(p.resolve() for p in headers)]


def check_source(
    args: argparse.Namespace,
    devkit: Path,
    clang: str,
    source: Path,
    define_sets: dict[str, list[str]] | None = None,
    include: list[Path] | None = None,
) -> bool:
    """Every define set over one source and the kernel tree's headers; True if any gave a diagnostic in ours.
    ``include``: the dirs searched (default: a devkit's ``INCLUDE_DIRS``)."""
    if include is None:
        include = [devkit / d if d else devkit for d in INCLUDE_DIRS]
    kernel_files = _kernel_files(source)
    ours = {str(p) for p in kernel_files}
    failed = False
    with tempfile.TemporaryDirectory(prefix="asc-typecheck-") as tmp:
        work = Path(tmp)
        (work / "stubinc" / "kernel_tiling").mkdir(parents=True)
        (work / "stubinc" / "kernel_tiling" / "kernel_tiling.h").write_text("// stub: structs are in the prelude\n")
        for p in kernel_files:  # the whole kernel tree, each file's launches rewritten (same lines)
            copy = work / "kernel" / p.relative_to(source.parent)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(rewrite_launch(p.read_text()))
        for name, defines in (define_sets or DEFINE_SETS).items():
            intrinsics, types, tiling = list(INTRINSICS), set(OPAQUE_TYPES), dict(TILING)
            for _ in range(8 if args.discover else 1):
                write_prelude(work / "prelude.h", devkit, intrinsics, types, tiling, CONSTANTS)
                output = run_clang(clang, include, work, source, defines)
                if not args.discover:
                    break
                new = discover(output, ours)
                added = new["intrinsics"] - set(intrinsics) | (new["types"] - types)
                for entry in sorted(new["members"]):
                    struct, member = entry.split(".")
                    if member not in [m.partition(":")[0] for m in tiling[struct].split()]:
                        tiling[struct] += " " + member
                        added.add(entry)
                if not added:
                    break
                print(f"[{name}] discovered: {' '.join(sorted(added))}")
                intrinsics += sorted(new["intrinsics"] - set(intrinsics))
                types |= new["types"]
            mine, theirs = classify(output, ours)
            status = "clean" if not mine else f"{len(mine)} diagnostic(s) in our code"
            print(f"[{name}] {status}; {len(theirs)} in the devkit headers (stub gaps, not ours)")
            for d in mine:
                print("  " + d)
            if args.verbose:
                for d in theirs:
                    print("  (header) " + d)
            failed |= bool(mine)
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("devkit", type=Path, help="a fetched asc-devkit (github.com/mirror-cann/asc-devkit)")
    parser.add_argument("--clang", default=shutil.which("clang++") or "/usr/bin/clang++")
    parser.add_argument("--source", type=Path, action="append", help="(repeatable) default: every kernels/*.asc")
    parser.add_argument("--discover", action="store_true", help="stub names the headers lack, and print them")
    parser.add_argument("-v", "--verbose", action="store_true", help="also print the headers' own diagnostics")
    args = parser.parse_args(argv)
    devkit = args.devkit.resolve()
    tikcfw = (devkit / "kernel_operator.h").is_file() and (devkit / "interface").is_dir()
    if not tikcfw and not (devkit / "include" / "kernel_operator.h").is_file():
        print(f"typecheck: {devkit} has no include/kernel_operator.h (not an asc-devkit checkout) and is not "
              "a CANN tikcfw directory", file=sys.stderr)  # fmt: skip
        return 2
    clang = shutil.which(args.clang) or args.clang
    if not Path(clang).exists():
        print(f"typecheck: no clang at {args.clang}", file=sys.stderr)
        return 2
    failed = False
    with tempfile.TemporaryDirectory(prefix="asc-tikcfw-") as view:
        headers = tikcfw_view(devkit, Path(view)) if tikcfw else devkit
        include = [devkit / d if d else devkit for d in TIKCFW_INCLUDE_DIRS] if tikcfw else None
        for source in args.source or sorted(KERNELS_DIR.glob("*.asc")):
            print(f"{source.name}:")
            defines = TIKCFW_DEFINE_SETS if tikcfw else None
            failed |= check_source(args, headers, clang, source.resolve(), defines, include)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
