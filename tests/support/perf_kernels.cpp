// Small hand-made kernels for tests/perf/test_perfmodel.py: each does a known amount of work, so the
// performance counters and the timeline replay can be checked against hand-computed numbers.
// Built as a shared library against ascend_rmsnorm/kernels/emu; called through ctypes.
#include <cstdint>

#include "kernel_operator.h"
#include "../../ascend_rmsnorm/kernels/common/platform.h"
#include "../../ascend_rmsnorm/kernels/common/numerics.h"

using namespace AscendC;

namespace {

// Block b copies its n + tail floats of src to dst through one VECIN and one VECOUT queue of
// `buffers` buffers: n floats in chunks of `chunk` (a multiple of 8) with plain DataCopy, then
// (when tail > 0) `tail` floats with DataCopyPad in `rows` bursts of tail/rows floats each.
void CopyKernel(float* src, float* dst, uint32_t n, uint32_t chunk, uint32_t rows, uint32_t tail, uint8_t buffers)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 2> in;
    TQue<TPosition::VECOUT, 2> out;
    const uint32_t padded = tail > 0 ? rows * ((tail / rows * 4 + 31) / 32 * 32) : 0;
    const uint32_t buf = chunk * 4 > padded ? chunk * 4 : padded;
    pipe.InitBuffer(in, buffers, buf);
    pipe.InitBuffer(out, buffers, buf);
    const uint64_t total = static_cast<uint64_t>(GetBlockNum()) * (n + tail);
    GlobalTensor<float> s, d;
    s.SetGlobalBuffer(src, total);
    d.SetGlobalBuffer(dst, total);
    const uint64_t base = static_cast<uint64_t>(GetBlockIdx()) * (n + tail);
    for (uint32_t off = 0; off < n; off += chunk) {
        LocalTensor<float> a = in.AllocTensor<float>();
        DataCopy(a, s[base + off], chunk);
        in.EnQue(a);
        a = in.DeQue<float>();
        LocalTensor<float> b = out.AllocTensor<float>();
        DataCopy(b, a, chunk);  // UB -> UB on the vector pipe
        in.FreeTensor(a);
        out.EnQue(b);
        b = out.DeQue<float>();
        DataCopy(d[base + off], b, chunk);
        out.FreeTensor(b);
    }
    if (tail > 0) {
        const uint32_t per = tail / rows;
        LocalTensor<float> a = in.AllocTensor<float>();
        DataCopyPad(a, s[base + n], DataCopyExtParams(static_cast<uint16_t>(rows), per * 4, 0, 0, 0),
                    DataCopyPadExtParams<float>(false, 0, 0, 0.0f));
        in.EnQue(a);
        a = in.DeQue<float>();
        LocalTensor<float> b = out.AllocTensor<float>();
        // rows of `per` floats sit at a 32-byte pitch in UB; copy the whole padded tile
        const uint32_t pitch = (per * 4 + 31) / 32 * 32 / 4;
        DataCopy(b, a, pitch * rows);
        in.FreeTensor(a);
        out.EnQue(b);
        b = out.DeQue<float>();
        DataCopyPad(d[base + n], b, DataCopyExtParams(static_cast<uint16_t>(rows), per * 4, 0, 0, 0));
        out.FreeTensor(b);
    }
}

// A fixed mix of vector instructions, flags, barriers and scalar accesses on TBufs, no GM traffic:
// Duplicate(1000 fp32), Add(1000 fp32), Cast(bf16 <- fp32, 100), level-0 Mul (3 repeats, mask 64),
// 2 PipeBarrier<V>, V_S set/wait, 5 GetValue, 2 SetValue, S_V set/wait.
void VectorKernel()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b, c;
    pipe.InitBuffer(a, 4096);
    pipe.InitBuffer(b, 4096);
    pipe.InitBuffer(c, 4096);
    LocalTensor<float> ta = a.Get<float>(), tb = b.Get<float>();
    LocalTensor<bfloat16_t> tc = c.Get<bfloat16_t>();
    Duplicate(ta, 1.5f, 1000);
    Duplicate(tb, 2.0f, 1000);
    PipeBarrier<PIPE_V>();
    Add(ta, ta, tb, 1000);
    Cast(tc, tb, RoundMode::CAST_RINT, 100);
    PipeBarrier<PIPE_V>();
    Mul(tb, ta, ta, 64, 3, BinaryRepeatParams(1, 1, 1, 8, 8, 8));
    event_t e = static_cast<event_t>(pipe.FetchEventID(HardEvent::V_S));
    SetFlag<HardEvent::V_S>(e);
    WaitFlag<HardEvent::V_S>(e);
    float sum = 0;
    for (int i = 0; i < 5; ++i) sum += tb.GetValue(i);
    ta.SetValue(0, sum);
    ta.SetValue(1, sum);
    e = static_cast<event_t>(pipe.FetchEventID(HardEvent::S_V));
    SetFlag<HardEvent::S_V>(e);
    WaitFlag<HardEvent::S_V>(e);
}

// The timeline case of the tests: 256 bytes GM->UB, MTE2_V, one Add of 64 floats (1 repeat),
// V_MTE3, 256 bytes UB->GM; and with `scalar` also V_S + one GetValue at the end.
void ChainKernel(float* src, float* dst, int32_t scalar)
{
    TPipe pipe;
    TBuf<TPosition::VECIN> inb;
    TBuf<TPosition::VECOUT> outb;
    pipe.InitBuffer(inb, 256);
    pipe.InitBuffer(outb, 256);
    GlobalTensor<float> s, d;
    s.SetGlobalBuffer(src, 64);
    d.SetGlobalBuffer(dst, 64);
    LocalTensor<float> x = inb.Get<float>(), y = outb.Get<float>();
    DataCopy(x, s, 64);
    SetFlag<HardEvent::MTE2_V>(0);
    WaitFlag<HardEvent::MTE2_V>(0);
    Add(y, x, x, 64);
    SetFlag<HardEvent::V_MTE3>(0);
    WaitFlag<HardEvent::V_MTE3>(0);
    DataCopy(d, y, 64);
    if (scalar) {
        SetFlag<HardEvent::V_S>(0);
        WaitFlag<HardEvent::V_S>(0);
        volatile float v = y.GetValue(0);
        (void)v;
    }
}

// An emulated API someone added without its perf hook: it issues a vector op and reports nothing.
// Canon's pair at `repeats` 256-byte repeats of fp32: Compare into a mask, PipeBarrier<V>, Select by it
// (count forms, VSEL_TENSOR_SCALAR_MODE), as dav-c220 issues them.
void SelectKernel(uint32_t repeats)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, m;
    const uint32_t n = repeats * 64;
    pipe.InitBuffer(a, n * 4);
    pipe.InitBuffer(m, n / 8 < 32 ? 32 : n / 8);
    LocalTensor<float> ta = a.Get<float>();
    LocalTensor<uint8_t> tm = m.Get<uint8_t>();
    Duplicate(ta, 1.0f, static_cast<int32_t>(n));
    PipeBarrier<PIPE_V>();
    Compare(tm, ta, ta, CMPMODE::EQ, n);
    PipeBarrier<PIPE_V>();
    Select(ta, tm, ta, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, n);
}

// The kernels' Canon over `repeats` repeats, the NaN loaded into the register once before it.
void CanonKernel(uint32_t repeats)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, m, c;
    const uint32_t n = repeats * 64;
    pipe.InitBuffer(a, n * 4);
    pipe.InitBuffer(m, n / 8 < 32 ? 32 : n / 8);
    pipe.InitBuffer(c, 32);
    LocalTensor<float> ta = a.Get<float>();
    Duplicate(ta, 1.0f, static_cast<int32_t>(n));
    rmsnorm::HoldNan(c.Get<float>());
    PipeBarrier<PIPE_V>();
    rmsnorm::Canon(ta, m.Get<uint8_t>(), n);
}

// Three vector instructions that write what an earlier one of their barrier window read or wrote
// (Mul over Add's source, which Mul reads too; Adds over Add's result; Muls over the source all of them
// read), then a barrier and one that reads them all. `barriers`: a PipeBarrier<V> before each of the
// three instead, the kernel the model's war_barriers what-if prices.
void OverwriteKernel(int32_t barriers)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b, c;
    pipe.InitBuffer(a, 256);
    pipe.InitBuffer(b, 256);
    pipe.InitBuffer(c, 256);
    LocalTensor<float> ta = a.Get<float>(), tb = b.Get<float>(), tc = c.Get<float>();
    Duplicate(ta, 1.0f, 64);
    Duplicate(tb, 2.0f, 64);
    PipeBarrier<PIPE_V>();
    Add(tc, ta, tb, 64);
    if (barriers) PipeBarrier<PIPE_V>();
    Mul(ta, ta, tb, 64);
    if (barriers) PipeBarrier<PIPE_V>();
    Adds(tc, tb, 1.0f, 64);
    if (barriers) PipeBarrier<PIPE_V>();
    Muls(tb, tb, 2.0f, 64);
    PipeBarrier<PIPE_V>();
    Add(tc, ta, tb, 64);
}

void Unhooked()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 1024);
    LocalTensor<float> t = a.Get<float>();
    Duplicate(t, 1.0f, 256);
    uint32_t op = ascend_emu::BeginOp(ascend_emu::kV);
    ascend_emu::TrackWrite(ascend_emu::kV, op, t.EmuAddr(), 1024, "NewApi");
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void perf_unhooked()
{
    ascend_emu::Launch("perf_unhooked", 1, [&]() { Unhooked(); });
}

extern "C" __attribute__((visibility("default"))) void perf_copy(float* src, float* dst, uint32_t blocks, uint32_t n,
                                                                 uint32_t chunk, uint32_t rows, uint32_t tail,
                                                                 uint32_t buffers)
{
    ascend_emu::Launch("perf_copy", blocks,
                       [&]() { CopyKernel(src, dst, n, chunk, rows, tail, static_cast<uint8_t>(buffers)); });
}

extern "C" __attribute__((visibility("default"))) void perf_vector(uint32_t blocks)
{
    ascend_emu::Launch("perf_vector", blocks, [&]() { VectorKernel(); });
}

extern "C" __attribute__((visibility("default"))) void perf_select(uint32_t repeats)
{
    ascend_emu::Launch("perf_select", 1, [&]() { SelectKernel(repeats); });
}

extern "C" __attribute__((visibility("default"))) void perf_canon(uint32_t repeats)
{
    ascend_emu::Launch("perf_canon", 1, [&]() { CanonKernel(repeats); });
}

extern "C" __attribute__((visibility("default"))) void perf_overwrite(int32_t barriers)
{
    ascend_emu::Launch("perf_overwrite", 1, [&]() { OverwriteKernel(barriers); });
}

extern "C" __attribute__((visibility("default"))) void perf_chain(float* src, float* dst, int32_t scalar)
{
    ascend_emu::Launch("perf_chain", 1, [&]() { ChainKernel(src, dst, scalar); });
}
