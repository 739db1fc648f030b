// ascend-rmsnorm: the forward's base class: the set-up every path shares (GM tensors, UB buffers,
// the weight, the gather offsets, the ring slots, the rstd out) and the tile work of the tiled and
// stream paths. One class per path derives from it: fwd/forward_group.h, forward_tiled.h, forward_stream.h.

#ifndef ASCEND_RMSNORM_FWD_FORWARD_BASE_H_
#define ASCEND_RMSNORM_FWD_FORWARD_BASE_H_

#include "../common/kernel_base.h"

namespace rmsnorm {

struct FwdArgs {
    int64_t rows;
    int32_t hidden;
    float eps;
    float invH;
    float offset;
    int32_t flags;
    int32_t layout;
    int32_t G;
    int32_t ringSlots;
    int32_t subTile;
    int32_t wWide;
};

template <typename T, typename W, typename O>
class ForwardBase : public KernelBase {
protected:
    static constexpr bool kF32 = IsSame<T, float>::value;
    static constexpr bool kWideY = IsSame<O, float>::value && !IsSame<T, float>::value;
    // 16-bit y: the canonical NaN is selected after the cast (CanonCast), from the register's 16-bit NaN
    static constexpr bool kNarrow = !kF32 && !kWideY;

    __aicore__ inline ForwardBase(GM_ADDR x, GM_ADDR res, GM_ADDR w, GM_ADDR y, GM_ADDR rstd, GM_ADDR rout,
                                  const FwdArgs& a, TPipe* pipe)
        : KernelBase(pipe), a_(a)
    {
        BlockShare(a.rows, rowBegin_, rowEnd_);
        const uint64_t total = static_cast<uint64_t>(a.rows) * static_cast<uint64_t>(a.hidden);
        llama_ = (a.flags & kFlagLlama) != 0 && !kF32;
        residual_ = (a.flags & kFlagResidual) != 0;
        weight_ = (a.flags & kFlagWeight) != 0;
        offset_ = (a.flags & kFlagOffset) != 0;
        xGm_.SetGlobalBuffer((__gm__ T*)x, total);
        yGm_.SetGlobalBuffer((__gm__ O*)y, total);
        rstdGm_.SetGlobalBuffer((__gm__ float*)rstd, static_cast<uint64_t>(a.rows));
        if (residual_) {
            resGm_.SetGlobalBuffer((__gm__ T*)res, total);
            routGm_.SetGlobalBuffer((__gm__ T*)rout, total);
        }
        if (weight_) wGm_.SetGlobalBuffer((__gm__ W*)w, static_cast<uint64_t>(a.hidden));
        dev::PlanShape s{a.hidden, sizeof(T), sizeof(W), sizeof(O), weight_, residual_, false};
        p_ = dev::FwdPlanFor(s, a.layout, a.G, a.ringSlots, a.subTile, a.wWide != 0);
    }

    // Whether the block has rows; then its buffers, its weight and the ring (each path builds its
    // constants once its first loads are on their way). End() gives the ring's events back.
    __aicore__ inline bool Begin()
    {
        if (rowBegin_ >= rowEnd_) return false;
        InitBuffers();
        if (weight_) LoadWeight(wGm_, xf_, a_.hidden, offset_, a_.offset);
        ring_.Init(*pipe_, p_.ringSlots);
        return true;
    }
    __aicore__ inline void End() { ring_.Release(*pipe_); }

    __aicore__ inline void InitBuffers()
    {
        InitRingAndWeight();
        if (p_.xf) pipe_->InitBuffer(xfB_, static_cast<uint32_t>(p_.xf));
        if (p_.tmp) pipe_->InitBuffer(tmpB_, static_cast<uint32_t>(p_.tmp));
        InitLanes();
        pipe_->InitBuffer(vecB_, static_cast<uint32_t>(p_.vec));
        pipe_->InitBuffer(maskB_, static_cast<uint32_t>(p_.mask));
        pipe_->InitBuffer(brB_, static_cast<uint32_t>(p_.br));
        pipe_->InitBuffer(rsQ_, static_cast<uint8_t>(p_.ringSlots), static_cast<uint32_t>(p_.rsq / p_.ringSlots));
        br_ = brB_.Get<float>();
        if (p_.xf) xf_ = xfB_.Get<float>();
        if (p_.tmp) tmp_ = tmpB_.Get<float>();
        const uint32_t gvB = Align32(static_cast<uint32_t>(p_.gv) * 4);
        LocalTensor<uint8_t> vb = vecB_.Get<uint8_t>();
        v_.a = vb[0 * gvB].ReinterpretCast<float>();
        v_.y = vb[1 * gvB].ReinterpretCast<float>();
        v_.t = vb[2 * gvB].ReinterpretCast<float>();
        v_.h = vb[3 * gvB].ReinterpretCast<float>();
        v_.u = vb[4 * gvB].ReinterpretCast<uint32_t>();
        v_.c15 = vb[5 * gvB].ReinterpretCast<float>();
        v_.magic = vb[6 * gvB].ReinterpretCast<int32_t>();
        v_.run = vb[7 * gvB].ReinterpretCast<float>();
        v_.nan = vb[8 * gvB].ReinterpretCast<float>();
        v_.zero = vb[8 * gvB + 32].ReinterpretCast<float>();
        LocalTensor<uint8_t> mb = maskB_.Get<uint8_t>();
        v_.mask = mb;
        const uint32_t canon = static_cast<uint32_t>(p_.subTile) > static_cast<uint32_t>(p_.gv) ? p_.subTile : p_.gv;
        v_.maskA = mb[Align32(canon / 8)];
    }

    // The Newton constants, the compare-mask register's two values (the NaN held from here on), and the
    // lane-gather offsets (LAYOUT_GROUP gathers the lanes from the work buffer, the others from the
    // lanes each tile's tree left in ln_).
    __aicore__ inline void InitConstants()
    {
        Duplicate(v_.c15, 1.5f, p_.gv);
        Duplicate(v_.magic, static_cast<int32_t>(kRsqrtMagic), p_.gv);
        Duplicate(v_.zero, 0.0f, 8);
        HoldNan(v_.nan, NanBits16<T>(), kNarrow);
        LaneOffsets(p_.layout == dev::LAYOUT_GROUP ? xf_ : ln_, CellElem(), a_.hidden);
    }

    // ---- ring slots -----------------------------------------------------------------------------
    __aicore__ inline LocalTensor<uint8_t> Slot(int32_t b)
    {
        return ringB_.Get<uint8_t>()[static_cast<uint32_t>(b * (p_.slotA + p_.slotB + p_.slotC))];
    }
    __aicore__ inline LocalTensor<T> SlotX(int32_t b) { return Slot(b).template ReinterpretCast<T>(); }
    __aicore__ inline LocalTensor<T> SlotR(int32_t b)
    {
        return Slot(b)[static_cast<uint32_t>(p_.slotA)].template ReinterpretCast<T>();
    }
    __aicore__ inline LocalTensor<float> SlotY(int32_t b)
    {
        return Slot(b)[static_cast<uint32_t>(p_.slotA + p_.slotB)].template ReinterpretCast<float>();
    }

    // rstd of the group's rows from their sums in l_[0, gp): out through the rstd queue, and
    // broadcast one block per row into br_. In steps, one per barrier window, so the group path can
    // issue other groups' work beside them: the chain (ChainStep 0..kChainSteps-1) ends with the
    // broadcast, made from the rstd before its canonical NaN (every output the broadcast reaches is
    // made canonical itself); RstdDone then selects that NaN into the rstd row, off the chain's path
    // to y, and RstdEnd stores the row.
    static constexpr int32_t kChainSteps = kRstdSteps - 1;
    __aicore__ inline LocalTensor<float> RstdBegin() { return rsQ_.template AllocTensor<float>(); }
    __aicore__ inline void ChainStep(int32_t k, const LocalTensor<float>& rs)
    {
        RstdStep(k, l_, rs, v_, p_.gp, p_.gv, a_.invH, a_.eps);
        if (k == kChainSteps - 1) Brcb(br_, v_.y, static_cast<uint8_t>(p_.gp / 8), BrcbRepeatParams(1, 8));
    }
    __aicore__ inline void RstdDone(const LocalTensor<float>& rs)
    {
        RstdStep(kChainSteps, l_, rs, v_, p_.gp, p_.gv, a_.invH, a_.eps);
    }
    __aicore__ inline void RstdEnd(LocalTensor<float>& rs, int64_t row0, int32_t n)
    {
        rsQ_.EnQue(rs);
        LocalTensor<float> out = rsQ_.template DeQue<float>();
        StoreRows(rstdGm_[row0], out, 1, static_cast<uint32_t>(n) * 4);
        rsQ_.FreeTensor(out);
    }
    // The whole of it, for the tiled and stream paths (a 16-bit y's NaN back in the register after).
    __aicore__ inline void RstdOut(int64_t row0, int32_t n)
    {
        LocalTensor<float> rs = RstdBegin();
        for (int32_t k = 0; k < kChainSteps; ++k) {
            ChainStep(k, rs);
            PipeBarrier<PIPE_V>();
        }
        RstdDone(rs);
        PipeBarrier<PIPE_V>();
        if constexpr (kNarrow) {
            SetCmpMask(NanOf(v_.nan, true));  // RstdDone left the fp32 NaN in the register
            PipeBarrier<PIPE_V>();
        }
        RstdEnd(rs, row0, n);
    }

    // residual_out of 16-bit x when y is fp32 (kWideY): the register holds the fp32 NaN for y, so it
    // takes x's 16-bit NaN for this CanonCast (a NaN's bits after a narrowing cast are not documented)
    // and the fp32 one back after, each load between barriers. Today every path runs an rstd chain,
    // which loads the register itself, before its next fp32 select, so no test sees the restore: it
    // keeps "the register holds y's NaN" true for whatever comes next.
    __aicore__ inline void WideYCanonCast(const LocalTensor<T>& dst, const LocalTensor<float>& buf, uint32_t canon,
                                          uint32_t cnt)
    {
        SetCmpMask(NanOf(v_.nan, true));
        PipeBarrier<PIPE_V>();
        CanonCast(dst, buf, v_.mask, canon, cnt);
        PipeBarrier<PIPE_V>();
        SetCmpMask(NanOf(v_.nan, false));
    }

    // ---- tile work of LAYOUT_TILED and LAYOUT_STREAM -------------------------------------------------

    // The squares of one tile (len elements of src, fp32 or x's dtype) into q_ with the tree's first
    // level added on the way (q_[j] = s[j]^2 + s[h + j]^2 for j < len - h), then the rest of the tree;
    // its 8 lanes into ln_[8 * slot].
    template <typename Src>
    __aicore__ inline void TileSquares(const LocalTensor<Src>& src, int32_t len, int32_t slot)
    {
        const int32_t S_ = p_.subTile;
        const int32_t h = FusedHalf(len);
        // sub-tiles never straddle h: both are powers of two when h >= S_, else two pieces
        for (int32_t a = 0; a < len;) {
            const int32_t lim = a < h ? h : len;
            const int32_t n = lim - a < S_ ? lim - a : S_;
            LocalTensor<float> part;
            if constexpr (IsSame<Src, float>::value) {
                part = src[a];
            } else {
                const uint32_t lead = Lead(a);
                Cast(xf_, src[a - lead], RoundMode::CAST_NONE, n + lead);
                PipeBarrier<PIPE_V>();
                part = xf_[lead];
            }
            if (a < h) {
                Mul(q_[a], part, part, n);
            } else {
                Mul(tmp_, part, part, n);
                PipeBarrier<PIPE_V>();
                Add(q_[a - h], q_[a - h], tmp_, n);
            }
            PipeBarrier<PIPE_V>();
            a += n;
        }
        if (h < len) HalveToLanes(q_, h);
        DataCopy(ln_[slot * 8], q_, 8);
    }

    // residual_out of one tile: r = cast_x(x + res) written over res; the tile's rows to normalise
    // are then res (exact in x's dtype).
    __aicore__ inline void TileResidual(const LocalTensor<T>& xT, const LocalTensor<T>& rT, int32_t len)
    {
        for (int32_t a = 0; a < len; a += p_.subTile) {
            const int32_t n = len - a < p_.subTile ? len - a : p_.subTile;
            if constexpr (kF32) {
                Add(xf_, xT[a], rT[a], n);
            } else {
                Cast(xf_, xT[a], RoundMode::CAST_NONE, n);
                Cast(tmp_, rT[a], RoundMode::CAST_NONE, n);
                PipeBarrier<PIPE_V>();
                Add(xf_, xf_, tmp_, n);
            }
            PipeBarrier<PIPE_V>();
            if constexpr (kF32) {
                Canon(xf_, v_.mask, Align64Elems(n));
                DataCopy(rT[a], xf_, (n + 7) / 8 * 8);
            } else if constexpr (kNarrow) {
                CanonCast(rT[a], xf_, v_.mask, Align64Elems(n), n);
            } else {
                WideYCanonCast(rT[a], xf_, Align64Elems(n), static_cast<uint32_t>(n));
            }
            PipeBarrier<PIPE_V>();
        }
    }

    // y of one tile into dstT (over src), or into ring slot b's fp32 y rows at yAt: scale, llama,
    // weight, NaN, cast. The weight of the tile: the fp32 weight at wAt (wide), else the raw weight at
    // wAt (widened here).
    __aicore__ inline void TileOutput(const LocalTensor<T>& src, const LocalTensor<T>& dstT, int32_t b, int32_t yAt,
                                      int32_t len, int32_t wAt, bool wide)
    {
        for (int32_t a = 0; a < len; a += p_.subTile) {
            const uint32_t n = Min32(p_.subTile, static_cast<uint32_t>(len - a));
            if constexpr (kF32) {
                RowMulB(xf_, src[a], br_, n);
            } else {
                Cast(xf_, src[a], RoundMode::CAST_NONE, n);
                PipeBarrier<PIPE_V>();
                RowMulB(xf_, xf_, br_, n);
            }
            PipeBarrier<PIPE_V>();
            if constexpr (!kF32) {
                if (llama_) {
                    Cast(dstT[a], xf_, RoundMode::CAST_RINT, n);
                    PipeBarrier<PIPE_V>();
                    Cast(xf_, dstT[a], RoundMode::CAST_NONE, n);
                    PipeBarrier<PIPE_V>();
                }
            }
            if (weight_) {
                if (wide) {
                    Mul(xf_, xf_, wf_[wAt + a], n);
                } else {
                    const LocalTensor<W> wrT = wrawB_.Get<W>()[wAt];
                    if constexpr (IsSame<W, float>::value) {
                        if (offset_) {
                            Adds(tmp_, wrT[a], a_.offset, n);
                            PipeBarrier<PIPE_V>();
                            Mul(xf_, xf_, tmp_, n);
                        } else {
                            Mul(xf_, xf_, wrT[a], n);
                        }
                    } else {
                        Cast(tmp_, wrT[a], RoundMode::CAST_NONE, n);
                        PipeBarrier<PIPE_V>();
                        if (offset_) {
                            Adds(tmp_, tmp_, a_.offset, n);
                            PipeBarrier<PIPE_V>();
                        }
                        Mul(xf_, xf_, tmp_, n);
                    }
                }
                PipeBarrier<PIPE_V>();
            }
            if constexpr (kNarrow) {
                CanonCast(dstT[a], xf_, v_.mask, Align64Elems(n), n);
            } else {
                Canon(xf_, v_.mask, Align64Elems(n));
                if constexpr (kWideY) {
                    DataCopy(SlotY(b)[yAt + a], xf_, (n + 7) / 8 * 8);
                } else {
                    DataCopy(dstT[a], xf_, (n + 7) / 8 * 8);
                }
            }
            PipeBarrier<PIPE_V>();
        }
    }

    FwdArgs a_;
    bool llama_ = false, residual_ = false, weight_ = false, offset_ = false;
    int64_t rowBegin_ = 0, rowEnd_ = 0;
    TBuf<TPosition::VECCALC> tmpB_, vecB_;
    TQue<TPosition::VECOUT, 1> rsQ_;
    LocalTensor<float> br_, xf_, tmp_;
    RowVecs v_;
    GlobalTensor<T> xGm_, resGm_, routGm_;
    GlobalTensor<O> yGm_;
    GlobalTensor<W> wGm_;
    GlobalTensor<float> rstdGm_;
};

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_FWD_FORWARD_BASE_H_
