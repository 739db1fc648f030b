// ascend-rmsnorm: the backward kernel class (every path: group, tiled, stream): dx per row, dw partials per chunk.

#ifndef ASCEND_RMSNORM_BWD_BACKWARD_H_
#define ASCEND_RMSNORM_BWD_BACKWARD_H_

#include "../common/constants.h"
#include "../common/device_plan.h"
#include "../common/scalar.h"
#include "../common/copy.h"
#include "../common/numerics.h"
#include "../common/ring.h"

namespace rmsnorm {

// =============================================================================================
// Backward: dx per row; dw partials per chunk of R rows (each from +0, rows in order)
// =============================================================================================
struct BwdArgs {
    int64_t rows;
    int32_t hidden;
    float invH;
    float offset;
    int32_t flags;
    int32_t layout;
    int32_t G;
    int32_t ringSlots;
    int32_t subTile;
    int32_t wWide;
    int32_t chunkRows;
    int32_t accs;
    int32_t dySlots;
};

template <typename T, typename W, typename D>
class Backward {
    static constexpr bool kF32 = IsSame<T, float>::value;
    static constexpr bool kDy32 = IsSame<D, float>::value;
    static constexpr bool kW32 = IsSame<W, float>::value;

public:
    __aicore__ inline Backward(GM_ADDR dy, GM_ADDR x, GM_ADDR w, GM_ADDR rstd, GM_ADDR gro, GM_ADDR dx, GM_ADDR dw,
                               GM_ADDR ws, const BwdArgs& a)
        : a_(a)
    {
        chunkRows_ = a.chunkRows;
        chunks_ = (a.rows + chunkRows_ - 1) / chunkRows_;
        const int64_t ringSlots = GetBlockNum(), b = GetBlockIdx();
        const int64_t base = chunks_ / ringSlots, rem = chunks_ % ringSlots;
        kBegin_ = b * base + (b < rem ? b : rem);
        kEnd_ = kBegin_ + base + (b < rem ? 1 : 0);
        weight_ = (a.flags & kFlagWeight) != 0;
        offset_ = (a.flags & kFlagOffset) != 0;
        wantDx_ = (a.flags & kFlagDx) != 0;
        wantDw_ = (a.flags & kFlagDw) != 0;
        direct_ = (a.flags & kFlagDwDirect) != 0;
        gro_ = wantDx_ && (a.flags & kFlagResidual) != 0;
        const uint64_t total = static_cast<uint64_t>(a.rows) * static_cast<uint64_t>(a.hidden);
        dyGm_.SetGlobalBuffer((__gm__ D*)dy, total);
        xGm_.SetGlobalBuffer((__gm__ T*)x, total);
        rstdGm_.SetGlobalBuffer((__gm__ float*)rstd, static_cast<uint64_t>(a.rows));
        if (wantDx_) dxGm_.SetGlobalBuffer((__gm__ T*)dx, total);
        if (gro_) groGm_.SetGlobalBuffer((__gm__ T*)gro, total);
        if (weight_) wGm_.SetGlobalBuffer((__gm__ W*)w, static_cast<uint64_t>(a.hidden));
        if (wantDw_) {
            if (direct_) {
                dwGm_.SetGlobalBuffer((__gm__ W*)dw, static_cast<uint64_t>(a.hidden));
            } else {
                wsGm_.SetGlobalBuffer((__gm__ float*)ws, static_cast<uint64_t>(chunks_) * a.hidden);
            }
        }
        dev::PlanShape s{a.hidden, sizeof(T), sizeof(W), sizeof(D), weight_, gro_, wantDw_};
        p_ = dev::BwdPlanFor(s, a.layout, a.G, a.ringSlots, a.subTile, a.wWide != 0, a.accs, a.dySlots);
    }

    __aicore__ inline void Process()
    {
        if (kBegin_ >= kEnd_) return;
        InitBuffers();
        LoadWeight();
        ring_.Init(pipe_, p_.layout == dev::LAYOUT_TILED ? p_.ringSlots * p_.tiles : p_.ringSlots);  // constants: after the first loads
        for (int32_t i = 0; i < AccEvents(); ++i) accEvt_[i] = static_cast<event_t>(pipe_.AllocEventID<HardEvent::MTE3_V>());
        for (int32_t i = 0; i < DyEvents(); ++i) dyFree_[i] = static_cast<event_t>(pipe_.AllocEventID<HardEvent::V_MTE2>());
        if (p_.layout == dev::LAYOUT_STREAM) {
            RunStream();
        } else {
            RunRows();
        }
        for (int32_t i = 0; i < AccEvents(); ++i) {
            if (accPending_[i]) WaitFlag<HardEvent::MTE3_V>(accEvt_[i]);
            pipe_.ReleaseEventID<HardEvent::MTE3_V>(accEvt_[i]);
        }
        for (int32_t i = 0; i < DyEvents(); ++i) {
            if (dyPending_[i]) WaitFlag<HardEvent::V_MTE2>(dyFree_[i]);
            pipe_.ReleaseEventID<HardEvent::V_MTE2>(dyFree_[i]);
        }
        ring_.Release(pipe_);
    }

private:
    __aicore__ inline void InitBuffers()
    {
        pipe_.InitBuffer(ringB_, static_cast<uint32_t>(p_.ring));
        if (p_.wraw) pipe_.InitBuffer(wrawB_, static_cast<uint32_t>(p_.wraw));
        if (p_.wf) pipe_.InitBuffer(wfB_, static_cast<uint32_t>(p_.wf));
        if (p_.acc) pipe_.InitBuffer(accB_, static_cast<uint32_t>(p_.acc));
        if (p_.xf) pipe_.InitBuffer(xfB_, static_cast<uint32_t>(p_.xf));
        pipe_.InitBuffer(tmpB_, static_cast<uint32_t>(p_.tmp));
        if (p_.t2) pipe_.InitBuffer(t2B_, static_cast<uint32_t>(p_.t2));
        if (p_.q) pipe_.InitBuffer(qB_, static_cast<uint32_t>(p_.q));
        if (p_.ln) pipe_.InitBuffer(lnB_, static_cast<uint32_t>(p_.ln));
        pipe_.InitBuffer(lB_, static_cast<uint32_t>(p_.l));
        pipe_.InitBuffer(offB_, static_cast<uint32_t>(p_.off));
        pipe_.InitBuffer(vecB_, static_cast<uint32_t>(p_.vec));
        pipe_.InitBuffer(maskB_, static_cast<uint32_t>(p_.mask));
        pipe_.InitBuffer(brB_, static_cast<uint32_t>(p_.br));
        if (p_.q) q_ = qB_.Get<float>();
        l_ = lB_.Get<float>();
        off_ = offB_.Get<uint32_t>();
        if (p_.xf) xh_ = xfB_.Get<float>();
        gg_ = tmpB_.Get<float>();
        if (p_.t2) dyf_ = t2B_.Get<float>();
        if (p_.wf) wf_ = wfB_.Get<float>();
        if (p_.acc) acc_ = accB_.Get<float>();
        if (p_.ln) ln_ = lnB_.Get<float>();
        const uint32_t brBytes = static_cast<uint32_t>(p_.br / 2);
        brR_ = brB_.Get<float>();
        brC_ = brB_.Get<uint8_t>()[brBytes].ReinterpretCast<float>();
        const uint32_t gvB = Align32(static_cast<uint32_t>(p_.gv) * 4);
        LocalTensor<uint8_t> vb = vecB_.Get<uint8_t>();
        cv_ = vb[0].ReinterpretCast<float>();
        run_ = vb[gvB].ReinterpretCast<float>();
        rsv_ = vb[2 * gvB].ReinterpretCast<float>();
        mask_ = maskB_.Get<uint8_t>();
    }

    __aicore__ inline void LoadWeight()
    {
        if (!weight_ || p_.layout == dev::LAYOUT_STREAM) return;
        const int32_t H = a_.hidden;
        if (!p_.wWide) {
            LocalTensor<W> raw = wrawB_.Get<W>();
            for (int32_t c = 0; c < H; c += kTile) {
                const uint32_t n = Min32(kTile, static_cast<uint32_t>(H - c));
                LoadRows(raw[c], wGm_[c], 1, n * sizeof(W));
            }
            SyncPipes<HardEvent::MTE2_V>(pipe_);
            return;
        }
        const int32_t chunk = kW32 ? kTile : static_cast<int32_t>(Min32(kTile, p_.subTile * 2));
        for (int32_t c = 0; c < H; c += chunk) {
            const uint32_t n = Min32(chunk, static_cast<uint32_t>(H - c));
            if constexpr (kW32) {
                LoadRows(wf_[c], wGm_[c], 1, n * 4);
            } else {
                LocalTensor<W> stage = xh_.ReinterpretCast<W>();
                if (c > 0) SyncPipes<HardEvent::V_MTE2>(pipe_);
                LoadRows(stage, wGm_[c], 1, n * sizeof(W));
                SyncPipes<HardEvent::MTE2_V>(pipe_);
                Cast(wf_[c], stage, RoundMode::CAST_NONE, n);
                PipeBarrier<PIPE_V>();
            }
        }
        if constexpr (kW32) SyncPipes<HardEvent::MTE2_V>(pipe_);
        if (offset_) {
            Adds(wf_, wf_, a_.offset, H);
            PipeBarrier<PIPE_V>();
        }
    }

    // LAYOUT_GROUP gathers the lanes from gg_ (the -0 cell after it), the others from ln_.
    __aicore__ inline LocalTensor<float> GatherSrc() const { return p_.layout == dev::LAYOUT_GROUP ? gg_ : ln_; }
    __aicore__ inline uint32_t CellElem() const
    {
        return p_.layout == dev::LAYOUT_GROUP ? static_cast<uint32_t>(p_.subTile) : static_cast<uint32_t>(p_.J) * 8;
    }

    __aicore__ inline void InitConstants()
    {
        const LocalTensor<float> src = GatherSrc();
        Duplicate(src[CellElem()], BitsFloat(kNegZeroBits), 8);
        PipeBarrier<PIPE_V>();
        LocalTensor<int32_t> offs = off_.ReinterpretCast<int32_t>();
        LocalTensor<int32_t> tmp = l_.ReinterpretCast<int32_t>();
        const int32_t cell = static_cast<int32_t>(CellElem() * 4);
        const int32_t last = a_.hidden - (p_.tiles - 1) * kTile;
        if (p_.layout == dev::LAYOUT_GROUP) {
            OffsetsRows(offs, tmp, p_.gp, p_.tiles, p_.P, last, cell);
        } else if (p_.layout == dev::LAYOUT_STREAM) {
            // every slot reads the one row's lanes: each slot's sum is that row's tile partial
            for (int32_t k = 0; k < 8; ++k) Duplicate(offs[k * p_.J], 4 * k, p_.J);
            PipeBarrier<PIPE_V>();
        } else {
            OffsetsPacked(offs, tmp, p_.J, p_.gp, p_.tiles, last, cell);
        }
    }

    // ---- ring slots -----------------------------------------------------------------------------
    // The ring: dySlots dy slots, then ringSlots of x rows (dx is written over them) with the residual's
    // gradient rows (gro_) and their rstd.
    __aicore__ inline LocalTensor<D> SlotDy(int32_t d)
    {
        return ringB_.Get<uint8_t>()[static_cast<uint32_t>(d * p_.slotA)].template ReinterpretCast<D>();
    }
    __aicore__ inline LocalTensor<uint8_t> Slot(int32_t b)
    {
        return ringB_.Get<uint8_t>()[static_cast<uint32_t>(p_.dySlots * p_.slotA + b * (p_.slotB + p_.slotC + p_.slotD))];
    }
    __aicore__ inline LocalTensor<T> SlotX(int32_t b) { return Slot(b).template ReinterpretCast<T>(); }
    __aicore__ inline LocalTensor<T> SlotGro(int32_t b)
    {
        return Slot(b)[static_cast<uint32_t>(p_.slotB)].template ReinterpretCast<T>();
    }
    __aicore__ inline LocalTensor<float> SlotRs(int32_t b)
    {
        return Slot(b)[static_cast<uint32_t>(p_.slotB + p_.slotC)].template ReinterpretCast<float>();
    }
    // UB blocks between dy rows so they sit at x's pitch
    __aicore__ inline uint32_t DyGap(uint32_t pitch) const
    {
        return (pitch * sizeof(D) - Align32(static_cast<uint32_t>(a_.hidden) * sizeof(D))) / 32;
    }

    // ---- the block's groups: groups never span dw chunks ---------------------------------------------
    __aicore__ inline int64_t GroupsPerChunk() const { return (chunkRows_ + p_.G - 1) / p_.G; }
    __aicore__ inline int64_t GroupCount() const
    {
        const int64_t gpc = GroupsPerChunk();
        const int64_t left = a_.rows - (kEnd_ - 1) * chunkRows_;  // rows of the block's last chunk
        const int64_t lastRows = left < chunkRows_ ? left : chunkRows_;
        return (kEnd_ - kBegin_ - 1) * gpc + (lastRows + p_.G - 1) / p_.G;
    }
    // group g: first row, rows, chunk, and whether it is the first / last group of its chunk
    __aicore__ inline void GroupAt(int64_t g, int64_t& row0, int32_t& n, int64_t& k, bool& first, bool& last) const
    {
        const int64_t gpc = GroupsPerChunk();
        k = kBegin_ + g / gpc;
        const int64_t gi = g % gpc;
        const int64_t kEndRow = (k + 1) * chunkRows_ < a_.rows ? (k + 1) * chunkRows_ : a_.rows;
        row0 = k * chunkRows_ + gi * p_.G;
        const int64_t left = kEndRow - row0;
        n = left < p_.G ? static_cast<int32_t>(left) : p_.G;
        first = gi == 0;
        last = row0 + n == kEndRow;
    }

    __aicore__ inline void LoadGroup(int64_t g)
    {
        if (p_.layout != dev::LAYOUT_GROUP) {
            LoadTiles(g, true, true);
            return;
        }
        int64_t row0, k;
        int32_t n;
        bool first, last;
        GroupAt(g, row0, n, k, first, last);
        const int32_t b = static_cast<int32_t>(g % p_.ringSlots);
        const uint64_t at = static_cast<uint64_t>(row0) * a_.hidden;
        ring_.BeforeLoad(pipe_, b);
        LoadRows(SlotDy(b), dyGm_[at], n, a_.hidden * sizeof(D), DyGap(p_.P));
        LoadRows(SlotX(b), xGm_[at], n, a_.hidden * sizeof(T));
        if (gro_) LoadRows(SlotGro(b), groGm_[at], n, a_.hidden * sizeof(T));
        LoadRows(SlotRs(b), rstdGm_[row0], 1, static_cast<uint32_t>(n) * 4);
        ring_.AfterLoad(b);
    }

    // LAYOUT_TILED, each tile its own ring unit, so a row's first tile is worked on while its last
    // one is still coming in. Group g's x tiles (the rstd with the first) into its slot, and/or its dy
    // tiles into dy slot g % dySlots, each once V has read that tile of the row before in the slot (with
    // fewer dy slots than x slots a dy tile is free before its dx is stored).
    __aicore__ inline void LoadTiles(int64_t g, bool x, bool dy)
    {
        int64_t row0, k;
        int32_t n;
        bool first, last;
        GroupAt(g, row0, n, k, first, last);
        const int32_t b = static_cast<int32_t>(g % p_.ringSlots), d = static_cast<int32_t>(g % p_.dySlots);
        for (int32_t t = 0; t < p_.tiles; ++t) {
            const int32_t c = t * kTile, u = d * p_.tiles + t;
            const uint32_t len = Min32(kTile, static_cast<uint32_t>(a_.hidden - c));
            const uint64_t at = static_cast<uint64_t>(row0) * a_.hidden + c;
            if (x) {
                ring_.BeforeLoad(pipe_, Unit(b, t));
                if (t == 0) LoadRows(SlotRs(b), rstdGm_[row0], 1, 4);
                LoadRows(SlotX(b)[c], xGm_[at], 1, len * sizeof(T));
                if (gro_) LoadRows(SlotGro(b)[c], groGm_[at], 1, len * sizeof(T));
            }
            if (dy) {
                if (dyPending_[u]) {
                    WaitFlag<HardEvent::V_MTE2>(dyFree_[u]);
                    dyPending_[u] = false;
                }
                LoadRows(SlotDy(d)[c], dyGm_[at], 1, len * sizeof(D));
                ring_.AfterLoad(Unit(b, t));
            }
        }
    }

    // LAYOUT_TILED: the ring unit of tile t of slot b (the plan keeps ringSlots * tiles <= kMaxRingUnits).
    __aicore__ inline int32_t Unit(int32_t b, int32_t t) const { return b * p_.tiles + t; }

    // V has read tile t of dy slot d for the last time (with fewer dy slots than x slots, the next
    // row's dy may come in).
    __aicore__ inline void DyRead(int32_t d, int32_t t)
    {
        if (p_.dySlots == p_.ringSlots) return;
        SetFlag<HardEvent::V_MTE2>(dyFree_[d * p_.tiles + t]);
        dyPending_[d * p_.tiles + t] = true;
    }

    // dx of tile t of slot b to GM, and the tile's unit free for the next load.
    __aicore__ inline void StoreDx(int32_t b, int64_t row0, int32_t t)
    {
        const int32_t c = t * kTile;
        const uint32_t m = Min32(kTile, static_cast<uint32_t>(a_.hidden - c));
        ring_.BeforeStore(Unit(b, t));
        StoreRows(dxGm_[static_cast<uint64_t>(row0) * a_.hidden + c], SlotX(b)[c], 1, m * sizeof(T));
        ring_.AfterStore(Unit(b, t));
    }

    // ---- dw partials --------------------------------------------------------------------------------
    // Rows in UB store a chunk's partial to the workspace tile by tile as soon as the chunk's last row
    // has added into it (LAYOUT_TILED: into that tile; the dx work runs meanwhile), with an event per
    // accumulator and tile: the next chunk's first row waits only for the tile it adds into, not for
    // the whole partial (the plan keeps accs * tiles <= kMaxAccEvents).
    __aicore__ inline bool EarlyPieces() const { return p_.layout != dev::LAYOUT_STREAM && wantDw_ && !direct_; }
    __aicore__ inline int32_t AccEvents() const { return EarlyPieces() ? p_.accs * p_.tiles : p_.accs; }
    __aicore__ inline int32_t AccEvent(int32_t piece) const { return EarlyPieces() ? cur_ * p_.tiles + piece : cur_; }
    // LAYOUT_TILED with fewer dy slots than x slots: an event per dy tile, set once V has read it.
    __aicore__ inline int32_t DyEvents() const { return p_.dySlots < p_.ringSlots ? p_.dySlots * p_.tiles : 0; }

    // acc[0, n) += p (the first row of a chunk: acc = p + 0, which is +0 + p exactly)
    __aicore__ inline void Accumulate(const LocalTensor<float>& acc, const LocalTensor<float>& p, uint32_t n, bool start)
    {
        if (start) {
            const int32_t e = AccEvent(piece_);
            if (accPending_[e]) {  // the partial it held before has left the accumulator
                WaitFlag<HardEvent::MTE3_V>(accEvt_[e]);
                accPending_[e] = false;
            }
            Adds(acc, p, 0.0f, n);
        } else {
            Add(acc, acc, p, n);
        }
    }

    // The partial of chunk k (acc holds columns [col, col + n)) to the workspace, or, when this launch
    // finishes dw itself, canonical-NaN'd and cast to the weight's dtype.
    __aicore__ inline void StorePartial(int64_t k, const LocalTensor<float>& acc, int32_t col, int32_t n)
    {
        if (direct_) {
            for (int32_t c = 0; c < n; c += p_.subTile) {  // the mask holds subTile bits
                Canon(acc[c], mask_, Align64Elems(Min32(p_.subTile, static_cast<uint32_t>(n - c))));
            }
            if constexpr (!kW32) {
                LocalTensor<W> out = gg_.ReinterpretCast<W>();
                for (int32_t c = 0; c < n; c += p_.subTile * 2) {
                    const uint32_t m = Min32(p_.subTile * 2, static_cast<uint32_t>(n - c));
                    Cast(out, acc[c], RoundMode::CAST_RINT, m);
                    SyncPipes<HardEvent::V_MTE3>(pipe_);
                    StoreRows(dwGm_[col + c], out, 1, m * sizeof(W));
                    SyncPipes<HardEvent::MTE3_V>(pipe_);
                }
                return;
            } else {
                SyncPipes<HardEvent::V_MTE3>(pipe_);
                for (int32_t c = 0; c < n; c += kTile) {
                    const uint32_t m = Min32(kTile, static_cast<uint32_t>(n - c));
                    StoreRows(dwGm_[col + c], acc[c], 1, m * 4);
                }
            }
        } else {
            SyncPipes<HardEvent::V_MTE3>(pipe_);
            const uint64_t base = static_cast<uint64_t>(k) * a_.hidden + col;
            for (int32_t c = 0; c < n; c += kTile) {
                const uint32_t m = Min32(kTile, static_cast<uint32_t>(n - c));
                StoreRows(wsGm_[base + c], acc[c], 1, m * 4);
            }
        }
        SetFlag<HardEvent::MTE3_V>(accEvt_[cur_]);
        accPending_[cur_] = true;
    }

    // Tile t of chunk k's partial to the workspace (EarlyPieces).
    __aicore__ inline void StorePiece(int64_t k, int32_t t)
    {
        const int32_t off = t * kTile;
        const uint32_t len = Min32(kTile, static_cast<uint32_t>(a_.hidden - off));
        SyncPipes<HardEvent::V_MTE3>(pipe_);
        StoreRows(wsGm_[static_cast<uint64_t>(k) * a_.hidden + off], acc_[off], 1, len * 4);
        SetFlag<HardEvent::MTE3_V>(accEvt_[AccEvent(t)]);
        accPending_[AccEvent(t)] = true;
    }

    // ---- LAYOUT_GROUP and LAYOUT_TILED: whole rows in the ring -----------------------------------------
    __aicore__ inline void RunRows()
    {
        const int64_t groups = GroupCount();
        // LAYOUT_TILED with fewer dy slots: x runs ringSlots groups ahead, dy dySlots
        const bool split = p_.dySlots < p_.ringSlots;
        for (int64_t g = 0; g < groups && g < p_.ringSlots; ++g) {
            if (split) {
                LoadTiles(g, true, false);
            } else {
                LoadGroup(g);
            }
        }
        for (int64_t g = 0; split && g < groups && g < p_.dySlots; ++g) LoadTiles(g, false, true);
        InitConstants();
        for (int64_t g = 0; g < groups; ++g) {
            int64_t row0, k;
            int32_t n;
            bool first, last;
            GroupAt(g, row0, n, k, first, last);
            const int32_t b = static_cast<int32_t>(g % p_.ringSlots);
            cur_ = static_cast<int32_t>(k % p_.accs);
            if (p_.acc) acc_ = accB_.Get<float>()[static_cast<uint32_t>(cur_ * (p_.acc / p_.accs / 4))];
            if (p_.layout == dev::LAYOUT_GROUP) {
                ring_.BeforeCompute(b);
                ComputeGroup(b, n, k, first, last);
                if (wantDw_ && last && !EarlyPieces()) StorePartial(k, acc_, 0, a_.hidden);
                if (wantDx_) {
                    ring_.BeforeStore(b);
                    StoreRows(dxGm_[static_cast<uint64_t>(row0) * a_.hidden], SlotX(b), n, a_.hidden * sizeof(T));
                    ring_.AfterStore(b);
                } else {
                    ring_.AfterComputeOnly(b);
                }
            } else {
                ComputeTiled(b, static_cast<int32_t>(g % p_.dySlots), row0, k, first, last);
                if (wantDw_ && last && !EarlyPieces()) StorePartial(k, acc_, 0, a_.hidden);
            }
            if (!split) {
                if (g + p_.ringSlots < groups) LoadGroup(g + p_.ringSlots);
            } else {
                // dy first: the MTE2 queue is in order, and the x slot waits for a dx store
                if (g + p_.dySlots < groups) LoadTiles(g + p_.dySlots, false, true);
                if (g + p_.ringSlots < groups) LoadTiles(g + p_.ringSlots, true, false);
            }
        }
    }

    // Per-row steps of a group: dst[r] = src[r] * f[r] (f: one broadcast block per row), or * w.
    __aicore__ inline void RowsMulF(const LocalTensor<float>& dst, const LocalTensor<float>& src,
                                    const LocalTensor<float>& f, int32_t n)
    {
        if (p_.stripes) {
            StripeMulB(dst, src, f, a_.hidden, n, static_cast<uint8_t>(p_.P / 8));
        } else {
            for (int32_t r = 0; r < n; ++r) RowMulB(dst[r * p_.P], src[r * p_.P], f[r * 8], a_.hidden);
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

    // A group of n rows, every step over all of them: xh (fp32 x: in place in the slot), dy widened
    // and then g = dy*w (fp32 dy: in place), the dw terms and then g*xh in gg_ (reduced there, the
    // lanes gathered from there), dx = rstd*(g - xh*c) over xh, cast over x.
    __aicore__ inline void ComputeGroup(int32_t b, int32_t n, int64_t k, bool first, bool last)
    {
        const int32_t H = a_.hidden;
        const uint32_t P = p_.P, cnt = static_cast<uint32_t>(n) * P, canon = Align64Elems(cnt);
        const uint8_t rep = static_cast<uint8_t>(P / 8);
        const LocalTensor<T> X = SlotX(b);
        const LocalTensor<D> DY = SlotDy(b);
        Brcb(brR_, SlotRs(b), static_cast<uint8_t>(p_.gp / 8), BrcbRepeatParams(1, 8));
        LocalTensor<float> xh, dyf;
        if constexpr (kF32) {
            xh = X;
        } else {
            Cast(xh_, X, RoundMode::CAST_NONE, cnt);
            xh = xh_;
        }
        if constexpr (kDy32) {
            dyf = DY;
        } else {
            Cast(dyf_, DY, RoundMode::CAST_NONE, cnt);
            dyf = dyf_;
        }
        PipeBarrier<PIPE_V>();
        RowsMulF(xh, xh, brR_, n);  // xh = x * rstd
        // the dw terms dy*xh; g = dy*w over dy (after the terms have read it: the pipe is in order)
        if (wantDw_) Mul(gg_, dyf, xh, cnt);
        if (weight_ && wantDx_) {
            RowsMulW(dyf, n);
        } else {
            PipeBarrier<PIPE_V>();
        }
        if (wantDw_) {  // added to the chunk's partial in row order
            int32_t r0 = 0;
            if (first) {  // tile by tile: each waits only for its own part of the partial to have left
                for (int32_t t = 0; t < p_.tiles; ++t) {
                    const int32_t off = t * kTile;
                    piece_ = t;
                    Accumulate(acc_[off], gg_[off], Min32(kTile, static_cast<uint32_t>(H - off)), true);
                }
                PipeBarrier<PIPE_V>();
                r0 = 1;
            }
            if (p_.stripes) {
                if (n > r0) StripeAccumulate(acc_, gg_[r0 * P], H, n - r0, rep);
            } else {
                for (int32_t r = r0; r < n; ++r) {
                    Add(acc_, acc_, gg_[r * P], H);
                    PipeBarrier<PIPE_V>();
                }
            }
            if (last && EarlyPieces()) {  // the partial leaves while dx is made
                for (int32_t t = 0; t < p_.tiles; ++t) StorePiece(k, t);
            }
        }
        if (!wantDx_) return;
        // c = tree(g * xh) / H per row
        Mul(gg_, dyf, xh, cnt);
        PipeBarrier<PIPE_V>();
        if (p_.stripes) {
            StripeTree(gg_, H, n, rep);
        } else {
            SegTree(gg_, n, P, p_.tiles, H - (p_.tiles - 1) * kTile);
        }
        LaneReduce(l_, gg_, off_, p_.J, p_.tiles, p_.gp);
        Muls(cv_, l_, a_.invH, p_.gp);
        PipeBarrier<PIPE_V>();
        Brcb(brC_, cv_, static_cast<uint8_t>(p_.gp / 8), BrcbRepeatParams(1, 8));
        PipeBarrier<PIPE_V>();
        // dx = rstd * (g - xh * c), canonical NaN, cast over x
        RowsMulF(xh, xh, brC_, n);
        Sub(xh, dyf, xh, cnt);
        PipeBarrier<PIPE_V>();
        RowsMulF(xh, xh, brR_, n);
        if (gro_) AddGro(X, xh, dyf, SlotGro(b), cnt);  // g is spent: dyf widens the gradient
        Canon(xh, mask_, canon);
        if constexpr (!kF32) Cast(X, xh, RoundMode::CAST_RINT, cnt);
    }

    // The terms of the piece of n elements at `at` (its place in the work buffers: Lead(at)), in two
    // barrier windows: xh into xh_, dy widened into dyf_ (fp32 dy is used where it is), g = dy*w into
    // gg_ (a raw weight piece is widened into gg_ first and multiplied in place); g is the widened dy
    // when there is no weight or it is not needed.
    struct Terms {
        LocalTensor<float> xh, dyf, g;
    };
    __aicore__ inline Terms SubTerms(const LocalTensor<T>& X, const LocalTensor<D>& DY, int32_t at, uint32_t n,
                                     int32_t wAt, const LocalTensor<float>& fr, bool needG = true)
    {
        const bool g = weight_ && needG;
        const bool raw = g && !p_.wWide;
        const bool rawF32 = raw && kW32 && !offset_;  // used where it is
        const uint32_t lead = Lead(at);  // wAt is at plus a multiple of 16 (a tile or ring slot)
        Terms t;
        t.xh = xh_[lead];
        if constexpr (kDy32) {
            t.dyf = DY[at];
        } else {
            t.dyf = dyf_[lead];
        }
        const LocalTensor<float> gw = gg_[lead];
        if constexpr (kF32) {
            RowMulB(t.xh, X[at], fr, n);
        } else {
            Cast(xh_, X[at - lead], RoundMode::CAST_NONE, n + lead);
        }
        if constexpr (!kDy32) Cast(dyf_, DY[at - lead], RoundMode::CAST_NONE, n + lead);
        if (raw && !rawF32) {  // the weight piece as the formula uses it: fp32, plus the offset
            if constexpr (kW32) {
                Adds(gw, WeightRaw()[wAt], a_.offset, n);
            } else {
                Cast(gg_, WeightRaw()[wAt - lead], RoundMode::CAST_NONE, n + lead);
                if (offset_) {
                    PipeBarrier<PIPE_V>();
                    Adds(gw, gw, a_.offset, n);
                }
            }
        }
        PipeBarrier<PIPE_V>();
        if constexpr (!kF32) RowMulB(t.xh, t.xh, fr, n);
        if (g) {
            if (!raw) {
                Mul(gw, t.dyf, wf_[wAt], n);
            } else if (rawF32) {
                Mul(gw, t.dyf, WeightRaw()[wAt].template ReinterpretCast<float>(), n);
            } else {
                Mul(gw, t.dyf, gw, n);
            }
        }
        PipeBarrier<PIPE_V>();
        t.g = g ? gw : t.dyf;
        return t;
    }

    __aicore__ inline LocalTensor<W> WeightRaw() { return wrawB_.Get<W>()[wRawAt_]; }

    // add_rms_norm's backward: dx = cast_x(float(dx in x's dtype) + float(gro)), what autograd gives for
    // the two calls apart (one fp32 add, one rounding), into dx (fp32, cnt elements); the caller makes
    // its NaNs canonical and casts it into dst. A 16-bit dx is rounded into dst and widened back, the
    // gradient widened into `wide` (fp32 scratch of cnt elements).
    __aicore__ inline void AddGro(const LocalTensor<T>& dst, const LocalTensor<float>& dx, const LocalTensor<float>& wide,
                                  const LocalTensor<T>& gro, uint32_t cnt)
    {
        if constexpr (kF32) {
            Add(dx, dx, gro, cnt);
        } else {
            Cast(dst, dx, RoundMode::CAST_RINT, cnt);
            Cast(wide, gro, RoundMode::CAST_NONE, cnt);
            PipeBarrier<PIPE_V>();
            Cast(dx, dst, RoundMode::CAST_NONE, cnt);
            PipeBarrier<PIPE_V>();
            Add(dx, dx, wide, cnt);
        }
        PipeBarrier<PIPE_V>();
    }

    // dx of n elements, rstd * (g - xh * c), from the piece's terms (xh worked on in place) and the
    // broadcast blocks, plus (gro_) the residual's gradient at groAt of ring slot b, into dst.
    __aicore__ inline void DxTerms(const LocalTensor<T>& dst, const Terms& t, uint32_t n, const LocalTensor<float>& fc,
                                   const LocalTensor<float>& fr, int32_t b, int32_t groAt)
    {
        RowMulB(t.xh, t.xh, fc, n);
        PipeBarrier<PIPE_V>();
        Sub(t.xh, t.g, t.xh, n);
        PipeBarrier<PIPE_V>();
        RowMulB(t.xh, t.xh, fr, n);
        PipeBarrier<PIPE_V>();
        if (gro_) AddGro(dst, t.xh, gg_, SlotGro(b)[groAt], n);  // g is spent: gg_ widens the gradient
        Canon(t.xh, mask_, Align64Elems(n));
        if constexpr (kF32) {
            DataCopy(dst, t.xh, (n + 7) / 8 * 8);
        } else {
            Cast(dst, t.xh, RoundMode::CAST_RINT, n);
        }
    }

    // One tile of one row: with dwTerms, the dw terms into acc_[off] (accStart: the chunk's first row); the products
    // g*xh into q_ with the tree's first level fused, then the tree; lanes to ln_[8 * slot]. Per
    // sub-tile four barrier windows: casts; xh and g; the products and (in place over xh) the dw
    // terms; their sums.
    __aicore__ inline void TileA(const LocalTensor<T>& X, const LocalTensor<D>& DY, int32_t off, int32_t len, int32_t wOff,
                                 bool dwTerms, bool accStart, int32_t slot, bool products, const LocalTensor<float>& fr)
    {
        const int32_t h = FusedHalf(len);
        const bool dw = wantDw_ && dwTerms;
        for (int32_t a = 0; a < len;) {
            const int32_t lim = a < h ? h : len;
            const uint32_t n = Min32(p_.subTile, static_cast<uint32_t>(lim - a));
            const Terms t = SubTerms(X, DY, off + a, n, wOff + a, fr, products);
            const LocalTensor<float> prod = gg_[Lead(off + a)];  // the second half's products (over g)
            if (products) Mul(a < h ? q_[a] : prod, t.g, t.xh, n);
            if (dw) Mul(t.xh, t.dyf, t.xh, n);  // after the products have read xh: the pipe is in order
            PipeBarrier<PIPE_V>();
            if (dw) Accumulate(acc_[off + a], t.xh, n, accStart);
            if (products && a >= h) Add(q_[a - h], q_[a - h], prod, n);
            if (dw || (products && a >= h)) PipeBarrier<PIPE_V>();
            a += static_cast<int32_t>(n);
        }
        if (products) {
            if (h < len) HalveToLanes(q_, h);
            DataCopy(ln_[slot * 8], q_, 8);
        }
    }

    // One row: pass 1 tile by tile (each tile once it is in), c, then pass 2 tile by tile, each
    // tile's dx stored as soon as it is made.
    __aicore__ inline void ComputeTiled(int32_t b, int32_t d, int64_t row0, int64_t k, bool first, bool last)
    {
        const int32_t H = a_.hidden;
        const LocalTensor<T> X = SlotX(b);
        const LocalTensor<D> DY = SlotDy(d);
        ring_.BeforeCompute(Unit(b, 0));
        Brcb(brR_, SlotRs(b), 1, BrcbRepeatParams(1, 8));
        PipeBarrier<PIPE_V>();
        wRawAt_ = 0;
        for (int32_t t = 0; t < p_.tiles; ++t) {
            const int32_t off = t * kTile, len = H - off < kTile ? H - off : kTile;
            if (t > 0) ring_.BeforeCompute(Unit(b, t));
            piece_ = t;
            TileA(X, DY, off, len, off, true, first, t * p_.gp, wantDx_, brR_);
            if (last && EarlyPieces()) StorePiece(k, t);
            if (!wantDx_) {
                DyRead(d, t);
                ring_.AfterComputeOnly(Unit(b, t));
            }
        }
        if (!wantDx_) return;
        PipeBarrier<PIPE_V>();
        LaneReduce(l_, ln_, off_, p_.J, p_.tiles, p_.gp);
        Muls(cv_, l_, a_.invH, p_.gp);
        PipeBarrier<PIPE_V>();
        Brcb(brC_, cv_, static_cast<uint8_t>(p_.gp / 8), BrcbRepeatParams(1, 8));
        PipeBarrier<PIPE_V>();
        for (int32_t t = 0; t < p_.tiles; ++t) {
            const int32_t off = t * kTile, len = H - off < kTile ? H - off : kTile;
            for (int32_t a = 0; a < len; a += p_.subTile) {
                const uint32_t n = Min32(p_.subTile, static_cast<uint32_t>(len - a));
                DxTerms(X[off + a], SubTerms(X, DY, off + a, n, off + a, brR_), n, brC_, brR_, b, off + a);
            }
            DyRead(d, t);
            StoreDx(b, row0, t);
        }
    }

    // ---- LAYOUT_STREAM: tiles from GM. Per chunk: pass 1, row by row, c of every row (dy and x read
    // once); pass 2, tile by tile over the chunk's rows (read again), dx and the tile's dw partial.
    // Job j of a chunk: pass 1 for j < rows*tiles (row j / tiles, tile j % tiles), then pass 2
    // (tile (j - rows*tiles) / rows, row (j - rows*tiles) % rows).
    __aicore__ inline void JobAt(int64_t j, int64_t chunkRows, int32_t& pass, int32_t& r, int32_t& t) const
    {
        const int64_t p1 = chunkRows * p_.tiles;
        if (j < p1) {
            pass = 0;
            r = static_cast<int32_t>(j / p_.tiles);
            t = static_cast<int32_t>(j % p_.tiles);
        } else {
            pass = 1;
            t = static_cast<int32_t>((j - p1) / chunkRows);
            r = static_cast<int32_t>((j - p1) % chunkRows);
        }
    }

    __aicore__ inline void LoadJob(int64_t k, int64_t j, int64_t chunkRows, int64_t seq)
    {
        int32_t pass, r, t;
        JobAt(j, chunkRows, pass, r, t);
        const int32_t b = static_cast<int32_t>(seq % p_.ringSlots);
        const int32_t off = t * kTile, len = a_.hidden - off < kTile ? a_.hidden - off : kTile;
        const uint64_t at = static_cast<uint64_t>(k * chunkRows_ + r) * a_.hidden + off;
        ring_.BeforeLoad(pipe_, b);
        LoadRows(SlotDy(b), dyGm_[at], 1, len * sizeof(D));
        LoadRows(SlotX(b), xGm_[at], 1, len * sizeof(T));
        if (gro_ && pass == 1) LoadRows(SlotGro(b), groGm_[at], 1, len * sizeof(T));  // dx is made in pass 2
        if (weight_) LoadRows(wrawB_.Get<W>()[b * kTile], wGm_[off], 1, len * sizeof(W));
        ring_.AfterLoad(b);
    }

    __aicore__ inline void RunStream()
    {
        const int32_t H = a_.hidden, tiles = p_.tiles;
        int64_t seq = 0;  // jobs of the block so far: a job's ring slot is seq % ringSlots
        for (int64_t k = kBegin_; k < kEnd_; ++k) {
            const int64_t first = k * chunkRows_;
            const int64_t rows = (a_.rows - first) < chunkRows_ ? (a_.rows - first) : chunkRows_;
            const int64_t p1 = wantDx_ ? rows * tiles : 0;  // without dx, only pass 2 (the dw terms)
            const int64_t jobs = p1 + rows * tiles;
            // the chunk's rstd, one block per row
            SyncPipes<HardEvent::V_MTE2>(pipe_);
            LoadRows(rsv_, rstdGm_[first], 1, static_cast<uint32_t>(rows) * 4);
            SyncPipes<HardEvent::MTE2_V>(pipe_);
            Brcb(brR_, rsv_, static_cast<uint8_t>((rows + 7) / 8), BrcbRepeatParams(1, 8));
            PipeBarrier<PIPE_V>();
            const int64_t base = seq;
            auto job = [&](int64_t j) { return wantDx_ ? j : j + rows * tiles; };
            int64_t next = 0;
            for (; next < jobs && next < p_.ringSlots; ++next) LoadJob(k, job(next), rows, base + next);
            if (k == kBegin_) InitConstants();
            for (int64_t j = 0; j < jobs; ++j) {
                int32_t pass, r, t;
                JobAt(job(j), rows, pass, r, t);
                const int32_t b = static_cast<int32_t>((base + j) % p_.ringSlots);
                const int32_t off = t * kTile, len = H - off < kTile ? H - off : kTile;
                const LocalTensor<T> X = SlotX(b);
                const LocalTensor<D> DY = SlotDy(b);
                const LocalTensor<float> fr = brR_[r * 8];
                wRawAt_ = b * kTile;
                ring_.BeforeCompute(b);
                if (pass == 0) {
                    if (t == 0) {
                        Duplicate(run_, BitsFloat(kNegZeroBits), 8);  // -0 + p0 = p0: tiles left to right
                        PipeBarrier<PIPE_V>();
                    }
                    if (t == tiles - 1 && len < 8) PadLanes(len, true);
                    TileA(X, DY, 0, len, 0, false, false, 0, true, fr);  // pass 1: c only, dw in pass 2
                    PipeBarrier<PIPE_V>();
                    LaneReduce(l_, ln_, off_, p_.J, 1, p_.gp);
                    Add(run_, run_, l_, 8);
                    PipeBarrier<PIPE_V>();
                    if (t == tiles - 1 && len < 8) PadLanes(len, false);
                    if (t == tiles - 1) {
                        Muls(brC_[r * 8], run_, a_.invH, 8);
                        PipeBarrier<PIPE_V>();
                    }
                    ring_.AfterComputeOnly(b);
                } else {
                    for (int32_t a = 0; a < len; a += p_.subTile) {
                        const uint32_t n = Min32(p_.subTile, static_cast<uint32_t>(len - a));
                        const Terms terms = SubTerms(X, DY, a, n, a, fr, wantDx_);
                        if (wantDw_) {
                            Mul(terms.dyf, terms.dyf, terms.xh, n);  // over dy: g is in gg_ (no weight: no dw)
                            PipeBarrier<PIPE_V>();
                            Accumulate(acc_[a], terms.dyf, n, r == 0);
                            PipeBarrier<PIPE_V>();
                        }
                        if (wantDx_) DxTerms(X[a], terms, n, brC_[r * 8], fr, b, a);
                    }
                    if (wantDx_) {
                        ring_.BeforeStore(b);
                        StoreRows(dxGm_[static_cast<uint64_t>(first + r) * H + off], X, 1, len * sizeof(T));
                        ring_.AfterStore(b);
                    } else {
                        ring_.AfterComputeOnly(b);
                    }
                    if (wantDw_ && r == rows - 1) StorePartial(k, acc_, off, len);
                }
                for (; next < jobs && next < j + 1 + p_.ringSlots; ++next) LoadJob(k, job(next), rows, base + next);
            }
            seq = base + jobs;
        }
    }

    // The last tile's missing lanes (len < 8) read the -0 cell while it is reduced.
    __aicore__ inline void PadLanes(int32_t len, bool pad)
    {
        LocalTensor<int32_t> offs = off_.ReinterpretCast<int32_t>();
        for (int32_t k = len; k < 8; ++k) {
            Duplicate(offs[k * p_.J], pad ? static_cast<int32_t>(CellElem() * 4) : 4 * k, p_.J);
        }
        PipeBarrier<PIPE_V>();
    }

    BwdArgs a_;
    dev::Plan p_;
    int64_t chunkRows_ = kDwChunkRows, chunks_ = 0, kBegin_ = 0, kEnd_ = 0;
    bool weight_ = false, offset_ = false, wantDx_ = false, wantDw_ = false, direct_ = false, gro_ = false;
    bool accPending_[kMaxAccEvents] = {};
    int32_t cur_ = 0;    // the accumulator of the chunk being summed
    int32_t piece_ = 0;  // the tile being added into (EarlyPieces)
    int32_t wRawAt_ = 0;
    event_t accEvt_[kMaxAccEvents] = {};
    bool dyPending_[kMaxRingUnits] = {};
    event_t dyFree_[kMaxRingUnits] = {};
    TPipe pipe_;
    Ring ring_;
    TBuf<TPosition::VECIN> ringB_, wrawB_, wfB_, xfB_;
    TBuf<TPosition::VECOUT> accB_, tmpB_;  // tmpB_: also the staging of a 16-bit dw written directly
    TBuf<TPosition::VECIN> vecB_;  // the chunk's rstd is loaded into it (LAYOUT_STREAM)
    TBuf<TPosition::VECCALC> t2B_, qB_, lnB_, lB_, offB_, maskB_, brB_;
    LocalTensor<float> q_, l_, xh_, gg_, dyf_, wf_, acc_, ln_, brR_, brC_, cv_, run_, rsv_;
    LocalTensor<uint32_t> off_;
    LocalTensor<uint8_t> mask_;
    GlobalTensor<D> dyGm_;
    GlobalTensor<T> xGm_, dxGm_, groGm_;
    GlobalTensor<W> wGm_, dwGm_;
    GlobalTensor<float> rstdGm_, wsGm_;
};

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_BWD_BACKWARD_H_
