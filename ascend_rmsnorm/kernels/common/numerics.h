// ascend-rmsnorm: the numerics contract on the device: canonical NaNs, the fold-and-halve trees, the
// rstd's integer first guess and Newton steps, the per-row broadcasts. The file to diff against the torch
// path (backends/torch.py) and the oracle (tests/support/oracle.py).

#ifndef ASCEND_RMSNORM_COMMON_NUMERICS_H_
#define ASCEND_RMSNORM_COMMON_NUMERICS_H_

#include "constants.h"
#include "scalar.h"

namespace rmsnorm {

// ---- vector building blocks -------------------------------------------------------------------

// ---- the compare-mask register ------------------------------------------------------------------
// Select's scalar forms load the scalar into the compare-mask register behind two barriers of their own
// each time; the kernels load it themselves instead: the canonical NaN, once per block (HoldNan), which
// every Canon reads, and +0 inside the rstd steps only (RstdStep), which put the NaN back. A SetCmpMask follows a barrier
// after the last Select that read the register, and a barrier follows it before the next.
//
// A kernel whose outputs are 16-bit selects their NaNs after the cast, over half as many bytes
// (CanonCast), so its register holds x's 16-bit NaN instead, and the fp32 one only where an fp32 Select
// needs it (the rstd's, an fp32 dw). Both sit in one 32-byte NaN block (NanBlock): the fp32 NaN in its
// first 16 bytes, the 16-bit one in its last 16, each half a whole register load (SetCmpMask reads 16
// bytes at a 16-byte boundary). Every lane of a half holds its NaN, so the Select's scalar is that NaN
// whichever of the register's lanes it is taken from.

// The NaN block: sixteen 16-bit NaNs (nan16; 0: the fp32 NaN's upper half), then the fp32 NaN over the
// first four pairs. Its two writes overlap, so a barrier orders them; the caller's next barrier orders
// the block before its first SetCmpMask.
__aicore__ inline void NanBlock(const LocalTensor<float>& blk, uint16_t nan16)
{
    Duplicate(blk.ReinterpretCast<uint16_t>(), nan16, 16);
    PipeBarrier<PIPE_V>();
    Duplicate(blk.ReinterpretCast<uint32_t>(), kNanBits, 4);
}
// The canonical NaN of 16-bit T (the NaN block's narrow half); 0 for fp32 T, which has none.
template <typename T>
__aicore__ inline constexpr uint16_t NanBits16()
{
    return IsSame<T, half>::value ? kNanBitsHalf : (IsSame<T, float>::value ? 0 : kNanBitsBf16);
}
// The register load of the block's fp32 NaN, or (narrow) of its 16-bit one.
__aicore__ inline LocalTensor<float> NanOf(const LocalTensor<float>& blk, bool narrow) { return narrow ? blk[4] : blk; }

// The NaN block in `nan` (nan16: x's 16-bit NaN, 0 for none), the fp32 NaN (or, narrow, the 16-bit
// one) loaded into the register; the caller's next barrier orders it before the first Canon.
__aicore__ inline void HoldNan(const LocalTensor<float>& nan, uint16_t nan16 = 0, bool narrow = false)
{
    NanBlock(nan, nan16);
    PipeBarrier<PIPE_V>();
    SetCmpMask(NanOf(nan, narrow));
}

// dst[i] = src[i] for i < count where bit i of mask is 1, else the register's value: the register form
// of Select, run as the count form runs its own vsel (counter mode, the count as the vector mask, one
// repeat, then normal mode and every lane again), without its Duplicate, set_cmpmask and barriers.
// E: float, or half for any 16-bit data (the select moves bits).
template <typename E>
__aicore__ inline void SelectHeld(const LocalTensor<E>& dst, const LocalTensor<uint8_t>& mask, const LocalTensor<E>& src,
                                  uint32_t count)
{
    SetMaskCount();
    SetVectorMask<E, MaskMode::COUNTER>(0, count);
    Select<E, uint8_t>(dst, mask, src, 1, BinaryRepeatParams());
    ResetMask();
    SetMaskNorm();
}

// Every NaN of buf[0, count) (count a multiple of 64) becomes the canonical quiet NaN (HoldNan's).
// Canon in its two barrier windows: step 0 marks the non-NaNs (x == x), step 1 replaces the rest.
__aicore__ inline void CanonStep(int32_t step, const LocalTensor<float>& buf, const LocalTensor<uint8_t>& mask, uint32_t count)
{
    if (step == 0) {
        Compare(mask, buf, buf, CMPMODE::EQ, count);
    } else {
        SelectHeld(buf, mask, buf, count);
    }
}
__aicore__ inline void Canon(const LocalTensor<float>& buf, const LocalTensor<uint8_t>& mask, uint32_t count)
{
    CanonStep(0, buf, mask, count);
    PipeBarrier<PIPE_V>();
    CanonStep(1, buf, mask, count);
    PipeBarrier<PIPE_V>();
}

// dst[0, cnt) = buf cast to 16-bit T (CAST_RINT), every NaN the register's 16-bit NaN (the NaN block's
// narrow half): the same bits as Canon and then the cast, since the cast of the fp32 NaN is that NaN,
// with the select over 16-bit elements and one barrier window fewer. Step 0 finds the NaNs of
// buf[0, canon) (canon: cnt rounded up to 64) beside the cast, which reads the same buf; step 1 puts
// the NaN over the cast's NaNs. No barrier after step 1, as none followed the cast. `split` (the
// backward's lag): the cast is step 1, in a window of its own, and the select step 2.
template <typename T>
__aicore__ inline void CanonCastStep(int32_t step, const LocalTensor<T>& dst, const LocalTensor<float>& buf,
                                     const LocalTensor<uint8_t>& mask, uint32_t canon, uint32_t cnt, bool split = false)
{
    if (step == 0) {
        Compare(mask, buf, buf, CMPMODE::EQ, canon);
        if (!split) Cast(dst, buf, RoundMode::CAST_RINT, cnt);
    } else if (split && step == 1) {
        Cast(dst, buf, RoundMode::CAST_RINT, cnt);
    } else {
        const LocalTensor<half> bits = dst.template ReinterpretCast<half>();
        SelectHeld(bits, mask, bits, cnt);
    }
}
template <typename T>
__aicore__ inline void CanonCast(const LocalTensor<T>& dst, const LocalTensor<float>& buf,
                                 const LocalTensor<uint8_t>& mask, uint32_t canon, uint32_t cnt)
{
    CanonCastStep(0, dst, buf, mask, canon, cnt);
    PipeBarrier<PIPE_V>();
    CanonCastStep(1, dst, buf, mask, canon, cnt);
}

// The distance of a tile's first tree level, when that level is above the 8 lanes (it is then added
// while the squares are made: q[j] = s[j] + s[h + j], j < len - h); else len (nothing fused).
__aicore__ inline int32_t FusedHalf(int32_t len)
{
    if (len <= 8) return len;
    const int32_t b = Pow2Floor(len);
    const int32_t h = b == len ? b / 2 : b;
    return h >= 8 ? h : len;
}

// Where a piece of a row that starts at element `at` sits in the fp32 work buffers. Every vector
// operand starts on a 32-byte block, so a 16-bit source is widened from the block holding `at`
// (16 elements) and the piece lands Lead(at) elements into its fp32 copy. Pieces start at multiples
// of 8 (the tree's halves are powers of two >= 8, sub-tiles multiples of 256), so the lead is 0 or 8:
// 8 only for the second half of a 9..16-element tile, whose fp32 copy at 8 is 32 bytes in.
__aicore__ inline uint32_t Lead(int32_t at) { return static_cast<uint32_t>(at % 16); }

// q holds b elements (a power of two >= 8): halve it to 8 lanes.
__aicore__ inline void HalveToLanes(const LocalTensor<float>& q, int32_t b)
{
    while (b > 8) {
        b >>= 1;
        Add(q, q, q[b], b);
        PipeBarrier<PIPE_V>();
    }
}

__aicore__ inline BinaryRepeatParams Strides(uint8_t dBlk, uint8_t s0Blk, uint8_t s1Blk, uint8_t dRep, uint8_t s0Rep,
                                             uint8_t s1Rep)
{
    return BinaryRepeatParams(dBlk, s0Blk, s1Blk, dRep, s0Rep, s1Rep);
}

// The levels of the fold-and-halve tree of n elements down to 8 lanes.
__aicore__ inline int32_t TreeSteps(int32_t n)
{
    if (n < 8) return 0;
    int32_t b = Pow2Floor(n), steps = b < n ? 1 : 0;
    while (b > 8) {
        b >>= 1;
        ++steps;
    }
    return steps;
}

// Step k of the fold-and-halve tree of n elements down to 8 lanes (docs/design.md §3 item 1; nothing
// below 8: the missing lanes are the -0 cell the gather reads): (offset of the second operand, count);
// count 0 when n has no step k.
__aicore__ inline void TreeStep(int32_t n, int32_t k, int32_t& off, int32_t& cnt)
{
    cnt = 0;
    if (n < 8) return;
    int32_t b = Pow2Floor(n);
    if (b < n) {
        if (k == 0) {
            off = b;
            cnt = n - b;
            return;
        }
        --k;
    }
    while (b > 8) {
        b >>= 1;
        if (k == 0) {
            off = b;
            cnt = b;
            return;
        }
        --k;
    }
}

// Rows at a pitch of `rep` blocks: q[r][0, cnt) += q[r][off, off + cnt) for `rows` rows, one level-0
// Add per 64-column stripe (the stripes of one level are independent: one barrier after them).
__aicore__ inline void StripeAdd(const LocalTensor<float>& q, uint32_t off, uint32_t cnt, int32_t rows, uint8_t rep,
                                 bool barrier = true)
{
    for (uint32_t s = 0; s < cnt; s += 64) {
        const uint64_t m = cnt - s < 64 ? cnt - s : 64;
        Add(q[s], q[s], q[off + s], m, static_cast<uint8_t>(rows), Strides(1, 1, 1, rep, rep, rep));
    }
    if (barrier) PipeBarrier<PIPE_V>();
}

// Level k of the tree of every row of the group (TreeStep's k; no barrier).
__aicore__ inline void StripeTreeLevel(const LocalTensor<float>& q, int32_t n, int32_t rows, uint8_t rep, int32_t k)
{
    int32_t off = 0, cnt = 0;
    TreeStep(n, k, off, cnt);
    if (cnt > 0) StripeAdd(q, static_cast<uint32_t>(off), static_cast<uint32_t>(cnt), rows, rep, false);
}

// dst[r][c] = src[r][c] * f[r] for the group's rows, f[r] one 32-byte block per row (Brcb's output).
__aicore__ inline void StripeMulB(const LocalTensor<float>& dst, const LocalTensor<float>& src, const LocalTensor<float>& f,
                                  uint32_t n, int32_t rows, uint8_t rep, bool barrier = true)
{
    for (uint32_t s = 0; s < n; s += 64) {
        const uint64_t m = n - s < 64 ? n - s : 64;
        Mul(dst[s], src[s], f, m, static_cast<uint8_t>(rows), Strides(1, 1, 0, rep, rep, 1));
    }
    if (barrier) PipeBarrier<PIPE_V>();
}

// dst[r][c] = src[r][c] * w[c] for the group's rows.
__aicore__ inline void StripeMulW(const LocalTensor<float>& dst, const LocalTensor<float>& src, const LocalTensor<float>& w,
                                  uint32_t n, int32_t rows, uint8_t rep, bool barrier = true)
{
    for (uint32_t s = 0; s < n; s += 64) {
        const uint64_t m = n - s < 64 ? n - s : 64;
        Mul(dst[s], src[s], w[s], m, static_cast<uint8_t>(rows), Strides(1, 1, 1, rep, rep, 0));
    }
    if (barrier) PipeBarrier<PIPE_V>();
}

// dw[c] = ((dw[c] + p[0][c]) + p[1][c]) + ... for the group's rows in order: the accumulate idiom
// (dst == src1, both with repeat stride 0), one instruction per stripe (no barrier).
__aicore__ inline void StripeAccumulate(const LocalTensor<float>& acc, const LocalTensor<float>& p, uint32_t n, int32_t rows,
                                        uint8_t rep)
{
    for (uint32_t s = 0; s < n; s += 64) {
        const uint64_t m = n - s < 64 ? n - s : 64;
        Add(acc[s], p[s], acc[s], m, static_cast<uint8_t>(rows), Strides(1, 1, 1, 0, rep, 0));
    }
}

// dst[i] = src[i] * f for i < len, f one 32-byte block holding the factor (a row of Brcb's output).
__aicore__ inline void RowMulB(const LocalTensor<float>& dst, const LocalTensor<float>& src, const LocalTensor<float>& f,
                               uint32_t len)
{
    const uint32_t full = len / 64, tail = len % 64;
    for (uint32_t r0 = 0; r0 < full; r0 += kMaxRepeat) {
        const uint32_t n = full - r0 < static_cast<uint32_t>(kMaxRepeat) ? full - r0 : kMaxRepeat;
        Mul(dst[r0 * 64], src[r0 * 64], f, 64, static_cast<uint8_t>(n), Strides(1, 1, 0, 8, 8, 0));
    }
    if (tail != 0) Mul(dst[full * 64], src[full * 64], f, tail, 1, Strides(1, 1, 0, 8, 8, 0));
}

// The per-row vectors of the rstd computation (each gv elements).
struct RowVecs {
    LocalTensor<float> a, y, t, h, run, nan, zero;  // nan (NanBlock), zero: one 32-byte block each
    LocalTensor<uint32_t> u;
    LocalTensor<float> c15;
    LocalTensor<int32_t> magic;
    LocalTensor<uint8_t> maskA, mask;
};

// The lane-major gather of every lane slot, then the last three tree levels and the tiles left to
// right: the row sums in l[0, gp). src holds the lanes (and the -0 cell); off the byte offsets. One
// step per barrier window (LaneReduceStep), so a caller can issue them beside independent work.
__aicore__ inline int32_t LaneReduceSteps(int32_t tiles) { return 3 + tiles; }
__aicore__ inline void LaneReduceStep(const LocalTensor<float>& l, const LocalTensor<float>& src,
                                      const LocalTensor<uint32_t>& off, int32_t J, int32_t gp, int32_t s)
{
    if (s == 0) {
        Gather(l, src, off, 0, static_cast<uint32_t>(8 * J));
    } else if (s < 4) {  // lanes k and k + 4, then k + 2, then k + 1
        const int32_t half = (4 >> (s - 1)) * J;
        Add(l, l, l[half], half);
    } else {  // tile s - 3
        Add(l, l, l[(s - 3) * gp], gp);
    }
}
__aicore__ inline void LaneReduce(const LocalTensor<float>& l, const LocalTensor<float>& src, const LocalTensor<uint32_t>& off,
                                  int32_t J, int32_t tiles, int32_t gp)
{
    for (int32_t s = 0; s < LaneReduceSteps(tiles); ++s) {
        LaneReduceStep(l, src, off, J, gp, s);
        PipeBarrier<PIPE_V>();
    }
}

// rstd of every row from its sum of squares s[0, gp): a = s*invH + eps, the integer first guess,
// three Newton steps, +0 where a is +inf (into v.y), the canonical NaN (into out[0, gv)). The mask
// "a is not +inf" is EQ with +inf, then Not: A2/A3's Compares gives 0 for NE with a NaN operand (not
// IEEE's 1), and EQ gives 0 for a NaN of any sign or payload, so a NaN row keeps y, its NaN
// (docs/design.md, "rstd on the vector unit"). The register holds +0 for the first select (loaded
// beside the last Newton step) and the NaN again from the second on. One step per barrier window,
// kRstdSteps of them, so a caller can issue them beside independent work (fwd/forward_base.h
// ChainStep, RstdDone): s is read in step 0 only.
constexpr int32_t kRstdSteps = 7 + 4 * kNewtonSteps;
__aicore__ inline void RstdStep(int32_t k, const LocalTensor<float>& s, const LocalTensor<float>& out, const RowVecs& v,
                                int32_t gp, int32_t gv, float invH, float eps)
{
    const int32_t newton = k - 4;  // Newton step newton / 4, its op newton % 4
    if (k == 0) {
        Muls(v.a, s, invH, gp);
    } else if (k == 1) {
        Adds(v.a, v.a, eps, gp);
    } else if (k == 2) {
        RMSNORM_COMPARES(v.maskA, v.a, BitsFloat(kInfBits), CMPMODE::EQ, static_cast<uint32_t>(gv));
        ShiftRight(v.u, v.a.ReinterpretCast<uint32_t>(), 1u, gp);
        Muls(v.h, v.a, 0.5f, gp);
    } else if (k == 3) {
        Sub(v.y.ReinterpretCast<int32_t>(), v.magic, v.u.ReinterpretCast<int32_t>(), gp);
        Not(v.maskA.ReinterpretCast<uint16_t>(), v.maskA.ReinterpretCast<uint16_t>(), gv / 16);  // a != +inf, NaN too
    } else if (newton < 4 * kNewtonSteps) {
        if (newton % 4 == 0) {
            Mul(v.t, v.y, v.y, gp);
        } else if (newton % 4 == 1) {
            Mul(v.t, v.h, v.t, gp);
        } else if (newton % 4 == 2) {
            Sub(v.t, v.c15, v.t, gp);
        } else {
            Mul(v.y, v.y, v.t, gp);
            if (newton / 4 == kNewtonSteps - 1) SetCmpMask(v.zero);
        }
    } else if (newton == 4 * kNewtonSteps) {
        SelectHeld(v.y, v.maskA, v.y, static_cast<uint32_t>(gv));
    } else if (newton == 4 * kNewtonSteps + 1) {
        Compare(v.mask, v.y, v.y, CMPMODE::EQ, static_cast<uint32_t>(gv));
        SetCmpMask(v.nan);
    } else {
        SelectHeld(out, v.mask, v.y, static_cast<uint32_t>(gv));
    }
}
// The fold-and-halve tree of every segment of a group, level by level: segment (r, t) is tile t
// of row r, at q[r*pitch + t*kTile], kTile elements long (the last tile of a row: lastLen). One
// Add per segment and level, one barrier per level: the segments' trees are independent.
__aicore__ inline int32_t SegTreeLevels(int32_t tiles, int32_t lastLen)
{
    const int32_t full = tiles > 1 ? kTile : lastLen;
    return TreeSteps(full) > TreeSteps(lastLen) ? TreeSteps(full) : TreeSteps(lastLen);
}
// Level k of every segment's tree (no barrier).
__aicore__ inline void SegTreeLevel(const LocalTensor<float>& q, int32_t rows, uint32_t pitch, int32_t tiles, int32_t lastLen,
                                    int32_t k)
{
    for (int32_t t = 0; t < tiles; ++t) {
        int32_t off = 0, cnt = 0;
        TreeStep(t == tiles - 1 ? lastLen : kTile, k, off, cnt);
        if (cnt == 0) continue;
        for (int32_t r = 0; r < rows; ++r) {
            const uint32_t at = r * pitch + t * kTile;
            Add(q[at], q[at], q[at + off], cnt);
        }
    }
}

// idx[i] = i for i < n (n a multiple of 8, at most 255 repeats), with vector ops only: zeros, then bit k
// of every index added under a bitwise mask (six masked Adds give 0..63), then each repeat of 64 from
// the one before. (CreateVecIndex writes its first block with eight scalar stores and then waits S->V.)
__aicore__ inline void Iota(const LocalTensor<int32_t>& idx, uint32_t n)
{
    const uint32_t first = n < 64 ? n : 64;
    const uint64_t lanes = first == 64 ? ~0ull : (1ull << first) - 1;
    const uint64_t bit[6] = {0xAAAAAAAAAAAAAAAAull, 0xCCCCCCCCCCCCCCCCull, 0xF0F0F0F0F0F0F0F0ull,
                             0xFF00FF00FF00FF00ull, 0xFFFF0000FFFF0000ull, 0xFFFFFFFF00000000ull};
    Duplicate(idx, 0, static_cast<int32_t>(first));
    PipeBarrier<PIPE_V>();
    for (int32_t k = 0; (1u << k) < first; ++k) {
        uint64_t mask[2] = {bit[k] & lanes, 0};
        Adds(idx, idx, static_cast<int32_t>(1 << k), mask, 1, UnaryRepeatParams());
        PipeBarrier<PIPE_V>();
    }
    for (uint32_t r = 64; r < n; r += 64) {
        const uint64_t m = n - r < 64 ? n - r : 64;
        Adds(idx[r], idx[r - 64], 64, m, 1, UnaryRepeatParams());
        PipeBarrier<PIPE_V>();
    }
}

// Byte offsets of the lane gather of a group, built once per block with vector integer ops: slot
// j = t*gp + r, lane k reads element r*pitch + t*kTile + k of the work buffer; the lanes a short last
// tile does not have (lastLen < 8) read the -0 cell at `cell` bytes; slots of rows past G read it where
// their offset reaches it (Mins), else the work buffer's padding before it: sums no output uses.
__aicore__ inline void OffsetsRows(const LocalTensor<int32_t>& off, const LocalTensor<int32_t>& tmp, int32_t gp,
                                   int32_t tiles, uint32_t pitch, int32_t lastLen, int32_t cell)
{
    const int32_t J = tiles * gp;
    Iota(tmp, static_cast<uint32_t>(gp));
    Muls(tmp, tmp, static_cast<int32_t>(4 * pitch), gp);
    PipeBarrier<PIPE_V>();
    for (int32_t k = 0; k < 8; ++k) {
        for (int32_t t = 0; t < tiles; ++t) {
            if (t == tiles - 1 && k >= lastLen) {
                Duplicate(off[k * J + t * gp], cell, gp);
            } else {
                Adds(off[k * J + t * gp], tmp, 4 * (t * kTile + k), gp);
            }
        }
    }
    PipeBarrier<PIPE_V>();
    Mins(off, off, cell, 8 * J);  // rows past G: every valid offset is below the cell
    PipeBarrier<PIPE_V>();
}

// Lanes copied block by block (slot j = tile * gp + row holds its 8 lanes at src[8j]); the last tile's
// lanes past `lastLen` (< 8) read the cell.
__aicore__ inline void OffsetsPacked(const LocalTensor<int32_t>& off, const LocalTensor<int32_t>& tmp, int32_t J, int32_t gp,
                                     int32_t tiles, int32_t lastLen, int32_t cell)
{
    Iota(tmp, static_cast<uint32_t>(J));
    Muls(tmp, tmp, 32, J);
    PipeBarrier<PIPE_V>();
    for (int32_t k = 0; k < 8; ++k) Adds(off[k * J], tmp, 4 * k, J);
    PipeBarrier<PIPE_V>();
    if (lastLen < 8) {
        for (int32_t k = lastLen; k < 8; ++k) Duplicate(off[k * J + (tiles - 1) * gp], cell, gp);
        PipeBarrier<PIPE_V>();
    }
}

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_COMMON_NUMERICS_H_
