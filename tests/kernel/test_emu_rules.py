"""Each rule of the emulation, broken by a small kernel (tests/support/emu_rules.cpp): the run must abort
and say which rule and which documentation page. One correct kernel must run to the end."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from ascend_rmsnorm.backends import emu

SUPPORT = Path(__file__).resolve().parents[1] / "support"
CXX = shutil.which(os.environ.get("ASCEND_RMSNORM_CXX", "c++")) or "c++"

# case -> the rule name the abort message must carry
BROKEN = {
    "ub_capacity": "UB capacity",
    "ub_alignment": "UB alignment",
    "datacopy_length": "DataCopy length",
    "datacopy_empty": "DataCopy length",
    "repeat_range": "repeat range",
    "scalar_repeat_range": "repeat range",
    "brcb_repeat_range": "repeat range",
    "burst_count": "repeat range",
    "local_bounds": "LocalTensor bounds",
    "global_bounds": "GlobalTensor bounds",
    "deque_before_enque": "queue protocol",
    "alloc_beyond_buffers": "queue protocol",
    "enque_beyond_depth": "queue protocol",
    "free_foreign": "queue protocol",
    "missing_mte2_v": "pipe sync",
    "missing_v_barrier": "pipe sync (V->V)",
    "missing_v_s": "pipe sync",
    "missing_v_mte3": "pipe sync",
    "veccalc_dma": "data path",
    "aligned_to_vecout": "data path",
    "wait_without_set": "event protocol",
    "double_set": "event protocol",
    "leftover_flag": "event protocol",
    "leftover_enque": "event protocol",
    "cast_mode_bf16": "cast mode",
    "widening_in_place": "operand overlap",
    "partial_overlap": "operand overlap",
    "second_pipe": "TPipe",
    "block_dim": "block dim",
    "gm_race": "GM ordering",
    "gm_read_back": "GM ordering",
    "gm_read_back_second_write": "GM ordering",
    "gm_write_after_read": "GM ordering",
    "gm_write_after_other_block_read": "GM ordering",
    "gm_scalar_read_after_dma_write": "GM ordering",
    "gm_scalar_write_then_dma_read": "GM ordering",
    "gm_scalar_write_shared_line": "GM ordering",
    "gm_dma_write_after_other_block_scalar_read": "GM ordering",
    "gm_scalar_write_after_other_block_dma_read": "GM ordering",
    "gm_scalar_write_after_other_block_scalar_read": "GM ordering",
    "compare_count": "repeat range",
    "gather_bounds": "LocalTensor bounds",
    "brcb_overlap": "operand overlap",
    "repeat_cross_overlap": "operand overlap",
    "select_mode0": "select mode",
    "default_local_size": "default-constructed tensor",
    "default_local_operand": "default-constructed tensor",
    "default_global": "default-constructed tensor",
    "gather_wrap": "repeat range",
    "vec_index_after_vector": "pipe sync",
    "select_tmp_ub": "UB capacity",
    "cmpmask_unset": "compare mask",
    "cmpmask_no_barrier": "pipe sync (V->V)",
    "cmpmask_reloaded_early": "pipe sync (V->V)",
    "vector_mask_unknown": "vector mask",
    "cmpmask_address": "compare mask",
    "vector_count_unset": "vector mask",
    "fetch_twice_before_wait": "event protocol",
    "queue_event_ids_exhausted": "event protocol",
    "buffers_per_queue": "UB capacity",
    "compare_overlap": "operand overlap",
    "pad_value": "DataCopyPad padding",
    "datacopy_wrap": "DataCopy length",
    "narrowing_in_place": "operand overlap",
    "zero_length_buffer": "UB capacity",
    "tbuf_get_zero": "TBuf::Get",
    "accumulate_in_repeat_overlap": "operand overlap",
    "gm_misaligned": "GM alignment",
    "gm_misaligned_strided_in": "GM alignment",
    "gm_misaligned_strided_out": "GM alignment",
    "pad_block_len": "DataCopy length",
    "ub_copy_overlap": "operand overlap",
    "pad_above_32_bytes": "DataCopy length",
    "unknown_event": "event protocol",
    "event_id_range": "event protocol",
    "set_twice_then_wait": "event protocol",
    "barrier_pipe_s": "pipe sync",
    "live_tensors_per_position": "queue protocol",
    "enque_twice": "queue protocol",
    "free_queued": "queue protocol",
    "free_twice": "queue protocol",
    "queue_init_twice": "queue protocol",
    "queue_zero_buffers": "queue protocol",
    "free_to_other_queue": "queue protocol",
    "tbuf_init_twice": "TBuf::Get",
    "tbuf_uninitialised": "TBuf::Get",
    "local_view_beyond": "LocalTensor bounds",
    "get_value_index": "LocalTensor bounds",
    "scalar_access_position": "LocalTensor scalar access",
    "global_view_beyond": "GlobalTensor bounds",
    "global_null": "GlobalTensor bounds",
    "global_value_index": "GlobalTensor bounds",
    "global_null_copy": "GlobalTensor bounds",
    "negative_count": "repeat range",
    "zero_block_stride": "repeat range",
    "mask_beyond_repeat": "repeat range",
    "bitwise_mask_high": "repeat range",
    "cast_same_size_overlap": "operand overlap",
    "int32_compare_mode": "operand type",
    "register_select_repeat": "repeat range",
    "register_select_repeat_wrap": "repeat range",
    "register_select_count_zero": "repeat range",
    "register_select_after_reset_mask": "repeat range",
    "counter_mode_other_op": "vector mask",
    "set_vector_mask_normal": "vector mask",
    "cmpmask_misaligned": "UB alignment",
    "cmpmask_short": "LocalTensor bounds",
    "select_mask_overlap": "operand overlap",
    "select_mode_mismatch": "select mode",
    "gather_overlap": "operand overlap",
    "gather_base_misaligned": "UB alignment",
    "brcb_zero_block_stride": "repeat range",
    "shift_too_far": "repeat range",
    "vec_index_no_pipe": "TPipe",
    "release_queue_id": "event protocol",
    "set_queue_id": "event protocol",
    "enque_on_pending_flag": "event protocol",
    "vector_operand_outside_ub": "data path",
    "pad_value_64": "DataCopyPad padding",
    "outside_launch": "kernel launch",
}


def _compile(tmp: Path, source: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CXX, "-std=c++17", "-O1", "-I", str(emu.KERNELS / "emu"), *extra, str(source), "-o", str(tmp / "a.out")],
        capture_output=True,
        text=True,
    )


@pytest.fixture(scope="module")
def rules_binary(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("emu_rules")
    done = _compile(tmp, SUPPORT / "emu_rules.cpp")
    assert done.returncode == 0, done.stderr
    return tmp / "a.out"


def _run(binary: Path, case: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), case], capture_output=True, text=True, timeout=300)


# Not faults but indeterminate bytes: two copies of one DMA pipe into overlapping destinations, with no
# PipeBarrier of that pipe between them (cases "<name>_ordered" have it): the shared bytes are poisoned.
OVERLAPPING_COPIES = ("dma_overlap_ub", "dma_overlap_gm")
POISON_BITS = "ffffffff"


def test_every_case_is_covered(rules_binary):
    listed = set(_run(rules_binary, "list").stdout.split())
    overlaps = set(OVERLAPPING_COPIES) | {f"{c}_ordered" for c in OVERLAPPING_COPIES}
    overlaps |= {"select_mask_undefined", "select_mask_undefined_defined", "select_mask_dma_dummy"}  # poisoned too
    overlaps |= {"select_mask_queue_reuse", "select_mask_unordered_dma", "select_mask_not", "select_mask_ub_copy"}
    overlaps |= {"select_mask_compare_undefined", "select_mask_compares_undefined", "select_mask_chain"}
    overlaps |= {"select_mask_compare_partial"}
    assert listed == set(BROKEN) - {"block_dim", "outside_launch"} | {"valid", "semantics", "boundary"} | overlaps


#: Rules no small kernel can break (docs/design.md §9): the Select temp check, which the UB budget keeps unreachable.
UNREACHABLE_RULES = {"Select temp"}


def test_every_rule_the_emulation_aborts_on_has_a_breaking_kernel():
    """Each rule a ``Fail`` of kernels/emu names (its first argument) is the rule of some case above, so a
    new rule cannot come without a kernel that shows it fires (the README's "What is verified where")."""
    text = "".join(p.read_text() for p in sorted((emu.KERNELS / "emu").glob("*.h")))
    rules = set(re.findall(r'\bFail\(\s*"([^"]+)"', text))
    assert len(rules) > 20 and not re.search(r'\bFail\(\s*[^"\s]', text.replace("void Fail(const", ""))
    assert rules - set(BROKEN.values()) == UNREACHABLE_RULES


@pytest.mark.parametrize("case", OVERLAPPING_COPIES)
def test_unordered_overlapping_copies_leave_the_shared_bytes_indeterminate(rules_binary, case):
    """The docs ask for a PipeBarrier between copies of one DMA pipe into overlapping destinations, so
    that the later one's data lands last; without it the shared bytes are poisoned (the emulation's
    indeterminate), the others hold what was copied (a 1.0), and with it the later copy's 2.0 is there."""
    for name, shared in ((case, POISON_BITS), (f"{case}_ordered", "40000000")):
        done = _run(rules_binary, name)
        assert done.returncode == 0 and "completed" in done.stdout, (name, done.stderr)
        assert f"shared {shared} rest 3f800000" in done.stdout, (name, done.stdout)


def test_select_over_mask_bits_nothing_wrote_gives_indeterminate_elements(rules_binary):
    """A Select whose mask bits no instruction wrote reads whatever the UB held (on an NPU, the last
    kernel's bytes): those elements are indeterminate, so poisoned, not the pass-through that the UB's
    0xFF fill would give as a mask; the elements whose bits a Compare wrote are what it selected. A mask
    loaded by DataCopyPad has the same undefined bits in its dummy bytes up to the 32-byte block."""
    cases = (("select_mask_undefined", POISON_BITS), ("select_mask_undefined_defined", "3f800000"))
    for name, past in cases + (("select_mask_dma_dummy", POISON_BITS),):
        done = _run(rules_binary, name)
        assert done.returncode == 0 and "completed" in done.stdout, (name, done.stderr)
        assert f"compared 3f800000 past {past}" in done.stdout, (name, done.stdout)


def test_select_over_mask_bytes_made_undefined_again_gives_indeterminate_elements(rules_binary):
    """Bytes a kernel wrote become undefined again where the emulation poisons them: a queue buffer's next
    AllocTensor (the mask bits its earlier use left), and the shared block of two unordered copies into
    the same UB bytes. A Select over such bits poisons its elements, not the pass-through of the fill."""
    for name, compared in (("select_mask_queue_reuse", "3f800000"), ("select_mask_unordered_dma", POISON_BITS)):
        done = _run(rules_binary, name)
        assert done.returncode == 0 and "completed" in done.stdout, (name, done.stderr)
        assert f"compared {compared} past {POISON_BITS}" in done.stdout, (name, done.stdout)


def test_select_over_a_mask_made_from_unwritten_bytes_gives_indeterminate_elements(rules_binary):
    """A mask computed byte for byte from mask bytes nothing wrote (Not, which the rstd chain applies to
    its Compares' mask, or a UB->UB DataCopy) is as indeterminate as they are: a Select over it poisons
    those elements too, not the scalar (Not of the fill, 0) or src0 (a copy of the fill, all ones)."""
    for name, compared in (("select_mask_not", "3e800000"), ("select_mask_ub_copy", "3f800000")):
        done = _run(rules_binary, name)
        assert done.returncode == 0 and "completed" in done.stdout, (name, done.stderr)
        assert f"compared {compared} past {POISON_BITS}" in done.stdout, (name, done.stdout)


def test_select_over_a_mask_compared_from_unwritten_bytes_gives_indeterminate_elements(rules_binary):
    """A Compare or Compares of source elements nothing wrote compares whatever the UB held: the mask bits it
    writes for them are as indeterminate as those bytes, so a Select over them poisons its elements, not the
    scalar that the fill (a NaN, which compares to 0) would pick; the bits of written elements stay. So do
    the elements an earlier Select poisoned (``select_mask_chain``): a Compare of them is indeterminate too."""
    for name in ("select_mask_compare_undefined", "select_mask_compares_undefined", "select_mask_chain"):
        done = _run(rules_binary, name)
        assert done.returncode == 0 and "completed" in done.stdout, (name, done.stderr)
        assert f"compared 3f800000 past {POISON_BITS}" in done.stdout, (name, done.stdout)


def test_a_mask_byte_compared_only_partly_from_unwritten_bytes_stays_defined(rules_binary):
    """A mask byte whose eight elements are only partly unwritten ones stays defined (the marks are per
    byte): a Select over it keeps the elements its written bits select, and poisons only over bytes
    compared from unwritten elements alone."""
    done = _run(rules_binary, "select_mask_compare_partial")
    assert done.returncode == 0 and "completed" in done.stdout, done.stderr
    assert f"compared 3f800000 past {POISON_BITS}" in done.stdout, done.stdout
    assert "partly compared byte's element 3f800000" in done.stdout, done.stdout


def test_a_correct_kernel_runs_to_the_end(rules_binary):
    done = _run(rules_binary, "valid")
    assert done.returncode == 0, done.stderr
    assert "completed" in done.stdout and done.stderr == ""


def test_each_api_form_computes_what_dav_c220_defines(rules_binary):
    """The values, not the rules: every API form the kernels issue (level-0 masks and strides, the
    accumulate idiom, Compare's bit layout, the register form of Select in counter mode, Gather's byte
    offsets, Brcb, the casts' ties, ShiftRight of uint32_t, DataCopyPad's units and gaps) gives the
    values asc-devkit's dav_c220 implementation and API pages define; each block of emu_rules.cpp
    Semantics names its reference, and prints what differs."""
    done = _run(rules_binary, "semantics")
    assert done.returncode == 0 and "completed" in done.stdout, (done.returncode, done.stdout, done.stderr)


@pytest.mark.parametrize("mode", ["inf_nan", "saturation"])
def test_boundary_values_are_the_tables(rules_binary, mode):
    """Special and extreme inputs (+-0, MIN/MAX, NaN, +-inf) give what asc-devkit's boundary-value appendix
    for A2/A3 (附录/Memory矢量计算接口边界值汇总.md) says, API by API, in INF/NAN mode and in saturation mode
    (ASCEND_RMSNORM_EMU_SATURATE=1): tests/support/emu_boundary_rows.h holds its rows, line by line."""
    env = {**os.environ, "ASCEND_RMSNORM_EMU_SATURATE": "1" if mode == "saturation" else "0"}
    done = subprocess.run([str(rules_binary), "boundary"], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and "completed" in done.stdout, (done.returncode, done.stdout, done.stderr)


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_rule_aborts_and_names_it(rules_binary, case):
    done = _run(rules_binary, case)
    assert done.returncode == -signal.SIGABRT, (done.returncode, done.stdout, done.stderr)
    assert f"rule violated: {BROKEN[case]}" in done.stderr
    assert "see asc-devkit docs/zh/" in done.stderr
    assert "completed" not in done.stdout


#: name -> (the line, words of the emulation's own diagnostic, or a pattern: never words of the line itself,
#: which the compiler echoes with any error, so that a line failing for another reason (a typo) does not pass).
COMPILE_TIME = {
    "bf16 arithmetic": ("Add(b, b, b, 16);", "no bfloat16_t arithmetic"),
    # no diagnostic of its own: the real signature (one T for the tensors and the scalar) deduces nothing,
    # which g++ and clang each say in their words; the quote before the name is never in the line
    "scalar of another type": ("Muls(h, h, 0.5f, 16);", re.compile(r"no matching function for call to .Muls\b")),
    "TQue on VECCALC": ("TQue<TPosition::VECCALC, 1> q;", "TQue does not accept VECCALC"),
    "cast pair without a path": ("Cast(b, h, RoundMode::CAST_RINT, 16);", "not supported on dav-2201"),
    "bf16 select": (
        "Select(b, buf.Get<uint8_t>(), b, b, SELMODE::VSEL_TENSOR_TENSOR_MODE, 16);",
        "Select: dav-2201 supports half and float",
    ),
    "shift of a float": (
        "ShiftRight(buf.Get<float>(), buf.Get<float>(), 1.0f, 16);",
        "ShiftRight: dav-2201 supports int16_t",
    ),
    "compare of bf16": (
        "Compare(buf.Get<uint8_t>(), b, b, CMPMODE::EQ, 128);",
        "Compare/Compares: dav-2201 supports half, float, int32_t",
    ),
    "compares into int8": ("Compares(buf.Get<int8_t>(), buf.Get<float>(), 0.0f, CMPMODE::EQ, 64);", "uint8_t result"),
    # isSetMask = false runs under the vector mask as it stands, the mask argument a placeholder (asc-devkit
    # kernel_utils_base.h SetMask: `if constexpr (!isSetMask) return;`); the emulation does not model that mask
    "level-0 under the mask as it stands": ("Add<half, false>(h, h, h, 64, 1, BinaryRepeatParams());", "isSetMask"),
    "scalar level 0 under the mask as it stands": (
        "Adds<half, false>(h, h, h.GetValue(0), 64, 1, UnaryRepeatParams());",
        "isSetMask",
    ),
    "count form under the mask as it stands": (
        "Mins<int16_t, false>(buf.Get<int16_t>(), buf.Get<int16_t>(), int16_t(1), 16);",
        "isSetMask",
    ),
}


@pytest.mark.parametrize("name", sorted(COMPILE_TIME))
def test_unsupported_api_use_does_not_compile(tmp_path, name):
    line, words = COMPILE_TIME[name]
    src = tmp_path / "k.cpp"
    src.write_text(
        '#include "kernel_operator.h"\nusing namespace AscendC;\n'
        "void k() { TPipe pipe; TBuf<TPosition::VECCALC> buf; pipe.InitBuffer(buf, 1024);\n"
        "  LocalTensor<bfloat16_t> b = buf.Get<bfloat16_t>(); LocalTensor<half> h = buf.Get<half>();\n"
        f"  {line}\n}}\nint main() {{ return 0; }}\n"
    )
    said = words if isinstance(words, re.Pattern) else re.compile(re.escape(words))
    assert not said.search(line)
    done = _compile(tmp_path, src)
    assert done.returncode != 0
    assert said.search(done.stderr), done.stderr


NO_RESERVED = "-DASCEND_RMSNORM_EMU_NO_RESERVED_UB"  # bisheng's --cce-disable-asc-reserved-ubuf


def test_select_needs_the_reserved_ub(tmp_path):
    """Select keeps its temp in Ascend C's reserved 8 KB: handing those bytes to the kernel (the
    reserved UB disabled) makes Select a compile error, as asc-devkit's __ASC_USE_RESERVED_UBUF__ does,
    and only then may buffers reach past 184 KB."""
    body = (
        '#include "kernel_operator.h"\nusing namespace AscendC;\n'
        "void k() {{ TPipe pipe; TBuf<TPosition::VECCALC> a, b; pipe.InitBuffer(a, 2048);\n"
        "  pipe.InitBuffer(b, 188 * 1024); LocalTensor<float> t = a.Get<float>();\n"
        "  Duplicate(t, 1.0f, 256); PipeBarrier<PIPE_V>(); {line}\n}}\n"
        'int main() {{ ascend_emu::Launch("k", 1, k); std::printf("completed\\n"); return 0; }}\n'
    )
    src = tmp_path / "k.cpp"
    select = "Select(t, a.Get<uint8_t>()[1024], t, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, 64);"
    src.write_text(body.format(line=select))
    done = _compile(tmp_path, src, NO_RESERVED)
    assert done.returncode != 0
    assert "Select is forbidden when compile option --cce-disable-asc-reserved-ubuf is enabled" in done.stderr
    src.write_text(body.format(line="Muls(t, t, 2.0f, 256);"))
    assert _compile(tmp_path, src, NO_RESERVED).returncode == 0
    assert "completed" in _run(tmp_path / "a.out", "").stdout  # 190 KB reserved: within 192 KB - 256 B
    assert _compile(tmp_path, src).returncode == 0
    done = _run(tmp_path / "a.out", "")
    assert done.returncode == -signal.SIGABRT and "rule violated: UB capacity" in done.stderr
