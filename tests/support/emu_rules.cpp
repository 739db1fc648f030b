// Small Ascend C kernels, each breaking one rule the emulation must catch (plus a correct one).
// Built against ascend_rmsnorm/kernels/emu; run as `emu_rules <case>`; a broken rule aborts.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "emu_boundary_rows.h"
#include "kernel_operator.h"

using namespace AscendC;

namespace {

std::vector<float> g_x(4096, 1.0f), g_y(4096, 0.0f);
alignas(64) std::array<float, 64> g_own{};

uint32_t Bits(float v)
{
    uint32_t b;
    std::memcpy(&b, &v, sizeof(b));
    return b;
}

// A correct kernel: GM -> queue -> vector -> queue -> GM, and a TBuf round trip with flags; each
// block writes its own GM bytes; plus the row-strided level-0 pattern of the merged-rows tree
// (rows interleave, but no repeat reads what another repeat wrote).
void Valid()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    TQue<TPosition::VECOUT, 1> out;
    TBuf<TPosition::VECCALC> buf;
    GlobalTensor<float> x, y;
    x.SetGlobalBuffer(g_x.data(), 4096);
    y.SetGlobalBuffer(g_y.data() + 256 * GetBlockIdx(), 256);
    pipe.InitBuffer(in, 1, 256 * 4);
    pipe.InitBuffer(out, 1, 256 * 4);
    pipe.InitBuffer(buf, 256 * 4);
    LocalTensor<float> a = in.AllocTensor<float>();
    DataCopy(a, x, 256);
    in.EnQue(a);
    a = in.DeQue<float>();
    LocalTensor<float> b = out.AllocTensor<float>();
    LocalTensor<float> t = buf.Get<float>();
    Add(t, a, a, 256);
    PipeBarrier<PIPE_V>();
    Muls(b, t, 0.5f, 256);
    out.EnQue(b);
    in.FreeTensor(a);
    b = out.DeQue<float>();
    DataCopy(y, b, 256);
    out.FreeTensor(b);
    event_t e = static_cast<event_t>(pipe.FetchEventID(HardEvent::V_S));
    SetFlag<HardEvent::V_S>(e);
    WaitFlag<HardEvent::V_S>(e);
    volatile float v = t.GetValue(3);
    (void)v;
    // scalar GM access the data cache keeps right: a read of input bytes (DMAs only read them too), a
    // write into a 64-byte line of this block's own that no DMA touches
    volatile float gx = x.GetValue(7);
    (void)gx;
    GlobalTensor<float> own;
    own.SetGlobalBuffer(g_own.data() + 16 * GetBlockIdx(), 16);
    own.SetValue(1, 2.0f);
    // 4 rows of 64 floats (pitch 8 blocks): q[r][0:32] += q[r][32:64] for every row in one instruction
    event_t sv = static_cast<event_t>(pipe.FetchEventID(HardEvent::S_V));
    SetFlag<HardEvent::S_V>(sv);
    WaitFlag<HardEvent::S_V>(sv);
    Duplicate(t, 1.0f, 256);
    PipeBarrier<PIPE_V>();
    Add(t, t, t[32], 32, 4, BinaryRepeatParams(1, 1, 1, 8, 8, 8));
    PipeBarrier<PIPE_V>();
    // Compare + Select (NaN to a canonical value), Brcb, Gather, the integer rstd guess
    TBuf<TPosition::VECCALC> aux;
    pipe.InitBuffer(aux, 4096);
    LocalTensor<uint8_t> mask = aux.Get<uint8_t>();
    LocalTensor<float> f = aux.Get<float>()[256];
    LocalTensor<uint32_t> off = aux.Get<uint32_t>()[512];
    Compare(mask, t, t, CMPMODE::EQ, 64);
    // the level-0 Add above left the vector mask at 32 lanes; Compare takes none on A2/A3 (emu_vector.h,
    // Compare), so all 64 bits are written
    event_t cs = static_cast<event_t>(pipe.FetchEventID(HardEvent::V_S));
    SetFlag<HardEvent::V_S>(cs);
    WaitFlag<HardEvent::V_S>(cs);
    for (int i = 0; i < 8; ++i) {
        if (mask.GetValue(i) != 0xFF) {
            std::printf("Compare after a 32-lane level-0 Add: byte %d is %#x, not 0xff\n", i, mask.GetValue(i));
            std::abort();
        }
    }
    PipeBarrier<PIPE_V>();
    Select(t, mask, t, 0.5f, SELMODE::VSEL_TENSOR_SCALAR_MODE, 64);
    PipeBarrier<PIPE_V>();
    Brcb(f, t, 1, BrcbRepeatParams(1, 8));
    CreateVecIndex(off.ReinterpretCast<int32_t>(), 0, 64);
    PipeBarrier<PIPE_V>();
    Muls(off.ReinterpretCast<int32_t>(), off.ReinterpretCast<int32_t>(), 4, 64);
    PipeBarrier<PIPE_V>();
    Gather(f[64], t, off, 0, 64);
    ShiftRight(off, off, 1u, 64);
    // the register form of Select: the scalar loaded once, two Selects reading it
    PipeBarrier<PIPE_V>();
    Duplicate(f[128], 0.25f, 8);
    PipeBarrier<PIPE_V>();
    SetCmpMask(f[128]);
    Compare(mask, t, t, CMPMODE::EQ, 128);
    PipeBarrier<PIPE_V>();
    SetMaskCount();
    SetVectorMask<float, MaskMode::COUNTER>(0, 128);
    Select<float, uint8_t>(t, mask, t, 1, BinaryRepeatParams());
    Select<float, uint8_t>(t[128], mask, t[128], 1, BinaryRepeatParams());
    ResetMask();
    SetMaskNorm();
    PipeBarrier<PIPE_V>();
    // GM write-after-read in one block: MTE2 reads the block's y back (after an MTE3_MTE2 flag), and the
    // MTE3 write of the same bytes waits for that read (MTE2_MTE3)
    TBuf<TPosition::VECIN> back;
    TBuf<TPosition::VECOUT> again;
    pipe.InitBuffer(back, 256 * 4);
    pipe.InitBuffer(again, 256 * 4);
    Duplicate(again.Get<float>(), 3.0f, 256);
    event_t vw = static_cast<event_t>(pipe.FetchEventID(HardEvent::V_MTE3));
    SetFlag<HardEvent::V_MTE3>(vw);
    WaitFlag<HardEvent::V_MTE3>(vw);
    event_t wr = static_cast<event_t>(pipe.FetchEventID(HardEvent::MTE3_MTE2));
    SetFlag<HardEvent::MTE3_MTE2>(wr);
    WaitFlag<HardEvent::MTE3_MTE2>(wr);
    DataCopy(back.Get<float>(), y, 256);
    event_t rw = static_cast<event_t>(pipe.FetchEventID(HardEvent::MTE2_MTE3));
    SetFlag<HardEvent::MTE2_MTE3>(rw);
    WaitFlag<HardEvent::MTE2_MTE3>(rw);
    DataCopy(y, again.Get<float>(), 256);
}

// What each API form the kernels use computes, value for value, as dav_c220 defines it (not a rule
// check: every step is legal; a wrong value prints what differs and aborts). The reference for each
// block is named beside it; the values are read back through the scalar unit behind a flag.
std::vector<float> g_pad_in = [] {
    std::vector<float> v(24);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(100 + i);
    return v;
}();
std::vector<float> g_pad_out(2 * 24, -1.0f);

template <HardEvent E>
void Sync(TPipe& pipe)
{
    event_t e = static_cast<event_t>(pipe.FetchEventID(E));
    SetFlag<E>(e);
    WaitFlag<E>(e);
}

#define SEMANTICS_EXPECT(cond, ...)                  \
    do {                                             \
        if (!(cond)) {                               \
            std::printf("semantics: " __VA_ARGS__);  \
            std::printf("\n");                       \
            std::fflush(stdout);                     \
            std::abort();                            \
        }                                            \
    } while (0)

void Semantics()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    TBuf<TPosition::VECIN> in;
    pipe.InitBuffer(a, 16384);
    pipe.InitBuffer(in, 256);
    const LocalTensor<float> f = a.Get<float>();
    const LocalTensor<uint8_t> bytes = a.Get<uint8_t>();

    // (1) Level 0, continuous mask 5, 3 repeats, dst/src0 repeat stride 2 blocks, src1 repeat stride 0:
    // lanes 0..4 of blocks 0, 2, 4; every other element keeps its value (SIMD计算说明/掩码.md: a masked-off
    // element is not operated on; 高维切分.md: strides in 32-byte blocks).
    Duplicate(f, 1.0f, 256);
    Duplicate(f[256], 2.0f, 64);
    // (2) the accumulate idiom (StripeAccumulate): acc = p[r] + acc, repeat after repeat (通用说明和约束.md
    // 通用地址重叠约束: dst == src1, repeat strides 0). 1 + 2^-24 + 2^-24 in row order is 1; any other order 1 + 2^-23.
    Duplicate(f[512], 0.0f, 8);
    Duplicate(f[576], 1.0f, 8);
    Duplicate(f[584], 0x1p-24f, 16);
    PipeBarrier<PIPE_V>();
    Add(f, f, f[256], 5, 3, BinaryRepeatParams(1, 1, 1, 2, 2, 0));
    Add(f[512], f[576], f[512], 8, 3, BinaryRepeatParams(1, 1, 1, 0, 1, 0));
    PipeBarrier<PIPE_V>();
    Sync<HardEvent::V_S>(pipe);
    for (uint32_t i = 0; i < 64; ++i) {
        const bool hit = i % 16 < 5 && i < 40;
        SEMANTICS_EXPECT(f.GetValue(i) == (hit ? 3.0f : 1.0f), "level-0 masked Add: element %u is %g", i, f.GetValue(i));
    }
    SEMANTICS_EXPECT(f.GetValue(512) == 1.0f, "accumulate idiom: %a, not 1 (repeats out of order)", f.GetValue(512));

    // (3) Compare, count form, fp32: bit i%8 of byte i/8 (little-endian: Compare.md 约束说明 and its GT
    // example, 0b11110000); 128 elements write 16 bytes and nothing after them.
    const LocalTensor<float> t = f[1024];
    const LocalTensor<uint8_t> mask = bytes[8192];
    for (uint32_t i = 0; i < 128; ++i) t.SetValue(i, i % 3 == 0 ? std::nanf("") : 1.0f);
    Sync<HardEvent::S_V>(pipe);
    Duplicate(mask.ReinterpretCast<uint16_t>(), static_cast<uint16_t>(0xA9A9), 16);
    PipeBarrier<PIPE_V>();
    Compare(mask, t, t, CMPMODE::EQ, 128);
    PipeBarrier<PIPE_V>();
    Sync<HardEvent::V_S>(pipe);
    for (uint32_t k = 0; k < 32; ++k) {
        uint32_t want = 0xA9;
        if (k < 16) {
            want = 0;
            for (uint32_t j = 0; j < 8; ++j) want |= ((8 * k + j) % 3 != 0 ? 1u : 0u) << j;
        }
        SEMANTICS_EXPECT(mask.GetValue(k) == want, "Compare: mask byte %u is %#x, not %#x", k, mask.GetValue(k), want);
    }
    // (3a) Not of uint16_t words, count form (逻辑计算/Not.md: dst_i = ~src_i), in place, as the rstd
    // chain flips its +inf mask.
    const LocalTensor<uint16_t> words = bytes[8256].ReinterpretCast<uint16_t>();
    Duplicate(words, static_cast<uint16_t>(0xA9A9), 16);
    PipeBarrier<PIPE_V>();
    Not(words, words, 16);
    PipeBarrier<PIPE_V>();
    Sync<HardEvent::V_S>(pipe);
    for (uint32_t i = 0; i < 16; ++i) {
        SEMANTICS_EXPECT(words.GetValue(i) == 0x5656, "Not: word %u is %#x, not 0x5656", i, words.GetValue(i));
    }
    // (3b) Compares NE against 2.0 over the same elements: 1 where t is 1.0, and 0 where t is NaN, not
    // IEEE's 1: A2/A3's boundary-value tables say so for NE with a NaN operand on either side, Compare and
    // Compares, half and float (附录/Memory矢量计算接口边界值汇总.md, 表30 and 表31 and the notes below them).
    const LocalTensor<uint8_t> ne = bytes[8448];
    Compares(ne, t, 2.0f, CMPMODE::NE, 128);
    PipeBarrier<PIPE_V>();
    Sync<HardEvent::V_S>(pipe);
    for (uint32_t k = 0; k < 16; ++k) {
        uint32_t want = 0;
        for (uint32_t j = 0; j < 8; ++j) want |= ((8 * k + j) % 3 != 0 ? 1u : 0u) << j;
        SEMANTICS_EXPECT(ne.GetValue(k) == want, "Compares NE: mask byte %u is %#x, not %#x", k, ne.GetValue(k), want);
    }

    // (4) the register form of Select over half, counter mode, 130 elements: element i is src0[i] where
    // bit i of the mask is 1, else the register's scalar; the mask consumed contiguously (Select.md, mode 1:
    // 256/sizeof(T) bits a repeat, 多轮迭代连续消耗); elements from 130 on untouched (counter mode: 掩码.md).
    // Bits 128 and 129 come from the byte after Compare's 16 (0xA9: 1, then 0).
    const LocalTensor<uint16_t> src = a.Get<uint16_t>()[6144], dst = a.Get<uint16_t>()[6400];
    const LocalTensor<uint16_t> reg = a.Get<uint16_t>()[6656];
    Duplicate(src, static_cast<uint16_t>(0x3C00), 160);
    Duplicate(dst, static_cast<uint16_t>(0x1111), 160);
    Duplicate(reg, static_cast<uint16_t>(0x7E00), 16);
    PipeBarrier<PIPE_V>();
    SetCmpMask(reg);
    PipeBarrier<PIPE_V>();
    SetMaskCount();
    SetVectorMask<half, MaskMode::COUNTER>(0, 130);
    Select<half, uint8_t>(dst.ReinterpretCast<half>(), mask, src.ReinterpretCast<half>(), 1, BinaryRepeatParams());
    ResetMask();
    SetMaskNorm();
    PipeBarrier<PIPE_V>();
    Sync<HardEvent::V_S>(pipe);
    for (uint32_t i = 0; i < 160; ++i) {
        const bool bit = i < 128 ? i % 3 != 0 : (i < 130 ? ((0xA9u >> (i - 128)) & 1u) != 0 : false);
        const uint16_t want = i >= 130 ? 0x1111 : (bit ? 0x3C00 : 0x7E00);
        SEMANTICS_EXPECT(dst.GetValue(i) == want, "register Select: element %u is %#x, not %#x", i, dst.GetValue(i), want);
    }

    // (5) Gather: dst[i] = src[(srcBaseAddr + srcOffset[i]) / sizeof(T)], offsets in bytes from src (Gather.md);
    // 72 elements: one whole repeat and a tail. (6) Brcb: src[8r + j] fills block j of repeat r (Brcb.md).
    const LocalTensor<float> gdst = f[1408], gsrc = f[1536], bdst = f[1792];  // dst below src: Gather's src runs to the end
    const LocalTensor<uint32_t> off = a.Get<uint32_t>()[2304];
    for (uint32_t i = 0; i < 80; ++i) gsrc.SetValue(i, static_cast<float>(i));
    for (uint32_t i = 0; i < 72; ++i) off.SetValue(i, 4u * (71u - i));
    Sync<HardEvent::S_V>(pipe);
    Gather(gdst, gsrc, off, 16, 72);
    Brcb(bdst, gsrc, 2, BrcbRepeatParams(1, 8));
    PipeBarrier<PIPE_V>();
    Sync<HardEvent::V_S>(pipe);
    for (uint32_t i = 0; i < 72; ++i) {
        SEMANTICS_EXPECT(gdst.GetValue(i) == static_cast<float>(75 - i), "Gather: element %u is %g", i, gdst.GetValue(i));
    }
    for (uint32_t i = 0; i < 128; ++i) {
        SEMANTICS_EXPECT(bdst.GetValue(i) == static_cast<float>(i / 8), "Brcb: element %u is %g", i, bdst.GetValue(i));
    }

    // (7) Cast: fp32 -> fp16 / bf16 CAST_RINT round half to even (Cast.md: 四舍六入五成双), fp16 / bf16 ->
    // fp32 CAST_NONE exact. (8) ShiftRight of uint32_t is logical (ShiftRight.md). (9) level-0 Adds of
    // int32_t under a bitwise mask: the masked-off lanes keep their value.
    const LocalTensor<float> c32 = f[2560], c32b = f[2576], w32 = f[2624];
    const LocalTensor<half> c16 = a.Get<half>()[5376];
    const LocalTensor<bfloat16_t> cb16 = a.Get<bfloat16_t>()[5408];
    const LocalTensor<uint32_t> u = a.Get<uint32_t>()[2752];
    const LocalTensor<int32_t> idx = a.Get<int32_t>()[2816];
    const float ties[4] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f};
    for (uint32_t i = 0; i < 2; ++i) {
        c32.SetValue(i, ties[i]);
        c32b.SetValue(i, ties[2 + i]);
    }
    Sync<HardEvent::S_V>(pipe);
    Duplicate(u, 0xFFFFFFFEu, 8);
    Duplicate(idx, 7, 64);
    PipeBarrier<PIPE_V>();
    Cast(c16, c32, RoundMode::CAST_RINT, 2);
    Cast(cb16, c32b, RoundMode::CAST_RINT, 2);
    ShiftRight(u, u, 1u, 8);
    uint64_t odd[2] = {0xAAAAAAAAAAAAAAAAull, 0};
    Adds(idx, idx, 5, odd, 1, UnaryRepeatParams());
    PipeBarrier<PIPE_V>();
    Cast(w32, c16, RoundMode::CAST_NONE, 2);
    Cast(w32[8], cb16, RoundMode::CAST_NONE, 2);
    PipeBarrier<PIPE_V>();
    Sync<HardEvent::V_S>(pipe);
    const uint16_t h0 = c16.ReinterpretCast<uint16_t>().GetValue(0), h1 = c16.ReinterpretCast<uint16_t>().GetValue(1);
    const uint16_t b0 = cb16.ReinterpretCast<uint16_t>().GetValue(0), b1 = cb16.ReinterpretCast<uint16_t>().GetValue(1);
    SEMANTICS_EXPECT(h0 == 0x3C00 && h1 == 0x3C02, "Cast fp32->fp16 RINT ties: %#x %#x", h0, h1);
    SEMANTICS_EXPECT(b0 == 0x3F80 && b1 == 0x3F82, "Cast fp32->bf16 RINT ties: %#x %#x", b0, b1);
    SEMANTICS_EXPECT(w32.GetValue(0) == 1.0f && w32.GetValue(1) == 1.0f + 0x1p-9f && w32.GetValue(8) == 1.0f &&
                         w32.GetValue(9) == 1.0f + 0x1p-6f,
                     "Cast back to fp32: %a %a %a %a", w32.GetValue(0), w32.GetValue(1), w32.GetValue(8), w32.GetValue(9));
    SEMANTICS_EXPECT(u.GetValue(0) == 0x7FFFFFFFu, "ShiftRight(uint32_t): %#x", u.GetValue(0));
    for (uint32_t i = 0; i < 64; ++i) {
        SEMANTICS_EXPECT(idx.GetValue(i) == (i % 2 ? 12 : 7), "Adds under a bitwise mask: lane %u is %d", i, idx.GetValue(i));
    }

    // (9b) a NaN that arithmetic makes: the appendix leaves its sign and payload to the device (表1,
    // "nan不区分正负"); the emulation poisons them as 0x7F800001 (Apply), inf + -inf and NaN * 2 alike.
    const LocalTensor<float> nn = f[2688];  // over (7)'s c16, which the scalar unit read above
    Sync<HardEvent::S_V>(pipe);
    Duplicate(nn, ascend_emu::BitsF32(0x7F800000u), 8);
    Duplicate(nn[8], ascend_emu::BitsF32(0xFF800000u), 8);
    Duplicate(nn[16], ascend_emu::BitsF32(0xFFC00000u), 8);
    PipeBarrier<PIPE_V>();
    Add(nn[24], nn, nn[8], 8);
    Muls(nn[32], nn[16], 2.0f, 8);
    PipeBarrier<PIPE_V>();
    Sync<HardEvent::V_S>(pipe);
    const uint32_t sum = ascend_emu::F32Bits(nn.GetValue(24)), twice = ascend_emu::F32Bits(nn.GetValue(32));
    SEMANTICS_EXPECT(sum == 0x7F800001u && twice == 0x7F800001u, "arithmetic NaN: %#x %#x, not 0x7f800001", sum, twice);
    // (9c) a NaN a widening Cast makes: 表32 says only "nan" for half -> float and bfloat16_t -> float, as
    // 表1 does for arithmetic, so its bits are the device's and poisoned alike (ConvertOne): a kernel may
    // test a widened NaN, not read its bits (here a half NaN with a payload and a negative bf16 NaN).
    const LocalTensor<half> wh = nn[40].ReinterpretCast<half>();
    const LocalTensor<bfloat16_t> wb = nn[48].ReinterpretCast<bfloat16_t>();
    Duplicate(wh.ReinterpretCast<uint16_t>(), static_cast<uint16_t>(0x7E01u), 16);
    Duplicate(wb.ReinterpretCast<uint16_t>(), static_cast<uint16_t>(0xFFC1u), 16);
    PipeBarrier<PIPE_V>();
    Cast(nn[56], wh, RoundMode::CAST_NONE, 8);
    Cast(nn[64], wb, RoundMode::CAST_NONE, 8);
    PipeBarrier<PIPE_V>();
    Sync<HardEvent::V_S>(pipe);
    const uint32_t fromHalf = ascend_emu::F32Bits(nn.GetValue(56)), fromBf16 = ascend_emu::F32Bits(nn.GetValue(64));
    SEMANTICS_EXPECT(fromHalf == 0x7F800001u && fromBf16 == 0x7F800001u, "widened NaN: %#x %#x, not 0x7f800001",
                     fromHalf, fromBf16);

    // (10) DataCopyPad GM -> UB, 3 bursts of 20 bytes, GM gap 12 bytes (srcStride in bytes), UB gap 1
    // block (dstStride in 32-byte blocks after the burst padded to 32 bytes): rows 64 bytes apart in UB.
    // UB -> GM: UB gap 1 block (srcStride), GM gap 4 bytes (dstStride): rows 24 bytes apart in GM, the
    // bytes between them untouched (DataCopyPad（GMToUB / UBToGM非对齐数据搬运）.md).
    GlobalTensor<float> gin, gout;
    gin.SetGlobalBuffer(g_pad_in.data(), 24);
    gout.SetGlobalBuffer(g_pad_out.data() + 24 * GetBlockIdx(), 24);
    const LocalTensor<float> rows = in.Get<float>();
    DataCopyPad(rows, gin, DataCopyParams(3, 20, 12, 1), DataCopyPadParams());
    Sync<HardEvent::MTE2_S>(pipe);
    for (uint32_t r = 0; r < 3; ++r) {
        for (uint32_t c = 0; c < 5; ++c) {
            SEMANTICS_EXPECT(rows.GetValue(16 * r + c) == g_pad_in[8 * r + c], "DataCopyPad GM->UB: row %u col %u is %g",
                             r, c, rows.GetValue(16 * r + c));
        }
    }
    Sync<HardEvent::MTE2_MTE3>(pipe);
    DataCopyPad(gout, rows, DataCopyParams(3, 20, 1, 4));
    Sync<HardEvent::MTE3_S>(pipe);
    // read back as the host would (a GetValue would read through the core's data cache: refused)
    const float* back = gout.GetPhyAddr();
    for (uint32_t i = 0; i < 24; ++i) {
        const float want = i % 6 < 5 && i < 18 ? g_pad_in[8 * (i / 6) + i % 6] : -1.0f;
        SEMANTICS_EXPECT(back[i] == want, "DataCopyPad UB->GM: element %u is %g, not %g", i, back[i], want);
    }

    // (11) DataCopyPad GM -> UB of 20 bytes with isPad: the padding value fills the left/right padding and,
    // with some padding, the dummy up to 32 bytes; with no padding at all the dummy is not the padding value
    // (the page's examples: "若leftPadding、rightPadding都为0：dummy会默认填充待搬运数据块的第一个元素值"),
    // and what the hardware puts there is nothing a kernel may read: poisoned. Row 0 has no padding, row 1
    // (32 bytes on) one float of right padding: its elements 5..7 are the value.
    Sync<HardEvent::MTE3_MTE2>(pipe);
    Sync<HardEvent::S_MTE2>(pipe);
    DataCopyPad(rows, gin, DataCopyParams(1, 20, 0, 0), DataCopyPadParams(true, 0, 0, 0));
    DataCopyPad(rows[8], gin, DataCopyParams(1, 20, 0, 0), DataCopyPadParams(true, 0, 1, 0));
    Sync<HardEvent::MTE2_S>(pipe);
    for (uint32_t c = 5; c < 8; ++c) {
        const uint32_t dummy = Bits(rows.GetValue(c)), padded = Bits(rows.GetValue(8 + c));
        SEMANTICS_EXPECT(dummy == 0xFFFFFFFFu, "DataCopyPad isPad, no padding: dummy element %u is %#x, not poisoned",
                         c, dummy);
        SEMANTICS_EXPECT(padded == 0u, "DataCopyPad isPad, right padding: element %u is %#x, not the value 0", c,
                         padded);
    }
}

// The register form of Select, one rule broken per case: the register never loaded, no barrier
// after SetCmpMask, none between a Select reading the register and the next SetCmpMask, another vector
// instruction in counter mode, a mode-2 Select's address left in the register, no count set, a
// repeatTime other than 1 (2, and 257, which is 1 in 8 bits), a count of 0, a second Select after
// ResetMask (its count all ones).
void CmpMaskCase(int which)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 4096);
    LocalTensor<float> t = a.Get<float>(), c = t[512];
    LocalTensor<uint8_t> mask = a.Get<uint8_t>()[1024];
    Duplicate(t, 1.0f, 256);
    Duplicate(c, 0.0f, 64);
    PipeBarrier<PIPE_V>();
    Compare(mask, t, t, CMPMODE::EQ, 64);
    PipeBarrier<PIPE_V>();
    if (which == 4) Select(t[64], mask, t[64], c, SELMODE::VSEL_TENSOR_TENSOR_MODE, 64);
    if (which != 0 && which != 4) SetCmpMask(c);
    if (which != 1) PipeBarrier<PIPE_V>();
    SetMaskCount();
    if (which != 5) SetVectorMask<float, MaskMode::COUNTER>(0, which == 7 ? 0 : 64);
    if (which == 3) Adds(t[128], t[128], 1.0f, 64);
    const int32_t repeats = which == 6 ? 2 : which == 9 ? 257 : 1;  // 257: 1 once wrapped to 8 bits
    Select<float, uint8_t>(t, mask, t, repeats, BinaryRepeatParams());
    if (which == 2) SetCmpMask(c[8]);
    ResetMask();
    // ResetMask sets every bit of the mask register: in counter mode a count of 2^64 - 1 (kernel_reg.h
    // ResetMaskImpl; 掩码.md: in counter mode the low 64 bits are the element count)
    if (which == 8) Select<float, uint8_t>(t[64], mask, t[64], 1, BinaryRepeatParams());
    SetMaskNorm();
}
void CmpMaskUnset() { CmpMaskCase(0); }
void CmpMaskNoBarrier() { CmpMaskCase(1); }
void CmpMaskReloadedEarly() { CmpMaskCase(2); }
void VectorMaskUnknown() { CmpMaskCase(3); }
void CmpMaskAddress() { CmpMaskCase(4); }
// Fetch takes no id: fetched again before the wait, the same id comes back and is set twice.
void FetchTwiceBeforeWait()
{
    TPipe pipe;
    event_t a = static_cast<event_t>(pipe.FetchEventID(HardEvent::V_MTE3));
    SetFlag<HardEvent::V_MTE3>(a);
    event_t b = static_cast<event_t>(pipe.FetchEventID(HardEvent::V_MTE3));
    SetFlag<HardEvent::V_MTE3>(b);
}

// A queue's EnQue takes an id of the TPipe's 8: with all 8 V_MTE3 ids allocated, there is none left.
void QueueEventIdsExhausted()
{
    TPipe pipe;
    TQue<TPosition::VECOUT, 1> out;
    pipe.InitBuffer(out, 1, 256);
    for (int i = 0; i < 8; ++i) pipe.AllocEventID<HardEvent::V_MTE3>();
    LocalTensor<float> t = out.AllocTensor<float>();
    Duplicate(t, 1.0f, 64);
    out.EnQue(t);
}

// Every buffer of a queue counts towards the TPipe's 64: nine queues of eight buffers are 72.
void BuffersPerQueue()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q[9];
    for (auto& one : q) pipe.InitBuffer(one, 8, 32);
}

// Compare allows no overlap: its mask over its second source.
void CompareOverlap()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b;
    pipe.InitBuffer(a, 256);
    pipe.InitBuffer(b, 256);
    LocalTensor<float> x = a.Get<float>(), y = b.Get<float>();
    Duplicate(x, 1.0f, 64);
    Duplicate(y, 2.0f, 64);
    PipeBarrier<PIPE_V>();
    Compare(b.Get<uint8_t>(), x, y, CMPMODE::LT, 64);
}

// DataCopyPadParams' padding value: 0 only.
void PadValue()
{
    TPipe pipe;
    TBuf<TPosition::VECIN> a;
    pipe.InitBuffer(a, 256);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(g_x.data(), 4096);
    DataCopyPad(a.Get<float>(), x, DataCopyParams(1, 12, 0, 0), DataCopyPadParams(true, 0, 5, 0x3F800000));
}

// A contiguous DataCopy of more than 65535 blocks: the burst length would wrap.
void DataCopyWrap()
{
    TPipe pipe;
    TBuf<TPosition::VECIN> a;
    pipe.InitBuffer(a, 256);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(g_x.data(), 4096);
    DataCopy(a.Get<float>(), x, 524288 + 64);
}

// fp32 -> half in place: a repeat reads 256 bytes and writes 128 of them.
void NarrowingInPlace()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 512);
    LocalTensor<float> f = a.Get<float>();
    Duplicate(f, 1.0f, 128);
    PipeBarrier<PIPE_V>();
    Cast(f.ReinterpretCast<half>(), f, RoundMode::CAST_RINT, 128);
}

void ZeroLengthBuffer()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 0);
}

void TBufGetZero()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 256);
    a.Get<float>(0);
}

void VectorCountUnset() { CmpMaskCase(5); }
void RegisterSelectRepeat() { CmpMaskCase(6); }
void RegisterSelectRepeatWrap() { CmpMaskCase(9); }
void RegisterSelectCountZero() { CmpMaskCase(7); }
void RegisterSelectAfterResetMask() { CmpMaskCase(8); }

void UbCapacity()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b;
    pipe.InitBuffer(a, 100 * 1024);
    pipe.InitBuffer(b, 90 * 1024);  // 190 KB > 188,160 usable bytes
}

void UbAlignment()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 1024);
    LocalTensor<float> t = buf.Get<float>();
    Duplicate(t, 1.0f, 64);
    PipeBarrier<PIPE_V>();
    Add(t[3], t[3], t[3], 16);  // starts 12 bytes into a 32-byte block
}

void DataCopyLength()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 1, 1024);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(g_x.data(), 4096);
    LocalTensor<float> a = in.AllocTensor<float>();
    DataCopy(a, x, 10);  // 40 bytes: the hardware would copy 32
}

void DataCopyEmpty()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 1, 1024);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(g_x.data(), 4096);
    LocalTensor<float> a = in.AllocTensor<float>();
    DataCopy(a, x, DataCopyParams(2, 0, 0, 0));  // two empty blocks: CANN 8.1 takes blockLen from 1
}

void RepeatRange()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 96 * 1024);
    LocalTensor<float> t = buf.Get<float>();
    BinaryRepeatParams p;
    Add(t, t, t, 64, 300, p);  // repeatTime is an 8-bit field
}

// The same field of the level-0 forms with a scalar and of Brcb: an int repeat count passed as it is, not
// cast by the kernel, must not wrap silently (300 would run 44 repeats on the NPU).
void ScalarRepeatRange()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 96 * 1024);
    LocalTensor<float> t = buf.Get<float>();
    const int32_t repeats = 300;
    Adds(t, t, 1.0f, 64, repeats, UnaryRepeatParams());
}

void BrcbRepeatRange()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b;
    pipe.InitBuffer(a, 16 * 1024);
    pipe.InitBuffer(b, 96 * 1024);
    LocalTensor<float> t = a.Get<float>();
    Duplicate(t, 1.0f, 2400);
    PipeBarrier<PIPE_V>();
    const int32_t repeats = 300;
    Brcb(b.Get<float>(), t, repeats, BrcbRepeatParams(1, 8));
}

void BurstCount()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 1, 64 * 1024);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(g_x.data(), 4096);
    LocalTensor<float> a = in.AllocTensor<float>();
    DataCopyPadExtParams<float> pad;
    DataCopyPad(a, x, DataCopyExtParams(5000, 4, 0, 0, 0), pad);  // blockCount is 0..4095
}

void LocalBounds()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 256);
    LocalTensor<float> t = buf.Get<float>();
    Duplicate(t, 0.0f, 128);  // the buffer holds 64 floats
}

void GlobalBounds()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 1, 1024);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(g_x.data(), 128);
    LocalTensor<float> a = in.AllocTensor<float>();
    DataCopy(a, x[96], 64);  // elements 96..160 of 128
}

void DeQueBeforeEnQue()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 1, 1024);
    LocalTensor<float> a = in.DeQue<float>();
    (void)a;
}

void AllocBeyondBuffers()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 1, 1024);
    LocalTensor<float> a = in.AllocTensor<float>();
    LocalTensor<float> b = in.AllocTensor<float>();  // one buffer, two live tensors
}

void EnQueBeyondDepth()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 2, 1024);
    LocalTensor<float> a = in.AllocTensor<float>();
    LocalTensor<float> b = in.AllocTensor<float>();
    in.EnQue(a);
    in.EnQue(b);  // depth 1
}

void FreeForeign()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(in, 1, 1024);
    pipe.InitBuffer(buf, 1024);
    LocalTensor<float> t = buf.Get<float>();
    in.FreeTensor(t);  // this queue never handed it out
}

void MissingMte2V()
{
    TPipe pipe;
    TBuf<TPosition::VECIN> buf;
    pipe.InitBuffer(buf, 2048);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(g_x.data(), 4096);
    LocalTensor<float> t = buf.Get<float>();
    DataCopy(t, x, 256);  // MTE2 writes a TBuf...
    Muls(t, t, 2.0f, 256);  // ...and V reads it with no SetFlag/WaitFlag<MTE2_V>
}

void MissingVBarrier()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 2048);
    LocalTensor<float> t = buf.Get<float>();
    Duplicate(t, 1.0f, 256);
    Muls(t, t, 2.0f, 256);  // reads what Duplicate wrote, no PipeBarrier<PIPE_V>
}

void MissingVS()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 256);
    LocalTensor<float> t = buf.Get<float>();
    Duplicate(t, 1.0f, 64);
    volatile float v = t.GetValue(0);  // scalar read of a vector result, no V_S
    (void)v;
}

void MissingVMte3()
{
    TPipe pipe;
    TBuf<TPosition::VECOUT> buf;
    pipe.InitBuffer(buf, 1024);
    GlobalTensor<float> y;
    y.SetGlobalBuffer(g_y.data(), 4096);
    LocalTensor<float> t = buf.Get<float>();
    Duplicate(t, 1.0f, 256);
    DataCopy(y, t, 256);  // MTE3 reads a vector result with no V_MTE3
}

void VeccalcDma()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 1024);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(g_x.data(), 4096);
    LocalTensor<float> t = buf.Get<float>();
    DataCopyPadParams pad;
    DataCopyPad(t, x, DataCopyParams(1, 40, 0, 0), pad);  // GM -> VECCALC is no documented path on dav-2201
}

void AlignedToVecout()
{
    TPipe pipe;
    TBuf<TPosition::VECOUT> buf;
    pipe.InitBuffer(buf, 1024);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(g_x.data(), 4096);
    DataCopy(buf.Get<float>(), x, 64);  // DataCopy (aligned) goes GM -> VECIN only
}

void WaitWithoutSet()
{
    WaitFlag<HardEvent::MTE2_V>(EVENT_ID2);
}

void DoubleSet()
{
    SetFlag<HardEvent::V_MTE3>(EVENT_ID1);
    SetFlag<HardEvent::V_MTE3>(EVENT_ID1);
}

void LeftoverFlag()
{
    SetFlag<HardEvent::S_V>(EVENT_ID0);  // never waited on
}

// A tensor left in a queue when the kernel ends: its EnQue set a flag (MTE2_V here) that no DeQue waits
// for, and TPipe's destructor waits only for the flags of freed buffers (kernel_tpipe_impl.h).
void LeftoverEnQue()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 1, 256);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(g_x.data(), 4096);
    LocalTensor<float> t = in.AllocTensor<float>();
    DataCopy(t, x, 64);
    in.EnQue(t);  // never taken out
}

void CastModeBf16()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b;
    pipe.InitBuffer(a, 1024);
    pipe.InitBuffer(b, 1024);
    LocalTensor<float> f = a.Get<float>();
    LocalTensor<bfloat16_t> h = b.Get<bfloat16_t>();
    Duplicate(f, 1.0f, 64);
    PipeBarrier<PIPE_V>();
    Cast(h, f, RoundMode::CAST_NONE, 64);  // fp32->bf16 with CAST_NONE writes nothing on A2
}

void WideningInPlace()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 1024);
    LocalTensor<half> h = a.Get<half>();
    Duplicate(h, half(1.0f), 64);
    PipeBarrier<PIPE_V>();
    Cast(a.Get<float>(), h, RoundMode::CAST_NONE, 64);
}

void PartialOverlap()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 1024);
    LocalTensor<float> t = a.Get<float>();
    Duplicate(t, 1.0f, 128);
    PipeBarrier<PIPE_V>();
    Add(t, t, t[8], 64);  // src1 = t[8..72) overlaps dst = t[0..64)
}

void SecondPipe()
{
    TPipe one;
    TPipe two;
}

void GmRace()
{
    TPipe pipe;
    TQue<TPosition::VECOUT, 1> out;
    pipe.InitBuffer(out, 1, 1024);
    GlobalTensor<float> y;
    y.SetGlobalBuffer(g_y.data(), 4096);
    LocalTensor<float> b = out.AllocTensor<float>();
    Duplicate(b, 1.0f, 256);
    out.EnQue(b);
    b = out.DeQue<float>();
    DataCopy(y, b, 256);  // every block writes the same GM bytes
    out.FreeTensor(b);
}

void GmReadBack()
{
    TPipe pipe;
    TBuf<TPosition::VECOUT> b;
    TBuf<TPosition::VECIN> c;
    pipe.InitBuffer(b, 1024);
    pipe.InitBuffer(c, 1024);
    GlobalTensor<float> y;
    y.SetGlobalBuffer(g_y.data() + 256 * GetBlockIdx(), 256);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 1.0f, 256);
    event_t e = static_cast<event_t>(pipe.FetchEventID(HardEvent::V_MTE3));
    SetFlag<HardEvent::V_MTE3>(e);
    WaitFlag<HardEvent::V_MTE3>(e);
    DataCopy(y, t, 256);
    DataCopy(c.Get<float>(), y, 256);  // MTE2 reads what MTE3 wrote with no MTE3_MTE2 flag
}

// The same, after a second write to the same GM bytes: the flag after the first write does not cover it.
void GmReadBackSecondWrite()
{
    TPipe pipe;
    TBuf<TPosition::VECOUT> b;
    TBuf<TPosition::VECIN> c;
    pipe.InitBuffer(b, 1024);
    pipe.InitBuffer(c, 1024);
    GlobalTensor<float> y;
    y.SetGlobalBuffer(g_y.data() + 256 * GetBlockIdx(), 256);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 1.0f, 256);
    event_t e = static_cast<event_t>(pipe.FetchEventID(HardEvent::V_MTE3));
    SetFlag<HardEvent::V_MTE3>(e);
    WaitFlag<HardEvent::V_MTE3>(e);
    DataCopy(y, t, 256);
    event_t f = static_cast<event_t>(pipe.FetchEventID(HardEvent::MTE3_MTE2));
    SetFlag<HardEvent::MTE3_MTE2>(f);
    WaitFlag<HardEvent::MTE3_MTE2>(f);
    DataCopy(c.Get<float>(), y, 256);  // ordered by the flag
    event_t g = static_cast<event_t>(pipe.FetchEventID(HardEvent::MTE2_MTE3));
    SetFlag<HardEvent::MTE2_MTE3>(g);  // (the write below must not land before that read)
    WaitFlag<HardEvent::MTE2_MTE3>(g);
    PipeBarrier<PIPE_MTE3>();
    DataCopy(y, t, 256);               // the same bytes again
    PipeBarrier<PIPE_MTE2>();          // (the two reads land in the same UB bytes)
    DataCopy(c.Get<float>(), y, 256);  // no MTE3_MTE2 flag after that write
}

// GM write-after-read in one block: MTE3 writes the GM bytes MTE2 read, with nothing ordering the write
// after the read (MTE2 and MTE3 run in parallel: the write may land first, and the read see it).
void GmWriteAfterRead()
{
    TPipe pipe;
    TBuf<TPosition::VECOUT> b;
    TBuf<TPosition::VECIN> c;
    pipe.InitBuffer(b, 1024);
    pipe.InitBuffer(c, 1024);
    GlobalTensor<float> y;
    y.SetGlobalBuffer(g_y.data() + 256 * GetBlockIdx(), 256);
    DataCopy(c.Get<float>(), y, 256);  // MTE2 reads the block's y
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 1.0f, 256);
    event_t e = static_cast<event_t>(pipe.FetchEventID(HardEvent::V_MTE3));
    SetFlag<HardEvent::V_MTE3>(e);
    WaitFlag<HardEvent::V_MTE3>(e);
    DataCopy(y, t, 256);  // and MTE3 writes it, with no MTE2_MTE3 flag in between
}

// Scalar GM access goes through the AI Core's data cache (GlobalTensor/SetValue.md, GetValue.md): a
// GetValue of bytes a DMA of the launch wrote may read a stale line, a SetValue stays in the cache and
// leaves it as a whole 64-byte line, so a DMA of that line, or another block's scalar access to it,
// meets stale or overwritten bytes. DataCacheCleanAndInvalid orders it on the NPU; the emulation offers
// none, so it refuses the mix.
void GmScalarReadAfterDmaWrite()
{
    TPipe pipe;
    TBuf<TPosition::VECOUT> b;
    pipe.InitBuffer(b, 1024);
    GlobalTensor<float> y;
    y.SetGlobalBuffer(g_y.data() + 256 * GetBlockIdx(), 256);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 1.0f, 256);
    SetFlag<HardEvent::V_MTE3>(0);
    WaitFlag<HardEvent::V_MTE3>(0);
    DataCopy(y, t, 256);
    SetFlag<HardEvent::MTE3_S>(0);
    WaitFlag<HardEvent::MTE3_S>(0);
    volatile float v = y.GetValue(5);  // through the data cache, which may hold the line from before
    (void)v;
}

void GmScalarWriteThenDmaRead()
{
    TPipe pipe;
    TBuf<TPosition::VECIN> c;
    pipe.InitBuffer(c, 1024);
    GlobalTensor<float> y;
    y.SetGlobalBuffer(g_y.data() + 256 * GetBlockIdx(), 256);
    y.SetValue(3, 2.0f);  // stays in the data cache
    SetFlag<HardEvent::S_MTE2>(0);
    WaitFlag<HardEvent::S_MTE2>(0);
    DataCopy(c.Get<float>(), y, 256);  // reads GM, not the cache
}

void GmScalarWriteSharedLine()
{
    GlobalTensor<float> y;
    y.SetGlobalBuffer(g_y.data(), 256);
    y.SetValue(GetBlockIdx(), 1.0f);  // both blocks' writes in one 64-byte line: either may win it
}

// GM one block reads and another block writes in the same launch: the block that runs first reads
// (so the emulation meets the read before the write), the other writes the same bytes.
void GmWriteAfterOtherBlockRead()
{
    static int ran = 0;
    TPipe pipe;
    TBuf<TPosition::VECOUT> b;
    TBuf<TPosition::VECIN> c;
    pipe.InitBuffer(b, 1024);
    pipe.InitBuffer(c, 1024);
    GlobalTensor<float> y;
    y.SetGlobalBuffer(g_y.data(), 256);
    if (ran++ == 0) {
        DataCopy(c.Get<float>(), y, 256);
        return;
    }
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 1.0f, 256);
    event_t e = static_cast<event_t>(pipe.FetchEventID(HardEvent::V_MTE3));
    SetFlag<HardEvent::V_MTE3>(e);
    WaitFlag<HardEvent::V_MTE3>(e);
    DataCopy(y, t, 256);
}

// Scalar GM access of one block against another block's access to the same bytes (or 64-byte line, for a
// SetValue: cores' scalar addresses must be a cache line apart, SetValue.md): the block that runs first
// makes the first access, the other the second; nothing orders blocks.
void GmDmaWriteAfterOtherBlockScalarRead()
{
    static int ran = 0;
    GlobalTensor<float> y;
    y.SetGlobalBuffer(g_y.data(), 256);
    if (ran++ == 0) {
        volatile float v = y.GetValue(5);
        (void)v;
        return;
    }
    TPipe pipe;
    TBuf<TPosition::VECOUT> b;
    pipe.InitBuffer(b, 1024);
    LocalTensor<float> t = b.Get<float>();
    Duplicate(t, 1.0f, 256);
    SetFlag<HardEvent::V_MTE3>(0);
    WaitFlag<HardEvent::V_MTE3>(0);
    DataCopy(y, t, 256);  // the bytes the other block's GetValue read
}

void GmScalarWriteAfterOtherBlockDmaRead()
{
    static int ran = 0;
    GlobalTensor<float> y;
    y.SetGlobalBuffer(g_y.data(), 256);
    if (ran++ == 0) {
        TPipe pipe;
        TBuf<TPosition::VECIN> c;
        pipe.InitBuffer(c, 1024);
        DataCopy(c.Get<float>(), y, 256);
        return;
    }
    y.SetValue(3, 2.0f);  // a line the other block's MTE2 read
}

void GmScalarWriteAfterOtherBlockScalarRead()
{
    static int ran = 0;
    GlobalTensor<float> y;
    y.SetGlobalBuffer(g_y.data(), 256);
    if (ran++ == 0) {
        volatile float v = y.GetValue(1);
        (void)v;
        return;
    }
    y.SetValue(2, 2.0f);  // the same 64-byte line as the other block's GetValue
}

void CompareCount()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 2048);
    LocalTensor<float> t = a.Get<float>();
    Duplicate(t, 1.0f, 256);
    PipeBarrier<PIPE_V>();
    Compare(a.Get<uint8_t>()[1024], t, t, CMPMODE::EQ, 100);  // 400 bytes: not whole repeats
}

void GatherBounds()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b, c;
    pipe.InitBuffer(a, 256);
    pipe.InitBuffer(b, 256);
    pipe.InitBuffer(c, 256);
    LocalTensor<uint32_t> off = b.Get<uint32_t>();
    Duplicate(a.Get<float>(), 1.0f, 64);
    Duplicate(off, 256u, 64);  // byte 256 of a 256-byte src
    PipeBarrier<PIPE_V>();
    Gather(c.Get<float>(), a.Get<float>(), off, 0, 64);
}

void BrcbOverlap()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 2048);
    LocalTensor<float> t = a.Get<float>();
    Duplicate(t, 1.0f, 64);
    PipeBarrier<PIPE_V>();
    Brcb(t, t, 1, BrcbRepeatParams(1, 8));  // src and dst share memory
}

void RepeatCrossOverlap()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 4096);
    LocalTensor<float> t = a.Get<float>();
    Duplicate(t, 1.0f, 512);
    PipeBarrier<PIPE_V>();
    Add(t[64], t[64], t, 64, 3, BinaryRepeatParams(1, 1, 1, 8, 8, 8));  // repeat 1 reads what repeat 0 wrote
}

void SelectMode0()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 2048);
    LocalTensor<float> t = a.Get<float>();
    Duplicate(t, 1.0f, 256);
    PipeBarrier<PIPE_V>();
    Select(t, a.Get<uint8_t>()[1024], t, t[64], SELMODE::VSEL_CMPMASK_SPR, 64);
}

// A LocalTensor never bound to a buffer: LocalTensor(){} initialises nothing on the NPU
// (asc-devkit include/basic_api/kernel_tensor.h, impl/basic_api/kernel_tensor_base.h TBuffAddr).
void DefaultLocalSize()
{
    LocalTensor<float> none;
    volatile uint32_t n = none.GetSize();  // garbage on the NPU: never a "no tensor" flag
    (void)n;
}

void DefaultLocalOperand()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 1024);
    LocalTensor<float> a = buf.Get<float>();
    LocalTensor<float> none;
    Duplicate(a, 1.0f, 64);
    PipeBarrier<PIPE_V>();
    Add(none, a, a, 64);  // writes to an indeterminate UB address
}

void DefaultGlobal()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 1, 1024);
    GlobalTensor<float> never;  // GlobalTensor() leaves address_ unset (impl/basic_api/kernel_tensor_impl.h)
    LocalTensor<float> a = in.AllocTensor<float>();
    DataCopy(a, never[64], 64);
}

// Level-2 Gather packs count / 64 (fp32) into a uint8_t repeatTime: 16384 elements wrap to 0 repeats
// (asc-devkit impl/basic_api/kernel_operator_vec_gather_intf_impl.h).
void GatherWrap()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> src, off, dst;
    pipe.InitBuffer(src, 256);
    pipe.InitBuffer(off, 16384 * 4);
    pipe.InitBuffer(dst, 16384 * 4);
    Duplicate(src.Get<float>(), 1.0f, 64);
    Duplicate(off.Get<uint32_t>(), 0u, 16384);
    PipeBarrier<PIPE_V>();
    Gather(dst.Get<float>(), src.Get<float>(), off.Get<uint32_t>(), 0, 16384);
}

// CreateVecIndex writes its first block with scalar SetValue (then syncs S->V itself): after a vector
// write of that block the scalar unit must wait for V first
// (asc-devkit impl/basic_api/dav_c220/kernel_operator_vec_createvecindex_impl.h).
void VecIndexAfterVector()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 1024);
    LocalTensor<int32_t> t = buf.Get<int32_t>();
    Duplicate(t, 7, 64);
    CreateVecIndex(t, 0, 64);  // no SetFlag/WaitFlag<V_S> between the Duplicate and the scalar writes
}

// Select's scalar mode keeps a 32-byte temp at TMP_UB_OFFSET (184 KB): buffers reaching it are over
// the budget (asc-devkit impl/basic_api/dav_c220/kernel_operator_vec_cmpsel_impl.h VselImpl).
void SelectTmpUb()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b;
    pipe.InitBuffer(a, 2048);
    pipe.InitBuffer(b, 184 * 1024);  // reaches 186 KB: over Select's temp
    LocalTensor<float> t = a.Get<float>();
    Duplicate(t, 1.0f, 256);
    PipeBarrier<PIPE_V>();
    Compare(a.Get<uint8_t>()[1024], t, t, CMPMODE::EQ, 64);
    PipeBarrier<PIPE_V>();
    Select(t, a.Get<uint8_t>()[1024], t, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, 64);
}

// The accumulate idiom (dst == src1, a zero repeat stride) lifts only the rule between repeats: inside
// one repeat dst and src1 must still coincide or be disjoint (通用说明和约束.md, 通用地址重叠约束). With
// dstRepStride 0 and src1RepStride 1, repeat 1 reads blocks 1..8 and writes blocks 0..7.
void AccumulateInRepeatOverlap()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 4096);
    LocalTensor<float> t = a.Get<float>();
    Duplicate(t, 1.0f, 1024);
    PipeBarrier<PIPE_V>();
    Add(t, t[512], t, 64, 2, BinaryRepeatParams(1, 1, 1, 0, 8, 1));
}

// DataCopy reads GM at a multiple of the element size: a float at byte 2 is not.
void GmMisaligned()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 1, 1024);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(g_x.data()) + 2), 1024);
    LocalTensor<float> a = in.AllocTensor<float>();
    DataCopy(a, x, 64);
}

// The DataCopyParams form asks the same of the GM address, in both directions (`which`: 0 GM->UB, 1 UB->GM).
void GmMisalignedStrided(int which)
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    TQue<TPosition::VECOUT, 1> out;
    pipe.InitBuffer(in, 1, 1024);
    pipe.InitBuffer(out, 1, 1024);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(g_x.data()) + 2), 1024);
    if (which == 0) {
        LocalTensor<float> a = in.AllocTensor<float>();
        DataCopy(a, x, DataCopyParams(1, 8, 0, 0));
    } else {
        LocalTensor<float> b = out.AllocTensor<float>();
        Duplicate(b, 0.0f, 64);
        SetFlag<HardEvent::V_MTE3>(EVENT_ID0);
        WaitFlag<HardEvent::V_MTE3>(EVENT_ID0);
        DataCopy(x, b, DataCopyParams(1, 8, 0, 0));
    }
}

void GmMisalignedStridedIn() { GmMisalignedStrided(0); }
void GmMisalignedStridedOut() { GmMisalignedStrided(1); }

// DataCopyPad's blockLen is in bytes and must hold whole elements: 10 bytes are 2.5 floats.
void PadBlockLen()
{
    TPipe pipe;
    TBuf<TPosition::VECIN> a;
    pipe.InitBuffer(a, 256);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(g_x.data(), 4096);
    DataCopyPadExtParams<float> pad;
    DataCopyPad(a.Get<float>(), x, DataCopyExtParams(1, 10, 0, 0, 0), pad);
}

// DataCopy(UB->UB): src and dst coincide or are disjoint.
void UbCopyOverlap()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 1024);
    LocalTensor<float> t = a.Get<float>();
    Duplicate(t, 1.0f, 256);
    PipeBarrier<PIPE_V>();
    DataCopy(t[8], t, 64);  // dst = t[8..72) overlaps src = t[0..64)
}

// DataCopyPad pads at most 32 bytes on either side: 9 floats of left padding are 36.
void PadAbove32Bytes()
{
    TPipe pipe;
    TBuf<TPosition::VECIN> a;
    pipe.InitBuffer(a, 256);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(g_x.data(), 4096);
    DataCopyPad(a.Get<float>(), x, DataCopyExtParams(1, 32, 0, 0, 0), DataCopyPadExtParams<float>(true, 9, 0, 0.0f));
}

// HardEvent::MAX names no pipe pair.
void UnknownEvent()
{
    SetFlag<HardEvent::MAX>(EVENT_ID0);
    WaitFlag<HardEvent::MAX>(EVENT_ID0);
}

// Event ids are 0..7 (QUE_MAX_EVENT): id 8 is none, even set and waited for in pairs.
void EventIdRange()
{
    SetFlag<HardEvent::V_S>(8);
    WaitFlag<HardEvent::V_S>(8);
}

// A second SetFlag before the WaitFlag, then the WaitFlag: no flag is left over at the end, the
// double set alone is the error.
void SetTwiceThenWait()
{
    SetFlag<HardEvent::V_MTE3>(EVENT_ID1);
    SetFlag<HardEvent::V_MTE3>(EVENT_ID1);
    WaitFlag<HardEvent::V_MTE3>(EVENT_ID1);
}

// PipeBarrier takes no PIPE_S.
void BarrierPipeS()
{
    PipeBarrier<PIPE_S>();
}

// At most 8 tensors allocated at once on one TPosition: 8 from one VECIN queue and a 9th from another.
void LiveTensorsPerPosition()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> p, q;
    pipe.InitBuffer(p, 8, 32);
    pipe.InitBuffer(q, 1, 32);
    for (int i = 0; i < 8; ++i) p.AllocTensor<float>();
    q.AllocTensor<float>();
}

// EnQue of a tensor already in the queue (depth 2: room for a second one).
void EnQueTwice()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 2> in;
    pipe.InitBuffer(in, 1, 256);
    LocalTensor<float> a = in.AllocTensor<float>();
    in.EnQue(a);
    in.EnQue(a);
}

// FreeTensor of a tensor still in the queue (never DeQue'd).
void FreeQueued()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 1, 256);
    LocalTensor<float> a = in.AllocTensor<float>();
    in.EnQue(a);
    in.FreeTensor(a);
}

void FreeTwice()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 1, 256);
    LocalTensor<float> a = in.AllocTensor<float>();
    in.FreeTensor(a);
    in.FreeTensor(a);
}

void QueueInitTwice()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 1, 256);
    pipe.InitBuffer(in, 1, 256);
}

void QueueZeroBuffers()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 0, 256);
}

// FreeTensor on another queue than the one that handed the tensor out, where that queue's buffer of
// the same number is allocated too.
void FreeToOtherQueue()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> p, q;
    pipe.InitBuffer(p, 1, 256);
    pipe.InitBuffer(q, 1, 256);
    LocalTensor<float> a = p.AllocTensor<float>();
    LocalTensor<float> b = q.AllocTensor<float>();
    q.FreeTensor(a);
}

void TBufInitTwice()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 256);
    pipe.InitBuffer(a, 256);
}

// Get on a TBuf that no InitBuffer set up.
void TBufUninitialised()
{
    TBuf<TPosition::VECCALC> a;
    volatile uint32_t n = a.Get<float>().GetSize();
    (void)n;
}

// operator[] past the end of a LocalTensor (65 of 64 floats; 64, the empty tail, is allowed).
void LocalViewBeyond()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 256);
    LocalTensor<float> v = a.Get<float>()[65];
    (void)v;
}

void GetValueIndex()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 256);
    volatile float v = a.Get<float>().GetValue(64);  // the buffer holds 64 floats
    (void)v;
}

// Scalar access to UB only: a TBuf at A1 (L1) is no VECIN/VECOUT/VECCALC.
void ScalarAccessPosition()
{
    TPipe pipe;
    TBuf<TPosition::A1> a;
    pipe.InitBuffer(a, 256);
    volatile float v = a.Get<float>().GetValue(0);
    (void)v;
}

void GlobalViewBeyond()
{
    GlobalTensor<float> x;
    x.SetGlobalBuffer(g_x.data(), 128);
    GlobalTensor<float> v = x[129];  // 128 elements
    (void)v;
}

// A GlobalTensor set up on a null GM address.
void GlobalNull()
{
    GlobalTensor<float> x;
    x.SetGlobalBuffer(static_cast<float*>(nullptr), 64);
    volatile float v = x.GetValue(0);
    (void)v;
}

void GlobalValueIndex()
{
    GlobalTensor<float> x;
    x.SetGlobalBuffer(g_x.data(), 128);
    volatile float v = x.GetValue(128);  // 128 elements
    (void)v;
}

void GlobalNullCopy()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 1, 256);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(static_cast<float*>(nullptr), 64);
    LocalTensor<float> a = in.AllocTensor<float>();
    DataCopy(a, x, 64);
}

void NegativeCount()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 256);
    Duplicate(a.Get<float>(), 1.0f, -1);
}

// Level 0 with dstBlkStride 0: every block of a repeat would write the same 32 bytes.
void ZeroBlockStride()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b;
    pipe.InitBuffer(a, 256);
    pipe.InitBuffer(b, 256);
    LocalTensor<float> x = a.Get<float>();
    Duplicate(x, 1.0f, 64);
    PipeBarrier<PIPE_V>();
    Add(b.Get<float>(), x, x, 64, 1, BinaryRepeatParams(0, 1, 1, 8, 8, 8));
}

// A continuous mask is 1..64 for fp32.
void MaskBeyondRepeat()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b;
    pipe.InitBuffer(a, 256);
    pipe.InitBuffer(b, 256);
    LocalTensor<float> x = a.Get<float>();
    Duplicate(x, 1.0f, 64);
    PipeBarrier<PIPE_V>();
    Add(b.Get<float>(), x, x, 65, 1, BinaryRepeatParams());
}

// A bitwise mask's mask[1] is 0 for 32-bit types (64 lanes per repeat).
void BitwiseMaskHigh()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b;
    pipe.InitBuffer(a, 256);
    pipe.InitBuffer(b, 256);
    LocalTensor<float> x = a.Get<float>();
    Duplicate(x, 1.0f, 64);
    PipeBarrier<PIPE_V>();
    uint64_t mask[2] = {~0ull, 1ull};
    Add(b.Get<float>(), x, x, mask, 1, BinaryRepeatParams());
}

// A cast between types of one size: dst and src coincide or are disjoint.
void CastSameSizeOverlap()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 1024);
    LocalTensor<float> f = a.Get<float>();
    Duplicate(f, 1.0f, 128);
    PipeBarrier<PIPE_V>();
    Cast(f[8].ReinterpretCast<int32_t>(), f, RoundMode::CAST_RINT, 64);
}

// int32_t compares with CMPMODE::EQ only.
void Int32CompareMode()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 1024);
    LocalTensor<int32_t> t = a.Get<int32_t>();
    Duplicate(t, 1, 64);
    PipeBarrier<PIPE_V>();
    Compare(a.Get<uint8_t>()[512], t, t, CMPMODE::LT, 64);
}

// Counter mode is for the register form of Select alone: another vector instruction in it aborts,
// with no Select after it.
void CounterModeOtherOp()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 256);
    SetMaskCount();
    SetVectorMask<float, MaskMode::COUNTER>(0, 64);
    Duplicate(a.Get<float>(), 1.0f, 64);
    SetMaskNorm();
}

// SetVectorMask<T, MaskMode::COUNTER> outside counter mode (no SetMaskCount before it).
void SetVectorMaskNormal()
{
    SetVectorMask<float, MaskMode::COUNTER>(0, 64);
}

// SetCmpMask loads 16 bytes from a 16-byte aligned address: UB byte 4 is not one.
void CmpMaskMisaligned()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 256);
    LocalTensor<float> c = a.Get<float>();
    Duplicate(c, 0.0f, 64);
    PipeBarrier<PIPE_V>();
    SetCmpMask(c[1]);
}

// SetCmpMask from a tensor of fewer than 16 bytes (the empty tail of a buffer).
void CmpMaskShort()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 256);
    LocalTensor<float> c = a.Get<float>();
    Duplicate(c, 0.0f, 64);
    PipeBarrier<PIPE_V>();
    SetCmpMask(c[64]);
}

void SelectMaskOverlap()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 2048);
    LocalTensor<float> t = a.Get<float>();
    LocalTensor<uint8_t> mask = a.Get<uint8_t>()[1024];
    Duplicate(t, 1.0f, 256);
    PipeBarrier<PIPE_V>();
    Compare(mask, t, t, CMPMODE::EQ, 64);
    PipeBarrier<PIPE_V>();
    Select(t[256], mask, t, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, 64);  // dst (UB bytes 1024..1280) holds selMask
}

// A scalar src1 takes VSEL_TENSOR_SCALAR_MODE, not mode 2.
void SelectModeMismatch()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 2048);
    LocalTensor<float> t = a.Get<float>();
    LocalTensor<uint8_t> mask = a.Get<uint8_t>()[1024];
    Duplicate(t, 1.0f, 256);
    PipeBarrier<PIPE_V>();
    Compare(mask, t, t, CMPMODE::EQ, 64);
    PipeBarrier<PIPE_V>();
    Select(t, mask, t, 0.0f, SELMODE::VSEL_TENSOR_TENSOR_MODE, 64);
}

// Gather: dst shares no memory with src (or srcOffset).
void GatherOverlap()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b;
    pipe.InitBuffer(a, 256);
    pipe.InitBuffer(b, 256);
    LocalTensor<uint32_t> off = b.Get<uint32_t>();
    Duplicate(a.Get<float>(), 1.0f, 64);
    Duplicate(off, 0u, 64);
    PipeBarrier<PIPE_V>();
    Gather(a.Get<float>(), a.Get<float>(), off, 0, 64);
}

// Gather's srcBaseAddr is element-aligned: byte 2 of a float src is not (the offsets make up for
// it, so every address read is aligned).
void GatherBaseMisaligned()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b, c;
    pipe.InitBuffer(a, 256);
    pipe.InitBuffer(b, 256);
    pipe.InitBuffer(c, 256);
    LocalTensor<uint32_t> off = b.Get<uint32_t>();
    Duplicate(a.Get<float>(), 1.0f, 64);
    Duplicate(off, 2u, 64);
    PipeBarrier<PIPE_V>();
    Gather(c.Get<float>(), a.Get<float>(), off, 2, 64);
}

void BrcbZeroBlockStride()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, b;
    pipe.InitBuffer(a, 256);
    pipe.InitBuffer(b, 256);
    LocalTensor<float> t = a.Get<float>();
    Duplicate(t, 1.0f, 64);
    PipeBarrier<PIPE_V>();
    Brcb(b.Get<float>(), t, 1, BrcbRepeatParams(0, 8));
}

// ShiftRight by more bits than a uint32_t has.
void ShiftTooFar()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    pipe.InitBuffer(a, 256);
    LocalTensor<uint32_t> u = a.Get<uint32_t>();
    Duplicate(u, 8u, 64);
    PipeBarrier<PIPE_V>();
    ShiftRight(u, u, 33u, 64);
}

// CreateVecIndex syncs S->V through GetTPipePtr(): with the kernel's TPipe gone there is none.
void VecIndexNoPipe()
{
    TBuf<TPosition::VECCALC> buf;
    {
        TPipe pipe;
        pipe.InitBuffer(buf, 256);
    }
    CreateVecIndex(buf.Get<int32_t>(), 0, 64);
}

// The operands of the Select cases below: 128 floats of 1.0 in t, and the scalar (0.25) the register form
// selects where a mask bit is 0, in the compare-mask register.
void SelectOperands(const LocalTensor<float>& t)
{
    Duplicate(t, 1.0f, 128);
    Duplicate(t[128], 0.25f, 8);
    PipeBarrier<PIPE_V>();
    SetCmpMask(t[128]);
}

// The vector unit waits for a mask that MTE2 loaded.
void WaitForTheMask(TPipe& pipe)
{
    event_t in = static_cast<event_t>(pipe.FetchEventID(HardEvent::MTE2_V));
    SetFlag<HardEvent::MTE2_V>(in);
    WaitFlag<HardEvent::MTE2_V>(in);
}

// The register-form Select of the two cases below over 128 floats of t, in counter mode, and what it
// made of element 0 (a compared bit) and element 100 (one the mask's writer may have left undefined).
void SelectAndShow(TPipe& pipe, const LocalTensor<float>& t, const LocalTensor<uint8_t>& mask)
{
    SetMaskCount();
    SetVectorMask<float, MaskMode::COUNTER>(0, 128);
    Select<float, uint8_t>(t, mask, t, 1, BinaryRepeatParams());
    ResetMask();
    SetMaskNorm();
    event_t e = static_cast<event_t>(pipe.FetchEventID(HardEvent::V_S));
    SetFlag<HardEvent::V_S>(e);
    WaitFlag<HardEvent::V_S>(e);
    std::printf("compared %08x past %08x\n", Bits(t.GetValue(0)), Bits(t.GetValue(100)));
}

// A register-form Select over 128 floats whose mask only a 64-element Compare wrote (`defined`: a
// 128-element one): the selections past the compared bits read mask bytes nothing wrote, which on an NPU
// hold whatever the UB held, so those elements are indeterminate (poisoned), the rest what was selected.
void SelectMaskUndefined(bool defined)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, m;
    pipe.InitBuffer(a, 1024);
    pipe.InitBuffer(m, 64);
    LocalTensor<float> t = a.Get<float>();
    LocalTensor<uint8_t> mask = m.Get<uint8_t>();
    SelectOperands(t);
    Compare(mask, t, t, CMPMODE::EQ, defined ? 128u : 64u);
    PipeBarrier<PIPE_V>();
    SelectAndShow(pipe, t, mask);
}
void SelectMaskUndefinedCase() { SelectMaskUndefined(false); }
// The same with the mask loaded by DMA: 8 bytes (64 bits, all ones) of GM into a VECIN buffer, the
// DataCopyPad's dummy bytes up to the 32-byte block undefined: element 100's bit is one of them.
void SelectMaskDmaDummy()
{
    static std::vector<uint8_t> bits(32, 0xFF);
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    TBuf<TPosition::VECIN> m;
    pipe.InitBuffer(a, 1024);
    pipe.InitBuffer(m, 64);
    GlobalTensor<uint8_t> g;
    g.SetGlobalBuffer(bits.data(), 32);
    LocalTensor<uint8_t> mask = m.Get<uint8_t>();
    DataCopyPad(mask, g, DataCopyParams(1, 8, 0, 0), DataCopyPadParams());
    LocalTensor<float> t = a.Get<float>();
    SelectOperands(t);
    PipeBarrier<PIPE_V>();
    WaitForTheMask(pipe);
    SelectAndShow(pipe, t, mask);
}
void SelectMaskDefinedCase() { SelectMaskUndefined(true); }

// A mask that an instruction computed from mask bytes nothing wrote is no more defined than they were: a
// 64-element Compare, then Not over the 128 bits (`ub_copy`: a UB->UB DataCopy of its 32-byte block into
// another buffer) and a 128-element Select. Element 0's bit came from the Compare (Not: 0, the scalar; the
// copy: 1, src0); element 100's from a byte the Compare never wrote, indeterminate on an NPU.
void SelectMaskDerived(bool ub_copy)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, m, c;
    pipe.InitBuffer(a, 1024);
    pipe.InitBuffer(m, 64);
    pipe.InitBuffer(c, 64);
    LocalTensor<float> t = a.Get<float>();
    LocalTensor<uint8_t> mask = m.Get<uint8_t>(), copy = c.Get<uint8_t>();
    SelectOperands(t);
    Compare(mask, t, t, CMPMODE::EQ, 64u);
    PipeBarrier<PIPE_V>();
    if (ub_copy) {
        DataCopy(copy, mask, 32u);
    } else {
        Not(mask.ReinterpretCast<uint16_t>(), mask.ReinterpretCast<uint16_t>(), 8);
    }
    PipeBarrier<PIPE_V>();
    SelectAndShow(pipe, t, ub_copy ? copy : mask);
}
void SelectMaskNotCase() { SelectMaskDerived(false); }
// A mask a Compare (`scalar`: a Compares) made from source elements nothing wrote: 128 floats of which only
// the first 64 were written, compared with themselves (with 1.0) into 16 mask bytes, then a 128-element
// Select. Element 0's bit compares a 1.0 (1: src0); element 100's compares bytes that hold whatever the UB
// held on an NPU, so its bit, and the element selected, are indeterminate (the poison fill, a NaN, would
// compare to a definite 0: the scalar).
void SelectMaskFromUndefined(bool scalar, uint32_t written = 64)
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, s, m;
    pipe.InitBuffer(a, 1024);
    pipe.InitBuffer(s, 512);
    pipe.InitBuffer(m, 64);
    LocalTensor<float> t = a.Get<float>(), src = s.Get<float>();
    LocalTensor<uint8_t> mask = m.Get<uint8_t>();
    SelectOperands(t);
    Duplicate(src, 1.0f, written);
    PipeBarrier<PIPE_V>();
    if (scalar) {
        Compares(mask, src, 1.0f, CMPMODE::EQ, 128u);
    } else {
        Compare(mask, src, src, CMPMODE::EQ, 128u);
    }
    PipeBarrier<PIPE_V>();
    SelectAndShow(pipe, t, mask);
    if (written % 8 != 0) std::printf("partly compared byte's element %08x\n", Bits(t.GetValue(written / 8 * 8)));
}
void SelectMaskCompareUndefinedCase() { SelectMaskFromUndefined(false); }
// The same with only 60 elements written: mask byte 7 compares elements 56-59 (written) and 60-63 (not).
// Only partly indeterminate, it stays defined, so element 56 is what its bit selects (src0, 1.0), not
// poisoned; element 100's byte is all from unwritten elements, as before.
void SelectMaskComparePartialCase()
{
    SelectMaskFromUndefined(false, 60);
}
// An element a Select poisoned (its mask bit indeterminate) is as indeterminate as the bytes it came from:
// the 128-element Select of SelectMaskUndefined, then a Compare of its output with itself and a second
// Select. Element 100 went through a mask byte nothing wrote, so the second Compare compares whatever it
// holds and the second Select is indeterminate there too, not the scalar that the poison, a NaN, gives.
void SelectMaskChain()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a, m, m2;
    pipe.InitBuffer(a, 1024);
    pipe.InitBuffer(m, 64);
    pipe.InitBuffer(m2, 64);
    LocalTensor<float> t = a.Get<float>();
    LocalTensor<uint8_t> mask = m.Get<uint8_t>(), mask2 = m2.Get<uint8_t>();
    SelectOperands(t);
    Compare(mask, t, t, CMPMODE::EQ, 64u);
    PipeBarrier<PIPE_V>();
    SetMaskCount();
    SetVectorMask<float, MaskMode::COUNTER>(0, 128);
    Select<float, uint8_t>(t, mask, t, 1, BinaryRepeatParams());
    ResetMask();
    SetMaskNorm();
    PipeBarrier<PIPE_V>();
    Compare(mask2, t, t, CMPMODE::EQ, 128u);
    PipeBarrier<PIPE_V>();
    SelectAndShow(pipe, t, mask2);
}
void SelectMaskComparesUndefinedCase() { SelectMaskFromUndefined(true); }
void SelectMaskUbCopyCase() { SelectMaskDerived(true); }

// A queue buffer's AllocTensor makes its bytes undefined again: a mask a 128-element Compare wrote in the
// buffer's first use, then a 64-element Compare in the second, before a 128-element Select: element 100's
// bit is left over from the first use (on an NPU, whatever that use left), indeterminate.
void SelectMaskQueueReuse()
{
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    TQue<TPosition::VECOUT, 1> q;
    pipe.InitBuffer(a, 1024);
    pipe.InitBuffer(q, 1, 64);
    LocalTensor<float> t = a.Get<float>();
    SelectOperands(t);
    for (uint32_t count : {128u, 64u}) {
        LocalTensor<uint8_t> mask = q.AllocTensor<uint8_t>();
        Compare(mask, t, t, CMPMODE::EQ, count);
        PipeBarrier<PIPE_V>();
        if (count == 64u) SelectAndShow(pipe, t, mask);
        q.FreeTensor(mask);
    }
}

// Two GM->UB copies of different mask bytes (all ones, then zeros) into the same 32-byte block with no
// PipeBarrier<PIPE_MTE2> between them: the block holds either's bytes, so every selection over it is
// indeterminate (the poison fill alone, all ones as a mask, would keep src0).
void SelectMaskUnorderedDma()
{
    static std::vector<uint8_t> ones(32, 0xFF), zeros(32, 0);
    TPipe pipe;
    TBuf<TPosition::VECCALC> a;
    TBuf<TPosition::VECIN> m;
    pipe.InitBuffer(a, 1024);
    pipe.InitBuffer(m, 64);
    GlobalTensor<uint8_t> g1, g0;
    g1.SetGlobalBuffer(ones.data(), 32);
    g0.SetGlobalBuffer(zeros.data(), 32);
    LocalTensor<uint8_t> mask = m.Get<uint8_t>();
    DataCopy(mask, g1, 32u);
    DataCopy(mask, g0, 32u);
    LocalTensor<float> t = a.Get<float>();
    SelectOperands(t);
    PipeBarrier<PIPE_V>();
    WaitForTheMask(pipe);
    SelectAndShow(pipe, t, mask);
}

// Two GM->UB copies into overlapping UB bytes, with (`ordered`) or without PipeBarrier<PIPE_MTE2>() between
// them: unordered, the shared bytes hold either copy's data (indeterminate: poisoned), the rest the first's.
void DmaOverlapUb(bool ordered)
{
    TPipe pipe;
    TBuf<TPosition::VECIN> a;
    pipe.InitBuffer(a, 1024);
    std::fill(g_x.begin() + 512, g_x.begin() + 576, 2.0f);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(g_x.data(), 4096);
    LocalTensor<float> t = a.Get<float>();
    DataCopy(t, x, 256);  // ones
    if (ordered) PipeBarrier<PIPE_MTE2>();
    DataCopy(t[64], x[512], 64);  // twos over the first copy's bytes [256, 512)
    event_t e = static_cast<event_t>(pipe.FetchEventID(HardEvent::MTE2_S));
    SetFlag<HardEvent::MTE2_S>(e);
    WaitFlag<HardEvent::MTE2_S>(e);
    std::printf("shared %08x rest %08x\n", Bits(t.GetValue(64)), Bits(t.GetValue(0)));
}
void DmaOverlapUbUnordered() { DmaOverlapUb(false); }
void DmaOverlapUbOrdered() { DmaOverlapUb(true); }

// The same for two UB->GM copies into overlapping GM bytes and PipeBarrier<PIPE_MTE3>().
void DmaOverlapGm(bool ordered)
{
    TPipe pipe;
    TBuf<TPosition::VECOUT> b, c;
    pipe.InitBuffer(b, 1024);
    pipe.InitBuffer(c, 256);
    GlobalTensor<float> y;
    y.SetGlobalBuffer(g_y.data() + 256 * GetBlockIdx(), 256);
    LocalTensor<float> ones = b.Get<float>(), twos = c.Get<float>();
    Duplicate(ones, 1.0f, 256);
    Duplicate(twos, 2.0f, 64);
    event_t e = static_cast<event_t>(pipe.FetchEventID(HardEvent::V_MTE3));
    SetFlag<HardEvent::V_MTE3>(e);
    WaitFlag<HardEvent::V_MTE3>(e);
    DataCopy(y, ones, 256);
    if (ordered) PipeBarrier<PIPE_MTE3>();
    DataCopy(y[8], twos, 64);  // over GM elements [8, 72) of the first copy
    event_t f = static_cast<event_t>(pipe.FetchEventID(HardEvent::MTE3_S));
    SetFlag<HardEvent::MTE3_S>(f);
    WaitFlag<HardEvent::MTE3_S>(f);
    const float* back = y.GetPhyAddr();  // as the host reads it (GetValue: through the data cache, refused)
    std::printf("shared %08x rest %08x\n", Bits(back[8]), Bits(back[0]));
}
void DmaOverlapGmUnordered() { DmaOverlapGm(false); }
void DmaOverlapGmOrdered() { DmaOverlapGm(true); }

// ReleaseEventID gives back only what AllocEventID handed out: here the id a queue's EnQue holds.
void ReleaseQueueId()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 1, 256);
    LocalTensor<float> t = in.AllocTensor<float>();
    in.EnQue(t);  // takes MTE2_V id 0 until its DeQue
    pipe.ReleaseEventID<HardEvent::MTE2_V>(0);
}

// A SetFlag on the event id a queue holds: its EnQue set that flag, and the DeQue waits for it.
void SetQueueId()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 1, 256);
    LocalTensor<float> t = in.AllocTensor<float>();
    in.EnQue(t);  // takes MTE2_V id 0
    SetFlag<HardEvent::MTE2_V>(0);
    WaitFlag<HardEvent::MTE2_V>(0);
    t = in.DeQue<float>();
    in.FreeTensor(t);
}

// FetchEventID reserves nothing: the EnQue below takes the same id and sets the flag a second time
// while the kernel's SetFlag still waits for its WaitFlag. The DeQue gives the id back before that
// WaitFlag, so no other check (WaitFlag on an id a queue holds) catches it in the EnQue check's place.
void EnQueOnPendingFlag()
{
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    pipe.InitBuffer(in, 1, 256);
    event_t e = static_cast<event_t>(pipe.FetchEventID(HardEvent::MTE2_V));
    SetFlag<HardEvent::MTE2_V>(e);
    LocalTensor<float> t = in.AllocTensor<float>();
    in.EnQue(t);
    t = in.DeQue<float>();
    in.FreeTensor(t);
    WaitFlag<HardEvent::MTE2_V>(e);
}

// A vector operand in a TBuf at A1, which is L1 Buffer on dav-2201, not Unified Buffer.
void VectorOperandOutsideUb()
{
    TPipe pipe;
    TBuf<TPosition::A1> a;
    pipe.InitBuffer(a, 256);
    Duplicate(a.Get<float>(), 1.0f, 64);
}

// DataCopyPadExtParams of a 64-bit type pads with 0 only.
std::vector<uint64_t> g_u64(64, 7);
void PadValue64()
{
    TPipe pipe;
    TBuf<TPosition::VECIN> a;
    pipe.InitBuffer(a, 512);
    GlobalTensor<uint64_t> g;
    g.SetGlobalBuffer(g_u64.data(), 64);
    DataCopyPad(a.Get<uint64_t>(), g, DataCopyExtParams(1, 24, 0, 0, 0),
                DataCopyPadExtParams<uint64_t>(true, 0, 1, 5));
}

// ---- the boundary-value tables (emu_boundary_rows.h) ----------------------------------------------
// Every row of asc-devkit's Memory矢量计算接口边界值汇总 (A2/A3) that the emulation implements, fed through
// the count form of its API over one whole repeat of equal elements: each element must carry the row's
// dst, the INF/NAN column or, with ASCEND_RMSNORM_EMU_SATURATE=1, the saturation one. A zero's sign is
// checked; "nan" is any NaN. Casts run in the kernels' modes: CAST_RINT narrowing, CAST_NONE widening.
// Every differing cell is printed (with its table line), then the case aborts.
int g_boundary_bad = 0;

std::vector<std::string> Alternatives(const char* list)
{
    std::vector<std::string> out;
    std::string cur;
    for (const char* c = list;; ++c) {
        if (*c == '/' || *c == '\0') {
            out.push_back(cur);
            cur.clear();
            if (*c == '\0') break;
        } else {
            cur += *c;
        }
    }
    return out;
}

template <typename T>
T BoundaryValue(const std::string& tok)
{
    if constexpr (std::is_integral<T>::value) {
        if (tok == "MIN") return std::numeric_limits<T>::min();
        if (tok == "MAX") return std::numeric_limits<T>::max();
        return static_cast<T>(std::stoll(tok));
    } else {
        float v;
        if (tok == "MIN" || tok == "MAX") {
            const float max = std::is_same<T, half>::value ? 65504.0f
                              : std::is_same<T, bfloat16_t>::value ? 0x1.fep127f
                                                                   : std::numeric_limits<float>::max();
            v = tok == "MIN" ? -max : max;
        } else {
            v = std::strtof(tok.c_str(), nullptr);  // "nan", "inf", "-inf", "-0" included
        }
        if constexpr (std::is_same<T, float>::value) {
            return v;
        } else {
            return T(v);  // exact for every value the tables name
        }
    }
}

template <typename T>
std::string BoundaryShow(T v)
{
    char buf[64];
    if constexpr (std::is_integral<T>::value) {
        std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v));
    } else if constexpr (std::is_same<T, float>::value) {
        std::snprintf(buf, sizeof(buf), "%g (%#010x)", v, Bits(v));
    } else {
        std::snprintf(buf, sizeof(buf), "%g (%#06x)", static_cast<float>(v), v.bits);
    }
    return buf;
}

template <typename T>
bool BoundarySame(T got, const std::string& want)
{
    if constexpr (std::is_integral<T>::value) {
        return got == BoundaryValue<T>(want);
    } else if constexpr (std::is_same<T, float>::value) {
        return want == "nan" ? std::isnan(got) : Bits(got) == Bits(BoundaryValue<T>(want));
    } else {
        return want == "nan" ? std::isnan(static_cast<float>(got)) : got.bits == BoundaryValue<T>(want).bits;
    }
}

template <typename T>
void BoundaryCheck(const BoundaryRow& r, const std::string& a, const std::string& b, const std::string& want,
                   const LocalTensor<T>& out, uint32_t n)
{
    for (uint32_t i = 0; i < n; ++i) {
        const T got = out.GetValue(i);
        if (BoundarySame(got, want)) continue;
        std::printf("boundary: line %d %s %s (%s, %s): element %u is %s, the table says %s\n", r.line, r.api, r.type,
                    a.c_str(), b.c_str(), i, BoundaryShow(got).c_str(), want.c_str());
        ++g_boundary_bad;
        return;
    }
}

// Add .. Mins of T: every src0 alternative with every src1 alternative.
template <typename T>
void BoundaryArith(TPipe& pipe, const LocalTensor<uint8_t>& ub, const BoundaryRow& r, bool sat)
{
    constexpr uint32_t n = 256 / sizeof(T);
    const LocalTensor<T> x = ub.ReinterpretCast<T>(), y = x[n], z = x[2 * n];
    const std::string api = r.api, want = sat ? r.saturation : r.infNan;
    for (const std::string& a : Alternatives(r.src0)) {
        for (const std::string& b : Alternatives(r.src1)) {
            for (uint32_t i = 0; i < n; ++i) {
                x.SetValue(i, BoundaryValue<T>(a));
                y.SetValue(i, BoundaryValue<T>(b));
            }
            Sync<HardEvent::S_V>(pipe);
            const T s = BoundaryValue<T>(b);
            if (api == "Add") Add(z, x, y, n);
            if (api == "Sub") Sub(z, x, y, n);
            if (api == "Mul") Mul(z, x, y, n);
            if (api == "Max") Max(z, x, y, n);
            if (api == "Min") Min(z, x, y, n);
            if (api == "Adds") Adds(z, x, s, n);
            if (api == "Muls") Muls(z, x, s, n);
            if (api == "Maxs") Maxs(z, x, s, n);
            if (api == "Mins") Mins(z, x, s, n);
            if constexpr (!std::is_integral<T>::value) {
                if (api == "Div") Div(z, x, y, n);
            }
            PipeBarrier<PIPE_V>();
            Sync<HardEvent::V_S>(pipe);
            BoundaryCheck(r, a, b, want, z, n);
        }
    }
}

// Compare (two tensors) or Compares (a scalar) in the row's mode: bit i of the mask for element i.
template <typename T>
void BoundaryCompare(TPipe& pipe, const LocalTensor<uint8_t>& ub, const BoundaryRow& r, bool sat)
{
    constexpr uint32_t n = 256 / sizeof(T);
    const LocalTensor<T> x = ub.ReinterpretCast<T>(), y = x[n];
    const LocalTensor<uint8_t> mask = ub[1024];
    const std::string api = r.api, mode = api.substr(api.find('.') + 1);
    const CMPMODE m = mode == "EQ"   ? CMPMODE::EQ
                      : mode == "NE" ? CMPMODE::NE
                      : mode == "LT" ? CMPMODE::LT
                      : mode == "GT" ? CMPMODE::GT
                      : mode == "LE" ? CMPMODE::LE
                                     : CMPMODE::GE;
    const std::vector<std::string> bs = Alternatives(r.src1), wants = Alternatives(sat ? r.saturation : r.infNan);
    for (size_t k = 0; k < bs.size(); ++k) {
        if (wants[k] == "?") continue;
        for (uint32_t i = 0; i < n; ++i) {
            x.SetValue(i, BoundaryValue<T>(r.src0));
            y.SetValue(i, BoundaryValue<T>(bs[k]));
        }
        Sync<HardEvent::S_V>(pipe);
        if (api.rfind("Compares", 0) == 0) {
            Compares(mask, x, BoundaryValue<T>(bs[k]), m, n);
        } else {
            Compare(mask, x, y, m, n);
        }
        PipeBarrier<PIPE_V>();
        Sync<HardEvent::V_S>(pipe);
        for (uint32_t i = 0; i < n; ++i) {
            const int got = (mask.GetValue(i / 8) >> (i % 8)) & 1;
            if (got == std::stoi(wants[k])) continue;
            std::printf("boundary: line %d %s %s (%s, %s): bit %u is %d, the table says %s\n", r.line, r.api, r.type,
                        r.src0, bs[k].c_str(), i, got, wants[k].c_str());
            ++g_boundary_bad;
            break;
        }
    }
}

template <typename S, typename D>
void BoundaryCast(TPipe& pipe, const LocalTensor<uint8_t>& ub, const BoundaryRow& r, bool sat, RoundMode mode)
{
    constexpr uint32_t n = 64;
    const LocalTensor<S> x = ub.ReinterpretCast<S>();
    const LocalTensor<D> z = ub[1024].ReinterpretCast<D>();
    const std::string want = sat ? r.saturation : r.infNan;
    if (want == "?") return;
    for (uint32_t i = 0; i < n; ++i) x.SetValue(i, BoundaryValue<S>(r.src0));
    Sync<HardEvent::S_V>(pipe);
    Cast(z, x, mode, n);
    PipeBarrier<PIPE_V>();
    Sync<HardEvent::V_S>(pipe);
    BoundaryCheck(r, r.src0, "", want, z, n);
}

void Boundary()
{
    if (GetBlockIdx() != 0) return;
    const bool sat = ascend_emu::EnvFlag("ASCEND_RMSNORM_EMU_SATURATE");
    TPipe pipe;
    TBuf<TPosition::VECCALC> buf;
    pipe.InitBuffer(buf, 2048);
    const LocalTensor<uint8_t> ub = buf.Get<uint8_t>();
    for (const BoundaryRow& r : kBoundaryRows) {
        const std::string api = r.api, type = r.type;
        if (api == "Cast") {
            if (type == "half>float") BoundaryCast<half, float>(pipe, ub, r, sat, RoundMode::CAST_NONE);
            if (type == "bfloat16_t>float") BoundaryCast<bfloat16_t, float>(pipe, ub, r, sat, RoundMode::CAST_NONE);
            if (type == "float>half") BoundaryCast<float, half>(pipe, ub, r, sat, RoundMode::CAST_RINT);
            if (type == "float>bfloat16_t") BoundaryCast<float, bfloat16_t>(pipe, ub, r, sat, RoundMode::CAST_RINT);
            if (type == "float>int32_t") BoundaryCast<float, int32_t>(pipe, ub, r, sat, RoundMode::CAST_RINT);
            if (type == "int32_t>float") BoundaryCast<int32_t, float>(pipe, ub, r, sat, RoundMode::CAST_RINT);
        } else if (api.rfind("Compare", 0) == 0) {
            if (type == "half") BoundaryCompare<half>(pipe, ub, r, sat);
            if (type == "float") BoundaryCompare<float>(pipe, ub, r, sat);
            if (type == "int32_t") BoundaryCompare<int32_t>(pipe, ub, r, sat);
        } else {
            if (type == "half") BoundaryArith<half>(pipe, ub, r, sat);
            if (type == "float") BoundaryArith<float>(pipe, ub, r, sat);
            if (type == "int16_t") BoundaryArith<int16_t>(pipe, ub, r, sat);
            if (type == "int32_t") BoundaryArith<int32_t>(pipe, ub, r, sat);
        }
    }
    std::fflush(stdout);
    if (g_boundary_bad != 0) std::abort();
}

}  // namespace

int main(int argc, char** argv)
{
    std::map<std::string, std::function<void()>> cases = {
        {"valid", Valid},
        {"semantics", Semantics},
        {"boundary", Boundary},
        {"gm_race", GmRace},
        {"gm_read_back", GmReadBack},
        {"gm_read_back_second_write", GmReadBackSecondWrite},
        {"gm_write_after_read", GmWriteAfterRead},
        {"gm_write_after_other_block_read", GmWriteAfterOtherBlockRead},
        {"gm_scalar_read_after_dma_write", GmScalarReadAfterDmaWrite},
        {"gm_scalar_write_then_dma_read", GmScalarWriteThenDmaRead},
        {"gm_scalar_write_shared_line", GmScalarWriteSharedLine},
        {"gm_dma_write_after_other_block_scalar_read", GmDmaWriteAfterOtherBlockScalarRead},
        {"gm_scalar_write_after_other_block_dma_read", GmScalarWriteAfterOtherBlockDmaRead},
        {"gm_scalar_write_after_other_block_scalar_read", GmScalarWriteAfterOtherBlockScalarRead},
        {"compare_count", CompareCount},
        {"gather_bounds", GatherBounds},
        {"brcb_overlap", BrcbOverlap},
        {"repeat_cross_overlap", RepeatCrossOverlap},
        {"select_mode0", SelectMode0},
        {"ub_capacity", UbCapacity},
        {"ub_alignment", UbAlignment},
        {"datacopy_length", DataCopyLength},
        {"datacopy_empty", DataCopyEmpty},
        {"repeat_range", RepeatRange},
        {"scalar_repeat_range", ScalarRepeatRange},
        {"brcb_repeat_range", BrcbRepeatRange},
        {"burst_count", BurstCount},
        {"local_bounds", LocalBounds},
        {"global_bounds", GlobalBounds},
        {"deque_before_enque", DeQueBeforeEnQue},
        {"alloc_beyond_buffers", AllocBeyondBuffers},
        {"enque_beyond_depth", EnQueBeyondDepth},
        {"free_foreign", FreeForeign},
        {"missing_mte2_v", MissingMte2V},
        {"missing_v_barrier", MissingVBarrier},
        {"missing_v_s", MissingVS},
        {"missing_v_mte3", MissingVMte3},
        {"veccalc_dma", VeccalcDma},
        {"aligned_to_vecout", AlignedToVecout},
        {"wait_without_set", WaitWithoutSet},
        {"double_set", DoubleSet},
        {"leftover_flag", LeftoverFlag},
        {"leftover_enque", LeftoverEnQue},
        {"cast_mode_bf16", CastModeBf16},
        {"widening_in_place", WideningInPlace},
        {"partial_overlap", PartialOverlap},
        {"second_pipe", SecondPipe},
        {"default_local_size", DefaultLocalSize},
        {"default_local_operand", DefaultLocalOperand},
        {"default_global", DefaultGlobal},
        {"gather_wrap", GatherWrap},
        {"vec_index_after_vector", VecIndexAfterVector},
        {"select_tmp_ub", SelectTmpUb},
        {"cmpmask_unset", CmpMaskUnset},
        {"cmpmask_no_barrier", CmpMaskNoBarrier},
        {"cmpmask_reloaded_early", CmpMaskReloadedEarly},
        {"vector_mask_unknown", VectorMaskUnknown},
        {"cmpmask_address", CmpMaskAddress},
        {"vector_count_unset", VectorCountUnset},
        {"fetch_twice_before_wait", FetchTwiceBeforeWait},
        {"queue_event_ids_exhausted", QueueEventIdsExhausted},
        {"buffers_per_queue", BuffersPerQueue},
        {"compare_overlap", CompareOverlap},
        {"pad_value", PadValue},
        {"datacopy_wrap", DataCopyWrap},
        {"narrowing_in_place", NarrowingInPlace},
        {"zero_length_buffer", ZeroLengthBuffer},
        {"tbuf_get_zero", TBufGetZero},
        {"accumulate_in_repeat_overlap", AccumulateInRepeatOverlap},
        {"gm_misaligned", GmMisaligned},
        {"gm_misaligned_strided_in", GmMisalignedStridedIn},
        {"gm_misaligned_strided_out", GmMisalignedStridedOut},
        {"pad_block_len", PadBlockLen},
        {"ub_copy_overlap", UbCopyOverlap},
        {"pad_above_32_bytes", PadAbove32Bytes},
        {"unknown_event", UnknownEvent},
        {"event_id_range", EventIdRange},
        {"set_twice_then_wait", SetTwiceThenWait},
        {"barrier_pipe_s", BarrierPipeS},
        {"live_tensors_per_position", LiveTensorsPerPosition},
        {"enque_twice", EnQueTwice},
        {"free_queued", FreeQueued},
        {"free_twice", FreeTwice},
        {"queue_init_twice", QueueInitTwice},
        {"queue_zero_buffers", QueueZeroBuffers},
        {"free_to_other_queue", FreeToOtherQueue},
        {"tbuf_init_twice", TBufInitTwice},
        {"tbuf_uninitialised", TBufUninitialised},
        {"local_view_beyond", LocalViewBeyond},
        {"get_value_index", GetValueIndex},
        {"scalar_access_position", ScalarAccessPosition},
        {"global_view_beyond", GlobalViewBeyond},
        {"global_null", GlobalNull},
        {"global_value_index", GlobalValueIndex},
        {"global_null_copy", GlobalNullCopy},
        {"negative_count", NegativeCount},
        {"zero_block_stride", ZeroBlockStride},
        {"mask_beyond_repeat", MaskBeyondRepeat},
        {"bitwise_mask_high", BitwiseMaskHigh},
        {"cast_same_size_overlap", CastSameSizeOverlap},
        {"int32_compare_mode", Int32CompareMode},
        {"register_select_repeat", RegisterSelectRepeat},
        {"register_select_repeat_wrap", RegisterSelectRepeatWrap},
        {"register_select_count_zero", RegisterSelectCountZero},
        {"register_select_after_reset_mask", RegisterSelectAfterResetMask},
        {"counter_mode_other_op", CounterModeOtherOp},
        {"set_vector_mask_normal", SetVectorMaskNormal},
        {"cmpmask_misaligned", CmpMaskMisaligned},
        {"cmpmask_short", CmpMaskShort},
        {"select_mask_overlap", SelectMaskOverlap},
        {"select_mode_mismatch", SelectModeMismatch},
        {"gather_overlap", GatherOverlap},
        {"gather_base_misaligned", GatherBaseMisaligned},
        {"brcb_zero_block_stride", BrcbZeroBlockStride},
        {"shift_too_far", ShiftTooFar},
        {"vec_index_no_pipe", VecIndexNoPipe},
        {"select_mask_undefined", SelectMaskUndefinedCase},
        {"select_mask_undefined_defined", SelectMaskDefinedCase},
        {"select_mask_dma_dummy", SelectMaskDmaDummy},
        {"select_mask_not", SelectMaskNotCase},
        {"select_mask_ub_copy", SelectMaskUbCopyCase},
        {"select_mask_compare_undefined", SelectMaskCompareUndefinedCase},
        {"select_mask_compare_partial", SelectMaskComparePartialCase},
        {"select_mask_compares_undefined", SelectMaskComparesUndefinedCase},
        {"select_mask_chain", SelectMaskChain},
        {"select_mask_queue_reuse", SelectMaskQueueReuse},
        {"select_mask_unordered_dma", SelectMaskUnorderedDma},
        {"dma_overlap_ub", DmaOverlapUbUnordered},
        {"dma_overlap_ub_ordered", DmaOverlapUbOrdered},
        {"dma_overlap_gm", DmaOverlapGmUnordered},
        {"dma_overlap_gm_ordered", DmaOverlapGmOrdered},
        {"release_queue_id", ReleaseQueueId},
        {"set_queue_id", SetQueueId},
        {"enque_on_pending_flag", EnQueOnPendingFlag},
        {"vector_operand_outside_ub", VectorOperandOutsideUb},
        {"pad_value_64", PadValue64},
    };
    if (argc == 2 && std::strcmp(argv[1], "list") == 0) {
        for (auto& c : cases) std::printf("%s\n", c.first.c_str());
        return 0;
    }
    if (argc == 2 && std::strcmp(argv[1], "block_dim") == 0) {
        ascend_emu::Launch("block_dim", 0, [] {});
        return 0;
    }
    if (argc == 2 && std::strcmp(argv[1], "outside_launch") == 0) {
        TPipe pipe;  // an Ascend C API called with no kernel launched
        return 0;
    }
    auto it = argc == 2 ? cases.find(argv[1]) : cases.end();
    if (it == cases.end()) {
        std::fprintf(stderr, "usage: emu_rules <case>|list\n");
        return 2;
    }
    ascend_emu::Launch(argv[1], 2, it->second);
    std::printf("completed\n");
    return 0;
}
