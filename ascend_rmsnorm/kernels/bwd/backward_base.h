// ascend-rmsnorm: the backward's base class: the set-up every path shares (GM tensors, UB buffers,
// the weight, the gather offsets, the ring slots, the block's groups within dw chunks, the dw
// partials, the residual's gradient). One class per path derives from it: bwd/backward_group.h
// directly, backward_tiled.h and backward_stream.h over bwd/backward_pieces.h (a row in pieces);
// the dw reduce is bwd/dw_reduce.h.

#ifndef ASCEND_RMSNORM_BWD_BACKWARD_BASE_H_
#define ASCEND_RMSNORM_BWD_BACKWARD_BASE_H_

#include "../common/kernel_base.h"
#include "dw_workspace.h"

namespace rmsnorm {

// dx per row; dw partials per chunk of R rows (each from +0, rows in order)
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
    int32_t lag;      // LAYOUT_GROUP: a group's steps after its tree beside the next group's
    int32_t dwSlice;  // the dw reduce's column slice: the workspace's layout (dw_workspace.h)
};

template <typename T, typename W, typename D>
class BackwardBase : public KernelBase {
protected:
    static constexpr bool kF32 = IsSame<T, float>::value;
    static constexpr bool kDy32 = IsSame<D, float>::value;
    static constexpr bool kW32 = IsSame<W, float>::value;
    // 16-bit dx: its canonical NaN is selected after the cast (CanonCast), from the register's 16-bit NaN
    static constexpr bool kNarrow = !kF32;

    __aicore__ inline BackwardBase(GM_ADDR dy, GM_ADDR x, GM_ADDR w, GM_ADDR rstd, GM_ADDR gro, GM_ADDR dx, GM_ADDR dw,
                                   GM_ADDR ws, const BwdArgs& a, TPipe* pipe)
        : KernelBase(pipe), a_(a)
    {
        chunkRows_ = a.chunkRows;
        chunks_ = (a.rows + chunkRows_ - 1) / chunkRows_;
        BlockShare(chunks_, kBegin_, kEnd_);
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
                ws_ = DwWorkspace{chunks_, a.hidden, a.dwSlice};
            }
        }
        dev::PlanShape s{a.hidden, sizeof(T), sizeof(W), sizeof(D), weight_, gro_, wantDw_};
        p_ = dev::BwdPlanFor(s, a.layout, a.G, a.ringSlots, a.subTile, a.wWide != 0, a.accs, a.dySlots, a.lag);
        ShareDx();
    }

    // Whether the block has chunks; then its buffers, its weight, the ring (LAYOUT_TILED: a unit per
    // tile of each row slot) and the events of the dw accumulators and dy tiles. End() waits for
    // what is still in flight and gives the events back.
    __aicore__ inline bool Begin()
    {
        if (kBegin_ >= kEnd_) return false;
        InitBuffers();
        if (weight_) LoadWeight(wGm_, xh_, a_.hidden, offset_, a_.offset);
        ring_.Init(*pipe_, p_.layout == dev::LAYOUT_TILED ? p_.ringSlots * p_.tiles : p_.ringSlots);  // constants: after the first loads
        for (int32_t i = 0; i < AccEvents(); ++i) accEvt_[i] = static_cast<event_t>(pipe_->AllocEventID<HardEvent::MTE3_V>());
        for (int32_t i = 0; i < DyEvents(); ++i) dyFree_[i] = static_cast<event_t>(pipe_->AllocEventID<HardEvent::V_MTE2>());
        return true;
    }
    __aicore__ inline void End()
    {
        for (int32_t i = 0; i < AccEvents(); ++i) {
            if (accPending_[i]) WaitFlag<HardEvent::MTE3_V>(accEvt_[i]);
            pipe_->ReleaseEventID<HardEvent::MTE3_V>(accEvt_[i]);
        }
        for (int32_t i = 0; i < DyEvents(); ++i) {
            if (dyPending_[i]) WaitFlag<HardEvent::V_MTE2>(dyFree_[i]);
            pipe_->ReleaseEventID<HardEvent::V_MTE2>(dyFree_[i]);
        }
        ring_.Release(*pipe_);
    }

    __aicore__ inline void InitBuffers()
    {
        InitRingAndWeight();
        if (p_.acc) pipe_->InitBuffer(accB_, static_cast<uint32_t>(p_.acc));
        if (p_.xf) pipe_->InitBuffer(xfB_, static_cast<uint32_t>(p_.xf));
        pipe_->InitBuffer(tmpB_, static_cast<uint32_t>(p_.tmp));
        if (p_.t2) pipe_->InitBuffer(t2B_, static_cast<uint32_t>(p_.t2));
        InitLanes();
        pipe_->InitBuffer(vecB_, static_cast<uint32_t>(p_.vec));
        pipe_->InitBuffer(maskB_, static_cast<uint32_t>(p_.mask));
        pipe_->InitBuffer(brB_, static_cast<uint32_t>(p_.br));
        if (p_.out) pipe_->InitBuffer(outB_, static_cast<uint32_t>(p_.out));
        const uint32_t lagged = p_.lag ? 2 : 1;
        if (p_.xf) xh_ = xfB_.Get<float>();
        if (p_.xf && p_.lag) xh2_ = xfB_.Get<uint8_t>()[static_cast<uint32_t>(p_.xf / 2)].template ReinterpretCast<float>();
        gg_ = tmpB_.Get<float>();
        if (p_.t2) dyf_ = t2B_.Get<float>();
        if (p_.t2 && p_.lag == dev::LAG_TWO_DY) dyf2_ = t2B_.Get<uint8_t>()[static_cast<uint32_t>(p_.t2 / 2)].template ReinterpretCast<float>();
        if (p_.acc) acc_ = accB_.Get<float>();
        const uint32_t brBytes = static_cast<uint32_t>(p_.br / (lagged + 1));
        brR_ = brB_.Get<float>();
        brC_ = brB_.Get<uint8_t>()[brBytes].template ReinterpretCast<float>();
        if (p_.lag) brR2_ = brB_.Get<uint8_t>()[2 * brBytes].template ReinterpretCast<float>();
        const uint32_t gvB = Align32(static_cast<uint32_t>(p_.gv) * 4);
        LocalTensor<uint8_t> vb = vecB_.Get<uint8_t>();
        cv_ = vb[0].ReinterpretCast<float>();
        run_ = vb[gvB].ReinterpretCast<float>();
        static_assert(kDwChunkRows <= 64, "rsv_ is one gv vector (gv >= 64 floats): a dw chunk's rstd fills it");
        rsv_ = vb[2 * gvB].ReinterpretCast<float>();
        nan_ = vb[3 * gvB].ReinterpretCast<float>();
        mask_ = maskB_.Get<uint8_t>();
    }

    // The NaN held in the compare-mask register (dx's: 16-bit x's own, else fp32's), and the lane-gather
    // offsets: LAYOUT_GROUP gathers the lanes from gg_ (the -0 cell after it), the others from ln_
    // (LAYOUT_STREAM sets its own after this).
    __aicore__ inline void InitConstants()
    {
        HoldNan(nan_, NanBits16<T>(), kNarrow);
        narrowHeld_ = kNarrow;
        LaneOffsets(p_.layout == dev::LAYOUT_GROUP ? gg_ : ln_, CellElem(), a_.hidden);
    }
    // The register holds the fp32 NaN (narrow false: an fp32 dw's Canon) or 16-bit x's (dx's CanonCast):
    // loaded again, between barriers, only when the other one is held. Only a block that finishes dw
    // itself ever switches (StorePartial), and LAYOUT_STREAM's dx may follow that.
    __aicore__ inline void HoldNanOf(bool narrow)
    {
        if (narrowHeld_ == narrow) return;
        PipeBarrier<PIPE_V>();
        SetCmpMask(NanOf(nan_, narrow));
        PipeBarrier<PIPE_V>();
        narrowHeld_ = narrow;
    }

    // c = (a row's sums) / H, one block per row in brC_ (the group and tiled paths), step s of CSteps(),
    // one per barrier window: the lanes in src (gg_, or ln_) gathered and reduced into l_
    // (LaneReduceStep), times 1/H into cv_, broadcast.
    __aicore__ inline int32_t CSteps() const { return LaneReduceSteps(p_.tiles) + 2; }
    __aicore__ inline void CStep(int32_t s, const LocalTensor<float>& src)
    {
        const int32_t lanes = LaneReduceSteps(p_.tiles);
        if (s < lanes) {
            LaneReduceStep(l_, src, off_, p_.J, p_.gp, s);
        } else if (s == lanes) {
            Muls(cv_, l_, a_.invH, p_.gp);
        } else {
            Brcb(brC_, cv_, static_cast<uint8_t>(p_.gp / 8), BrcbRepeatParams(1, 8));
        }
    }

    // The accumulator of chunk k.
    __aicore__ inline void SelectAcc(int64_t k)
    {
        cur_ = static_cast<int32_t>(k % p_.accs);
        if (p_.acc) acc_ = accB_.Get<float>()[static_cast<uint32_t>(cur_ * (p_.acc / p_.accs / 4))];
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
    // Its own groups (those of its chunks), then the groups it makes only dx of (ShareDx).
    __aicore__ inline int64_t GroupCount() const { return own_ + (fEnd_ - fBegin_); }
    // group g: first row, rows, chunk, and whether it is the first / last group of its chunk (a group
    // whose dx only is made here belongs to no chunk of this block: neither)
    __aicore__ inline void GroupAt(int64_t g, int64_t& row0, int32_t& n, int64_t& k, bool& first, bool& last) const
    {
        const int64_t gpc = GroupsPerChunk();
        int64_t gi;
        if (g < own_) {
            k = kBegin_ + g / gpc;
            gi = g % gpc;
        } else {  // the j-th shed group of heavy block h
            const int64_t s = fBegin_ + (g - own_), h = s / shed_, j = s % shed_;
            const int64_t hg = ((j + 1) * heavyGroups_ + shed_ - 1) / shed_ - 1;  // its group there
            k = (h * heavyGroups_ + hg) / gpc;  // a heavy block's chunks are whole
            gi = hg % gpc;
        }
        const int64_t kEndRow = (k + 1) * chunkRows_ < a_.rows ? (k + 1) * chunkRows_ : a_.rows;
        row0 = k * chunkRows_ + gi * p_.G;
        const int64_t left = kEndRow - row0;
        n = left < p_.G ? static_cast<int32_t>(left) : p_.G;
        first = g < own_ && gi == 0;
        last = g < own_ && row0 + n == kEndRow;
    }
    // Whether group g's dx / its dw terms are made here.
    __aicore__ inline bool GroupDx(int64_t g) const { return wantDx_ && !(heavy_ && Shed(g)); }
    // Whether a heavy block's group g is shed: shed_ of its heavyGroups_, spread evenly over them so
    // that their loads run beside the other groups' work.
    __aicore__ inline bool Shed(int64_t g) const { return ShedBefore(g + 1) > ShedBefore(g); }
    // Groups before group g whose dx is made here.
    __aicore__ inline int64_t DxBefore(int64_t g) const { return g - ShedBefore(g); }
    __aicore__ inline int64_t ShedBefore(int64_t g) const { return heavy_ ? g * shed_ / heavyGroups_ : 0; }
    __aicore__ inline bool GroupDw(int64_t g) const { return wantDw_ && g < own_; }

    // dx shared out (docs/design.md, "dx shared out"). When the blocks do not divide the dw chunks,
    // the first chunks % blocks blocks (heavy) sum one chunk more than the others (light). dx needs
    // no chunk: each heavy block leaves the dx of shed_ of its groups, spread over them (Shed), to the
    // light blocks, which make it after their own groups, each an even share in block order. The
    // bits do not move: a row's dx is made the same way wherever it is made, and each chunk's partial
    // is still summed in one block, its rows in order. The price is those rows' dy, x and rstd read
    // twice. The group and tiled paths (a group is a row there); not the stream path, whose rows of a
    // chunk are worked on together.
    __aicore__ inline void ShareDx()
    {
        const int64_t gpc = GroupsPerChunk();
        own_ = (kEnd_ - kBegin_) * gpc;
        if (kEnd_ > kBegin_ && kEnd_ * chunkRows_ > a_.rows) {  // its last chunk is short: the batch's last
            own_ += dev::PlanCeilDiv(a_.rows - (kEnd_ - 1) * chunkRows_, p_.G) - gpc;
        }
        if (!wantDx_ || !wantDw_ || gro_ || direct_ || p_.layout == dev::LAYOUT_STREAM) return;
        const int64_t blocks = GetBlockNum(), heavy = chunks_ % blocks, light = blocks - heavy;
        if (chunks_ < blocks || heavy == 0) return;
        heavyGroups_ = (chunks_ / blocks + 1) * gpc;
        // even: a group without dx still costs a heavy block its loads, about half a group, so a heavy
        // block's (chunks/blocks + 1) * gpc - even / 2 equals a light one's chunks/blocks * gpc +
        // even * heavy / light; cap: the rows read twice move at most 1/21 of the least bytes the
        // backward needs (dy and x read, dx written once), so its traffic stays within 1.05x of them
        const int64_t rowBytes = 2 * sizeof(T) + sizeof(D), readBytes = sizeof(T) + sizeof(D);
        const int64_t even = 2 * gpc * light / (light + 2 * heavy), cap = a_.rows * rowBytes / (21 * readBytes * heavy * p_.G);
        shed_ = even < cap ? even : cap;
        if (shed_ > heavyGroups_) shed_ = heavyGroups_;
        if (shed_ == 0) return;
        const int64_t b = GetBlockIdx();
        heavy_ = b < heavy;
        if (heavy_) return;
        const int64_t pool = heavy * shed_, li = b - heavy, each = pool / light, extra = pool % light;
        fBegin_ = li * each + (li < extra ? li : extra);
        fEnd_ = fBegin_ + each + (li < extra ? 1 : 0);
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
            // 16-bit dw (W is then x's dtype): cast, then the register's 16-bit NaN selected over the
            // cast's NaNs (a NaN's bits after a narrowing cast are not documented), subTile elements at a
            // time (the mask holds subTile bits), two pieces per store
            HoldNanOf(!kW32);
            if constexpr (!kW32) {
                LocalTensor<W> out = gg_.ReinterpretCast<W>();
                for (int32_t c = 0; c < n; c += p_.subTile * 2) {
                    const uint32_t m = Min32(p_.subTile * 2, static_cast<uint32_t>(n - c));
                    for (uint32_t h = 0; h < m; h += p_.subTile) {
                        const uint32_t e = Min32(p_.subTile, m - h);
                        if (h != 0) PipeBarrier<PIPE_V>();  // the first piece's select has read mask_
                        CanonCast(out[h], acc[c + static_cast<int32_t>(h)], mask_, Align64Elems(e), e);
                    }
                    SyncPipes<HardEvent::V_MTE3>(*pipe_);
                    StoreRows(dwGm_[col + c], out, 1, m * sizeof(W));
                    SyncPipes<HardEvent::MTE3_V>(*pipe_);
                }
                return;
            } else {
                for (int32_t c = 0; c < n; c += p_.subTile) {  // the mask holds subTile bits
                    Canon(acc[c], mask_, Align64Elems(Min32(p_.subTile, static_cast<uint32_t>(n - c))));
                }
                SyncPipes<HardEvent::V_MTE3>(*pipe_);
                for (int32_t c = 0; c < n; c += kTile) {
                    const uint32_t m = Min32(kTile, static_cast<uint32_t>(n - c));
                    StoreRows(dwGm_[col + c], acc[c], 1, m * 4);
                }
            }
        } else {
            SyncPipes<HardEvent::V_MTE3>(*pipe_);
            ws_.Store(wsGm_, acc, k, col, n);
        }
        SetFlag<HardEvent::MTE3_V>(accEvt_[cur_]);
        accPending_[cur_] = true;
    }

    // Tile t of chunk k's partial to the workspace (EarlyPieces).
    __aicore__ inline void StorePiece(int64_t k, int32_t t)
    {
        const int32_t off = t * kTile;
        const uint32_t len = Min32(kTile, static_cast<uint32_t>(a_.hidden - off));
        SyncPipes<HardEvent::V_MTE3>(*pipe_);
        ws_.Store(wsGm_, acc_[off], k, off, static_cast<int32_t>(len));
        SetFlag<HardEvent::MTE3_V>(accEvt_[AccEvent(t)]);
        accPending_[AccEvent(t)] = true;
    }

    // ---- the residual's gradient (every path) -------------------------------------------------------
    // add_rms_norm's backward: dx = cast_x(float(dx in x's dtype) + float(gro)), what autograd gives for
    // the two calls apart (one fp32 add, one rounding), into dx (fp32, cnt elements); the caller makes
    // its NaNs canonical and casts it into dst. A 16-bit dx is rounded into dst and widened back, the
    // gradient widened into `wide` (fp32 scratch of cnt elements).
    // That add in AddGroSteps() barrier windows, one AddGroStep each (no barrier after any).
    __aicore__ inline static constexpr int32_t AddGroSteps() { return kF32 ? 1 : 3; }
    __aicore__ inline void AddGroStep(int32_t step, const LocalTensor<T>& dst, const LocalTensor<float>& dx,
                                      const LocalTensor<float>& wide, const LocalTensor<T>& gro, uint32_t cnt)
    {
        if constexpr (kF32) {
            Add(dx, dx, gro, cnt);
        } else if (step == 0) {
            Cast(dst, dx, RoundMode::CAST_RINT, cnt);
            Cast(wide, gro, RoundMode::CAST_NONE, cnt);
        } else if (step == 1) {
            Cast(dx, dst, RoundMode::CAST_NONE, cnt);
        } else {
            Add(dx, dx, wide, cnt);
        }
    }

    BwdArgs a_;
    int64_t chunkRows_ = kDwChunkRows, chunks_ = 0, kBegin_ = 0, kEnd_ = 0;
    // ShareDx: the block's own groups; shed_: the groups of each heavy block (of heavyGroups_) whose dx
    // the light blocks make; [fBegin_, fEnd_): this light block's share of them, heavy block by heavy block
    int64_t own_ = 0, shed_ = 0, heavyGroups_ = 1, fBegin_ = 0, fEnd_ = 0;
    bool heavy_ = false;
    bool weight_ = false, offset_ = false, wantDx_ = false, wantDw_ = false, direct_ = false, gro_ = false;
    bool accPending_[kMaxAccEvents] = {};
    int32_t cur_ = 0;    // the accumulator of the chunk being summed
    int32_t piece_ = 0;  // the tile being added into (EarlyPieces)
    int32_t wRawAt_ = 0;
    event_t accEvt_[kMaxAccEvents] = {};
    bool dyPending_[kMaxRingUnits] = {};
    event_t dyFree_[kMaxRingUnits] = {};
    // tmpB_: also the staging of a 16-bit dw written directly; outB_: p_.lag's two groups' dx
    TBuf<TPosition::VECOUT> accB_, tmpB_, outB_;
    TBuf<TPosition::VECIN> vecB_;  // the chunk's rstd is loaded into it (LAYOUT_STREAM)
    TBuf<TPosition::VECCALC> t2B_;
    LocalTensor<float> xh_, gg_, dyf_, acc_, brR_, brC_, cv_, run_, rsv_, nan_;
    bool narrowHeld_ = false;  // the register holds the NaN block's 16-bit NaN (HoldNanOf)
    LocalTensor<float> xh2_, dyf2_, brR2_;  // p_.lag: the second group's
    LocalTensor<uint8_t> mask_;
    GlobalTensor<D> dyGm_;
    GlobalTensor<T> xGm_, dxGm_, groGm_;
    GlobalTensor<W> wGm_, dwGm_;
    GlobalTensor<float> rstdGm_, wsGm_;
    DwWorkspace ws_{};
};

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_BWD_BACKWARD_BASE_H_
