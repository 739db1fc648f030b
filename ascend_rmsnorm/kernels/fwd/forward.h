// ascend-rmsnorm: the forward kernel class (every path: group, tiled, stream).

#ifndef ASCEND_RMSNORM_FWD_FORWARD_H_
#define ASCEND_RMSNORM_FWD_FORWARD_H_

#include "../common/constants.h"
#include "../common/device_plan.h"
#include "../common/scalar.h"
#include "../common/copy.h"
#include "../common/numerics.h"
#include "../common/ring.h"

namespace rmsnorm {

// =============================================================================================
// Forward
// =============================================================================================
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
class Forward {
    static constexpr bool kF32 = IsSame<T, float>::value;
    static constexpr bool kWideY = IsSame<O, float>::value && !IsSame<T, float>::value;

public:
    __aicore__ inline Forward(GM_ADDR x, GM_ADDR res, GM_ADDR w, GM_ADDR y, GM_ADDR rstd, GM_ADDR rout,
                              const FwdArgs& a)
        : a_(a)
    {
        const int64_t ringSlots = GetBlockNum(), b = GetBlockIdx();
        const int64_t base = a.rows / ringSlots, rem = a.rows % ringSlots;
        rowBegin_ = b * base + (b < rem ? b : rem);
        rowEnd_ = rowBegin_ + base + (b < rem ? 1 : 0);
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

    __aicore__ inline void Process()
    {
        if (rowBegin_ >= rowEnd_) return;
        InitBuffers();
        LoadWeight();
        ring_.Init(pipe_, p_.ringSlots);  // each path builds its constants once its first loads are on their way
        if (p_.layout == dev::LAYOUT_GROUP) {
            RunGroup();
        } else if (p_.layout == dev::LAYOUT_TILED) {
            RunTiled();
        } else {
            RunStream();
        }
        ring_.Release(pipe_);
    }

private:
    // ---- set-up -------------------------------------------------------------------------------
    __aicore__ inline void InitBuffers()
    {
        pipe_.InitBuffer(ringB_, static_cast<uint32_t>(p_.ring));
        if (p_.wraw) pipe_.InitBuffer(wrawB_, static_cast<uint32_t>(p_.wraw));
        if (p_.wf) pipe_.InitBuffer(wfB_, static_cast<uint32_t>(p_.wf));
        if (p_.xf) pipe_.InitBuffer(xfB_, static_cast<uint32_t>(p_.xf));
        if (p_.tmp) pipe_.InitBuffer(tmpB_, static_cast<uint32_t>(p_.tmp));
        if (p_.q) pipe_.InitBuffer(qB_, static_cast<uint32_t>(p_.q));
        if (p_.ln) pipe_.InitBuffer(lnB_, static_cast<uint32_t>(p_.ln));
        pipe_.InitBuffer(lB_, static_cast<uint32_t>(p_.l));
        pipe_.InitBuffer(offB_, static_cast<uint32_t>(p_.off));
        pipe_.InitBuffer(vecB_, static_cast<uint32_t>(p_.vec));
        pipe_.InitBuffer(maskB_, static_cast<uint32_t>(p_.mask));
        pipe_.InitBuffer(brB_, static_cast<uint32_t>(p_.br));
        pipe_.InitBuffer(rsQ_, static_cast<uint8_t>(p_.ringSlots), static_cast<uint32_t>(p_.rsq / p_.ringSlots));
        if (p_.q) q_ = qB_.Get<float>();
        l_ = lB_.Get<float>();
        off_ = offB_.Get<uint32_t>();
        br_ = brB_.Get<float>();
        if (p_.xf) xf_ = xfB_.Get<float>();
        if (p_.tmp) tmp_ = tmpB_.Get<float>();
        if (p_.wf) wf_ = wfB_.Get<float>();
        if (p_.ln) ln_ = lnB_.Get<float>();
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
        LocalTensor<uint8_t> mb = maskB_.Get<uint8_t>();
        v_.mask = mb;
        const uint32_t canon = static_cast<uint32_t>(p_.subTile) > static_cast<uint32_t>(p_.gv) ? p_.subTile : p_.gv;
        v_.maskA = mb[Align32(canon / 8)];
    }

    // The weight as the formulas use it: fp32, plus the offset. Read once per block, tile by tile
    // through a staging buffer (an fp32 weight straight into place).
    __aicore__ inline void LoadWeight()
    {
        if (!weight_ || p_.layout == dev::LAYOUT_STREAM) return;
        const int32_t H = a_.hidden;
        if (!p_.wWide) {  // LAYOUT_TILED with the raw weight held: widened per sub-tile
            LocalTensor<W> raw = wrawB_.Get<W>();
            for (int32_t c = 0; c < H; c += kTile) {
                const uint32_t n = Min32(kTile, static_cast<uint32_t>(H - c));
                LoadRows(raw[c], wGm_[c], 1, n * sizeof(W));
            }
            SyncPipes<HardEvent::MTE2_V>(pipe_);
            return;
        }
        // a 16-bit weight is staged in the fp32 work buffer: chunks of at most what it holds
        const int32_t chunk = IsSame<W, float>::value ? kTile : static_cast<int32_t>(Min32(kTile, p_.subTile * 2));
        for (int32_t c = 0; c < H; c += chunk) {
            const uint32_t n = Min32(chunk, static_cast<uint32_t>(H - c));
            if constexpr (IsSame<W, float>::value) {
                LoadRows(wf_[c], wGm_[c], 1, n * 4);
            } else {
                LocalTensor<W> stage = xf_.ReinterpretCast<W>();
                if (c > 0) SyncPipes<HardEvent::V_MTE2>(pipe_);  // the previous chunk was widened
                LoadRows(stage, wGm_[c], 1, n * sizeof(W));
                SyncPipes<HardEvent::MTE2_V>(pipe_);
                Cast(wf_[c], stage, RoundMode::CAST_NONE, n);
                PipeBarrier<PIPE_V>();
            }
        }
        if constexpr (IsSame<W, float>::value) SyncPipes<HardEvent::MTE2_V>(pipe_);
        if (offset_) {
            Adds(wf_, wf_, a_.offset, H);
            PipeBarrier<PIPE_V>();
        }
    }

    __aicore__ inline void InitConstants()
    {
        Duplicate(v_.c15, 1.5f, p_.gv);
        Duplicate(v_.magic, static_cast<int32_t>(kRsqrtMagic), p_.gv);
        const LocalTensor<float> src = GatherSrc();
        Duplicate(src[CellElem()], BitsFloat(kNegZeroBits), 8);
        PipeBarrier<PIPE_V>();
        LocalTensor<int32_t> offs = off_.ReinterpretCast<int32_t>();
        LocalTensor<int32_t> tmp = l_.ReinterpretCast<int32_t>();
        const int32_t cell = static_cast<int32_t>(CellElem() * 4);
        const int32_t last = a_.hidden - (p_.tiles - 1) * kTile;
        if (p_.layout == dev::LAYOUT_GROUP) {
            OffsetsRows(offs, tmp, p_.gp, p_.tiles, p_.P, last, cell);
        } else {
            OffsetsPacked(offs, tmp, p_.J, p_.gp, p_.layout == dev::LAYOUT_STREAM ? 1 : p_.tiles,
                          p_.layout == dev::LAYOUT_STREAM ? 8 : last, cell);
        }
    }

    // LAYOUT_GROUP gathers the lanes from the work buffer (the -0 cell after it), the others from
    // the lanes each tile's tree left in ln_ (the cell after them).
    __aicore__ inline LocalTensor<float> GatherSrc() const { return p_.layout == dev::LAYOUT_GROUP ? xf_ : ln_; }
    __aicore__ inline uint32_t CellElem() const
    {
        return p_.layout == dev::LAYOUT_GROUP ? static_cast<uint32_t>(p_.subTile) : static_cast<uint32_t>(p_.J) * 8;
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
    // broadcast one block per row into br_.
    __aicore__ inline void RstdOut(int64_t row0, int32_t n)
    {
        LocalTensor<float> rs = rsQ_.template AllocTensor<float>();
        RstdVec(l_, rs, v_, p_.gp, p_.gv, a_.invH, a_.eps);
        Brcb(br_, rs, static_cast<uint8_t>(p_.gp / 8), BrcbRepeatParams(1, 8));
        PipeBarrier<PIPE_V>();
        rsQ_.EnQue(rs);
        rs = rsQ_.template DeQue<float>();
        StoreRows(rstdGm_[row0], rs, 1, static_cast<uint32_t>(n) * 4);
        rsQ_.FreeTensor(rs);
    }

    // ---- LAYOUT_GROUP -----------------------------------------------------------------------------
    __aicore__ inline int32_t GroupRows(int64_t g) const
    {
        const int64_t left = rowEnd_ - (rowBegin_ + g * p_.G);
        return left < p_.G ? static_cast<int32_t>(left) : p_.G;
    }

    __aicore__ inline void LoadGroup(int64_t g)
    {
        const int32_t b = static_cast<int32_t>(g % p_.ringSlots), n = GroupRows(g);
        const uint64_t at = static_cast<uint64_t>(rowBegin_ + g * p_.G) * a_.hidden;
        ring_.BeforeLoad(pipe_, b);
        LoadRows(SlotX(b), xGm_[at], n, a_.hidden * sizeof(T));
        if (residual_) LoadRows(SlotR(b), resGm_[at], n, a_.hidden * sizeof(T));
        ring_.AfterLoad(b);
    }

    __aicore__ inline void RunGroup()
    {
        const int64_t groups = (rowEnd_ - rowBegin_ + p_.G - 1) / p_.G;
        for (int64_t g = 0; g < groups && g < p_.ringSlots; ++g) LoadGroup(g);
        InitConstants();
        for (int64_t g = 0; g < groups; ++g) {
            const int32_t b = static_cast<int32_t>(g % p_.ringSlots), n = GroupRows(g);
            const int64_t row0 = rowBegin_ + g * p_.G;
            ring_.BeforeCompute(b);
            ComputeGroup(b, row0, n);
            ring_.BeforeStore(b);
            const uint64_t at = static_cast<uint64_t>(row0) * a_.hidden;
            if constexpr (kWideY) {
                const uint32_t gap = (p_.P * 4 - Align32(a_.hidden * 4)) / 32;
                StoreRows(yGm_[at], SlotY(b), n, a_.hidden * 4, gap);
            } else {
                StoreRows(yGm_[at], SlotX(b).template ReinterpretCast<O>(), n, a_.hidden * sizeof(O));
            }
            if (residual_) StoreRows(routGm_[at], SlotR(b), n, a_.hidden * sizeof(T));
            ring_.AfterStore(b);
            if (g + p_.ringSlots < groups) LoadGroup(g + p_.ringSlots);
        }
    }

    // Per-row steps of a group (rows at pitch P): one instruction per stripe with repeat = rows when
    // the pitch allows, else one per row; one barrier after the step.
    __aicore__ inline void RowsMulB(const LocalTensor<float>& dst, const LocalTensor<float>& src, int32_t n)
    {
        if (p_.stripes) {
            StripeMulB(dst, src, br_, a_.hidden, n, static_cast<uint8_t>(p_.P / 8));
        } else {
            for (int32_t r = 0; r < n; ++r) RowMulB(dst[r * p_.P], src[r * p_.P], br_[r * 8], a_.hidden);
            PipeBarrier<PIPE_V>();
        }
    }
    __aicore__ inline void RowsMulW(const LocalTensor<float>& dst, int32_t n)
    {
        if (p_.stripes) {
            StripeMulW(dst, dst, wf_, a_.hidden, n, static_cast<uint8_t>(p_.P / 8));
        } else {
            for (int32_t r = 0; r < n; ++r) Mul(dst[r * p_.P], dst[r * p_.P], wf_, a_.hidden);
            PipeBarrier<PIPE_V>();
        }
    }

    // A group of n rows, every step over all of them. The squares go into the work buffer xf_ (16-bit
    // x: the widened rows, squared in place and widened again for y); each row's tiles are reduced
    // to 8 lanes where they are and the lanes gathered from there.
    __aicore__ inline void ComputeGroup(int32_t b, int64_t row0, int32_t n)
    {
        const int32_t H = a_.hidden;
        const uint32_t P = p_.P, cnt = static_cast<uint32_t>(n) * P, canon = Align64Elems(cnt);
        const LocalTensor<T> X = SlotX(b);
        const LocalTensor<T> R = SlotR(b);
        // 1. residual: r = cast_x(x + residual), written over the residual; the rows to normalise
        if (residual_) {
            if constexpr (kF32) {
                Add(xf_, X, R, cnt);
                PipeBarrier<PIPE_V>();
                Canon(xf_, v_.mask, canon);
                DataCopy(R, xf_, cnt);  // residual_out, fp32
            } else {
                Cast(xf_, X, RoundMode::CAST_NONE, cnt);
                Cast(tmp_, R, RoundMode::CAST_NONE, cnt);
                PipeBarrier<PIPE_V>();
                Add(xf_, xf_, tmp_, cnt);
                PipeBarrier<PIPE_V>();
                Canon(xf_, v_.mask, canon);
                Cast(R, xf_, RoundMode::CAST_RINT, cnt);  // residual_out
            }
            PipeBarrier<PIPE_V>();
        }
        const LocalTensor<T> src = residual_ ? R : X;
        // 2. squares; the tree of every row's tiles down to 8 lanes; the lanes of all rows; rstd
        if constexpr (kF32) {
            Mul(xf_, src, src, cnt);
        } else {
            Cast(xf_, src, RoundMode::CAST_NONE, cnt);
            PipeBarrier<PIPE_V>();
            Mul(xf_, xf_, xf_, cnt);
        }
        PipeBarrier<PIPE_V>();
        if (p_.stripes) {
            StripeTree(xf_, H, n, static_cast<uint8_t>(P / 8));
        } else {
            SegTree(xf_, n, P, p_.tiles, H - (p_.tiles - 1) * kTile);
        }
        LaneReduce(l_, xf_, off_, p_.J, p_.tiles, p_.gp);
        RstdOut(row0, n);
        // 3. y = (x * rstd) [-> x's dtype and back: llama] * w, canonical NaN, cast
        LocalTensor<float> wk;
        if constexpr (kWideY) {
            wk = SlotY(b);
        } else if constexpr (kF32) {
            wk = X.template ReinterpretCast<float>();
        } else {
            wk = xf_;
        }
        if constexpr (kF32) {
            RowsMulB(wk, src, n);
        } else {
            Cast(wk, src, RoundMode::CAST_NONE, cnt);
            PipeBarrier<PIPE_V>();
            RowsMulB(wk, wk, n);
            if (llama_) {
                Cast(X, wk, RoundMode::CAST_RINT, cnt);
                PipeBarrier<PIPE_V>();
                Cast(wk, X, RoundMode::CAST_NONE, cnt);
                PipeBarrier<PIPE_V>();
            }
        }
        if (weight_) RowsMulW(wk, n);
        Canon(wk, v_.mask, canon);
        if constexpr (!kF32 && !kWideY) Cast(X, wk, RoundMode::CAST_RINT, cnt);
    }

    // ---- LAYOUT_TILED and LAYOUT_STREAM: tile work ------------------------------------------------

    // The squares of one tile (len elements of src, fp32 or x's dtype) into q_ with the tree's first
    // level added on the way (q_[j] = s[j]^2 + s[h + j]^2 for j < len - h), then the rest of the tree;
    // its 8 lanes into ln_[8 * slot].
    template <typename subTile>
    __aicore__ inline void TileSquares(const LocalTensor<subTile>& src, int32_t len, int32_t slot)
    {
        const int32_t S_ = p_.subTile;
        const int32_t h = FusedHalf(len);
        // sub-tiles never straddle h: both are powers of two when h >= S_, else two pieces
        for (int32_t a = 0; a < len;) {
            const int32_t lim = a < h ? h : len;
            const int32_t n = lim - a < S_ ? lim - a : S_;
            LocalTensor<float> part;
            if constexpr (IsSame<subTile, float>::value) {
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
            Canon(xf_, v_.mask, Align64Elems(n));
            if constexpr (kF32) {
                DataCopy(rT[a], xf_, (n + 7) / 8 * 8);
            } else {
                Cast(rT[a], xf_, RoundMode::CAST_RINT, n);
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
            Canon(xf_, v_.mask, Align64Elems(n));
            if constexpr (kWideY) {
                DataCopy(SlotY(b)[yAt + a], xf_, (n + 7) / 8 * 8);
            } else if constexpr (kF32) {
                DataCopy(dstT[a], xf_, (n + 7) / 8 * 8);
            } else {
                Cast(dstT[a], xf_, RoundMode::CAST_RINT, n);
            }
            PipeBarrier<PIPE_V>();
        }
    }

    // ---- LAYOUT_TILED: one row per ring slot --------------------------------------------------------
    __aicore__ inline void LoadRow(int64_t i)
    {
        const int32_t b = static_cast<int32_t>(i % p_.ringSlots);
        const uint64_t at = static_cast<uint64_t>(rowBegin_ + i) * a_.hidden;
        ring_.BeforeLoad(pipe_, b);
        for (int32_t c = 0; c < a_.hidden; c += kTile) {
            const uint32_t n = Min32(kTile, static_cast<uint32_t>(a_.hidden - c));
            LoadRows(SlotX(b)[c], xGm_[at + c], 1, n * sizeof(T));
            if (residual_) LoadRows(SlotR(b)[c], resGm_[at + c], 1, n * sizeof(T));
        }
        ring_.AfterLoad(b);
    }

    __aicore__ inline void RunTiled()
    {
        const int64_t count = rowEnd_ - rowBegin_;
        const int32_t H = a_.hidden;
        for (int64_t i = 0; i < count && i < p_.ringSlots; ++i) LoadRow(i);
        InitConstants();
        for (int64_t i = 0; i < count; ++i) {
            const int32_t b = static_cast<int32_t>(i % p_.ringSlots);
            const int64_t row = rowBegin_ + i;
            const LocalTensor<T> X = SlotX(b);
            const LocalTensor<T> R = SlotR(b);
            const LocalTensor<T> src = residual_ ? R : X;
            ring_.BeforeCompute(b);
            for (int32_t t = 0; t < p_.tiles; ++t) {
                const int32_t off = t * kTile, len = H - off < kTile ? H - off : kTile;
                if (residual_) TileResidual(X[off], R[off], len);
                TileSquares(src[off], len, t * p_.gp);
            }
            PipeBarrier<PIPE_V>();
            LaneReduce(l_, ln_, off_, p_.J, p_.tiles, p_.gp);
            RstdOut(row, 1);
            for (int32_t t = 0; t < p_.tiles; ++t) {
                const int32_t off = t * kTile, len = H - off < kTile ? H - off : kTile;
                TileOutput(src[off], X[off], b, off, len, off, p_.wWide);
            }
            ring_.BeforeStore(b);
            const uint64_t at = static_cast<uint64_t>(row) * H;
            for (int32_t c = 0; c < H; c += kTile) {
                const uint32_t n = Min32(kTile, static_cast<uint32_t>(H - c));
                if constexpr (kWideY) {
                    StoreRows(yGm_[at + c], SlotY(b)[c], 1, n * 4);
                } else {
                    StoreRows(yGm_[at + c], X[c].template ReinterpretCast<O>(), 1, n * sizeof(O));
                }
                if (residual_) StoreRows(routGm_[at + c], R[c], 1, n * sizeof(T));
            }
            ring_.AfterStore(b);
            if (i + p_.ringSlots < count) LoadRow(i + p_.ringSlots);
        }
    }

    // ---- LAYOUT_STREAM: tiles from GM, two passes per row ------------------------------------------
    // Job j of the block: row j / (2 * tiles), pass (j / tiles) % 2, tile j % tiles.
    __aicore__ inline void LoadJob(int64_t j)
    {
        const int32_t tiles = p_.tiles, b = static_cast<int32_t>(j % p_.ringSlots);
        const int64_t row = rowBegin_ + j / (2 * tiles);
        const int32_t pass = static_cast<int32_t>((j / tiles) % 2), t = static_cast<int32_t>(j % tiles);
        const int32_t off = t * kTile, len = a_.hidden - off < kTile ? a_.hidden - off : kTile;
        const uint64_t at = static_cast<uint64_t>(row) * a_.hidden + off;
        ring_.BeforeLoad(pipe_, b);
        if (pass == 0) {
            LoadRows(SlotX(b), xGm_[at], 1, len * sizeof(T));
            if (residual_) LoadRows(SlotR(b), resGm_[at], 1, len * sizeof(T));
        } else {
            if (residual_) {
                if (t == 0) WaitFlag<HardEvent::MTE3_MTE2>(routEvt_);  // this row's residual_out is in GM
                LoadRows(SlotX(b), routGm_[at], 1, len * sizeof(T));
            } else {
                LoadRows(SlotX(b), xGm_[at], 1, len * sizeof(T));
            }
            if (weight_) LoadRows(wrawB_.Get<W>()[b * kTile], wGm_[off], 1, len * sizeof(W));
        }
        ring_.AfterLoad(b);
    }

    // A pass-2 load of a residual row reads residual_out back from GM: only after pass 1 stored it.
    __aicore__ inline bool CanLoad(int64_t j, int64_t stored) const
    {
        const int64_t tiles = p_.tiles;
        if (!residual_ || (j / tiles) % 2 == 0) return true;
        const int64_t lastPass1 = (j / (2 * tiles)) * 2 * tiles + tiles - 1;
        return stored >= lastPass1;
    }

    __aicore__ inline void RunStream()
    {
        const int32_t H = a_.hidden, tiles = p_.tiles;
        const int64_t jobs = (rowEnd_ - rowBegin_) * 2 * tiles;
        if (residual_) routEvt_ = static_cast<event_t>(pipe_.AllocEventID<HardEvent::MTE3_MTE2>());
        int64_t next = 0;
        while (next < jobs && next < p_.ringSlots && CanLoad(next, -1)) LoadJob(next++);
        InitConstants();
        for (int64_t j = 0; j < jobs; ++j) {
            const int32_t b = static_cast<int32_t>(j % p_.ringSlots);
            const int64_t row = rowBegin_ + j / (2 * tiles);
            const int32_t pass = static_cast<int32_t>((j / tiles) % 2), t = static_cast<int32_t>(j % tiles);
            const int32_t off = t * kTile, len = H - off < kTile ? H - off : kTile;
            const uint64_t at = static_cast<uint64_t>(row) * H + off;
            const LocalTensor<T> X = SlotX(b);
            ring_.BeforeCompute(b);
            if (pass == 0) {
                if (t == 0) {
                    Duplicate(v_.run, BitsFloat(kNegZeroBits), 8);  // -0 + p0 = p0: tiles added left to right
                    PipeBarrier<PIPE_V>();
                }
                if (residual_) TileResidual(X, SlotR(b), len);
                const LocalTensor<T> src = residual_ ? SlotR(b) : X;
                if (t == tiles - 1 && len < 8) {
                    for (int32_t k = len; k < 8; ++k) Duplicate(off_.template ReinterpretCast<int32_t>()[k * p_.J],
                                                                static_cast<int32_t>(CellElem() * 4), 1);
                    PipeBarrier<PIPE_V>();
                }
                TileSquares(src, len, 0);
                PipeBarrier<PIPE_V>();
                LaneReduce(l_, ln_, off_, p_.J, 1, p_.gp);
                Add(v_.run, v_.run, l_, 1);
                PipeBarrier<PIPE_V>();
                if (t == tiles - 1 && len < 8) {
                    for (int32_t k = len; k < 8; ++k) Duplicate(off_.template ReinterpretCast<int32_t>()[k * p_.J],
                                                                4 * k, 1);
                    PipeBarrier<PIPE_V>();
                }
                if (t == tiles - 1) {
                    DataCopy(l_, v_.run, 8);
                    PipeBarrier<PIPE_V>();
                    RstdOut(row, 1);
                }
                if (residual_) {
                    ring_.BeforeStore(b);
                    StoreRows(routGm_[at], SlotR(b), 1, len * sizeof(T));
                    if (t == tiles - 1) SetFlag<HardEvent::MTE3_MTE2>(routEvt_);
                    ring_.AfterStore(b);
                } else {
                    ring_.AfterComputeOnly(b);
                }
            } else {
                TileOutput(X, X, b, 0, len, b * kTile, false);
                ring_.BeforeStore(b);
                if constexpr (kWideY) {
                    StoreRows(yGm_[at], SlotY(b), 1, len * 4);
                } else {
                    StoreRows(yGm_[at], X.template ReinterpretCast<O>(), 1, len * sizeof(O));
                }
                ring_.AfterStore(b);
            }
            while (next < jobs && next < j + 1 + p_.ringSlots && CanLoad(next, j)) LoadJob(next++);
        }
        if (residual_) pipe_.ReleaseEventID<HardEvent::MTE3_MTE2>(routEvt_);
    }

    FwdArgs a_;
    dev::Plan p_;
    bool llama_ = false, residual_ = false, weight_ = false, offset_ = false;
    int64_t rowBegin_ = 0, rowEnd_ = 0;
    event_t routEvt_ = EVENT_ID0;
    TPipe pipe_;
    Ring ring_;
    TBuf<TPosition::VECIN> ringB_, wrawB_, wfB_, xfB_;
    TBuf<TPosition::VECCALC> tmpB_, qB_, lnB_, lB_, offB_, vecB_, maskB_, brB_;
    TQue<TPosition::VECOUT, 1> rsQ_;
    LocalTensor<float> q_, l_, br_, xf_, tmp_, wf_, ln_;
    LocalTensor<uint32_t> off_;
    RowVecs v_;
    GlobalTensor<T> xGm_, resGm_, routGm_;
    GlobalTensor<O> yGm_;
    GlobalTensor<W> wGm_;
    GlobalTensor<float> rstdGm_;
};

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_FWD_FORWARD_H_
