// ascend-rmsnorm: the backward of LAYOUT_GROUP: G whole rows per ring slot, every step over the whole group.

#ifndef ASCEND_RMSNORM_BWD_BACKWARD_GROUP_H_
#define ASCEND_RMSNORM_BWD_BACKWARD_GROUP_H_

#include "backward_base.h"

namespace rmsnorm {

template <typename T, typename W, typename D>
class BackwardGroup : public BackwardBase<T, W, D> {
    using Base = BackwardBase<T, W, D>;
    using Base::a_, Base::p_, Base::pipe_, Base::ring_, Base::weight_, Base::wantDw_, Base::gro_,
          Base::piece_, Base::xh_, Base::gg_, Base::dyf_, Base::acc_, Base::brR_, Base::brC_, Base::mask_,
          Base::dyGm_, Base::xGm_, Base::dxGm_, Base::groGm_, Base::rstdGm_, Base::CSteps, Base::CStep,
          Base::kF32, Base::kDy32, Base::Begin, Base::End, Base::RowsMulF, Base::RowsMulW, Base::InitConstants,
          Base::SelectAcc, Base::SlotDy,
          Base::SlotX, Base::SlotGro, Base::SlotRs, Base::DyGap, Base::GroupCount, Base::GroupAt, Base::EarlyPieces,
          Base::Accumulate, Base::StorePartial, Base::StorePiece, Base::xh2_, Base::dyf2_, Base::brR2_, Base::GroupDx,
          Base::GroupDw, Base::DxBefore;

public:
    __aicore__ inline BackwardGroup(GM_ADDR dy, GM_ADDR x, GM_ADDR w, GM_ADDR rstd, GM_ADDR gro, GM_ADDR dx, GM_ADDR dw,
                              GM_ADDR ws, const BwdArgs& a, TPipe* pipe)
        : Base(dy, x, w, rstd, gro, dx, dw, ws, a, pipe)
    {}

    __aicore__ inline void Process()
    {
        if (!Begin()) return;
        RunGroup();
        End();
    }

private:
    __aicore__ inline void LoadGroup(int64_t g)
    {
        int64_t row0, k;
        int32_t n;
        bool first, last;
        GroupAt(g, row0, n, k, first, last);
        const int32_t b = static_cast<int32_t>(g % p_.ringSlots);
        const uint64_t at = static_cast<uint64_t>(row0) * a_.hidden;
        ring_.BeforeLoad(*pipe_, b);
        LoadRows(SlotDy(b), dyGm_[at], n, a_.hidden * sizeof(D), DyGap(p_.P));
        LoadRows(SlotX(b), xGm_[at], n, a_.hidden * sizeof(T));
        if (gro_) LoadRows(SlotGro(b), groGm_[at], n, a_.hidden * sizeof(T));
        LoadRows(SlotRs(b), rstdGm_[row0], 1, static_cast<uint32_t>(n) * 4);
        ring_.AfterLoad(b);
    }

    // A group's steps after its tree (c, then dx), issued one per barrier window (Tail): pending from
    // its tree's last level on.
    struct Tail {
        int32_t step = -1;  // the next one; -1: none pending
        int64_t g = 0, row0 = 0;
        int32_t b = 0, q = 0, n = 0;
    };

    __aicore__ inline void RunGroup()
    {
        groups_ = GroupCount();
        early_ = EarlySteps();
        for (int64_t g = 0; g < groups_ && g < p_.ringSlots; ++g) LoadGroup(g);
        InitConstants();
        if (p_.lag) {
            for (int32_t q = 0; q < 2; ++q) outEvt_[q] = static_cast<event_t>(pipe_->template AllocEventID<HardEvent::MTE3_V>());
        }
        Tail t;
        for (int64_t g = 0; g < groups_; ++g) {
            int64_t row0, k;
            int32_t n;
            bool first, last;
            GroupAt(g, row0, n, k, first, last);
            const int32_t b = static_cast<int32_t>(g % p_.ringSlots);
            // the parity of its dx (a group without dx: of the next one's), so that a pending tail
            // runs on through groups without dx
            const int32_t q = p_.lag ? static_cast<int32_t>(DxBefore(g) % 2) : 0;
            const bool dx = GroupDx(g), dw = GroupDw(g);
            if (dw) SelectAcc(k);
            ring_.BeforeCompute(b);
            ComputeGroup(g, b, q, n, k, first, last, dx, dw, t);
            if (dx) {
                t = Tail{early_, g, row0, b, q, n};
                if (!p_.lag) Flush(t);
            } else if (!p_.lag) {
                ring_.AfterComputeOnly(b);
                if (g + p_.ringSlots < groups_) LoadGroup(g + p_.ringSlots);
            }
            // dw itself (one chunk), staged in gg_: once the Tail has read the lanes there, and behind a
            // barrier, since the Tail's last step may read mask_ (fp32: its Select), which Canon writes
            if (wantDw_ && last && !EarlyPieces()) {
                Flush(t);
                PipeBarrier<PIPE_V>();
                StorePartial(k, acc_, 0, a_.hidden);
            }
        }
        Flush(t);
        if (p_.lag) {
            for (int32_t q = 0; q < 2; ++q) {
                if (outPending_[q]) WaitFlag<HardEvent::MTE3_V>(outEvt_[q]);
                pipe_->template ReleaseEventID<HardEvent::MTE3_V>(outEvt_[q]);
            }
        }
    }

    // The windows of a group that issue a step of the tail before it: the casts, xh, the dw terms and
    // g, the dw adds beside the products, and the tree's levels.
    __aicore__ inline int32_t OwnWindows() const
    {
        const int32_t H = a_.hidden;
        return 4 + (p_.stripes ? TreeSteps(H) : SegTreeLevels(p_.tiles, H - (p_.tiles - 1) * kTile));
    }
    // Whether a group gathers its tree's lanes into l_ (its tail's first step) in a window of its own
    // after the tree. Under the lag a group costs its own windows, or its tail's steps where those
    // are more: the gather moves over where that shortens the longer of them. The tail before is past
    // its last read of l_ (c's multiply, step LaneReduceSteps) by then: its step in that window is
    // OwnWindows() or later. (Moving the lane levels after it too makes the model's pess no faster.)
    __aicore__ inline int32_t EarlySteps() const
    {
        const int32_t own = OwnWindows();
        return p_.lag && own > LaneReduceSteps(p_.tiles) && own + 1 < TailSteps() ? 1 : 0;
    }

    // Group parity q's xh, widened dy (then g) and rstd broadcast (p_.lag: two groups' at once).
    __aicore__ inline LocalTensor<float> Xh(int32_t b, int32_t q)
    {
        if constexpr (kF32) return SlotX(b);
        return q ? xh2_ : xh_;
    }
    __aicore__ inline LocalTensor<float> Dyf(int32_t b, int32_t q)
    {
        if constexpr (kDy32) return SlotDy(b);
        return q && p_.lag == dev::LAG_TWO_DY ? dyf2_ : dyf_;
    }
    __aicore__ inline LocalTensor<float> BrR(int32_t q) { return q ? brR2_ : brR_; }

    __aicore__ inline int32_t TailSteps() const
    {
        return CSteps() + 5 + (gro_ ? Base::AddGroSteps() : 0) + (!kF32 && p_.lag ? 1 : 0);
    }

    // The next of t's steps: c = (the row sums of the tree in gg_) / H broadcast in brC_; then dx =
    // rstd*(g - xh*c) over xh, the residual's gradient, the canonical NaN, cast over x (p_.lag: into
    // the group's dx buffer, the x slot being loaded again by then); the last one stores dx and (not
    // p_.lag) loads the slot's next group.
    __aicore__ inline void TailStep(Tail& t)
    {
        if (t.step < 0) return;
        const int32_t H = a_.hidden, gs = gro_ ? Base::AddGroSteps() : 0;
        const uint32_t cnt = static_cast<uint32_t>(t.n) * p_.P, canon = Align64Elems(cnt);
        const LocalTensor<float> xh = Xh(t.b, t.q), dyf = Dyf(t.b, t.q);
        const LocalTensor<T> X = p_.lag ? Base::outB_.template Get<T>()[static_cast<uint32_t>(t.q * p_.slotB / sizeof(T))]
                                        : SlotX(t.b);
        const int32_t s = t.step++, d = s - CSteps();  // d: the dx step, once c is made
        if (d < 0) {
            CStep(s, gg_);  // c from the tree's lanes in gg_
        } else if (d == 0) {
            RowsMulF(xh, xh, brC_, t.n, H, false);
        } else if (d == 1) {
            Sub(xh, dyf, xh, cnt);
        } else if (d == 2) {
            RowsMulF(xh, xh, BrR(t.q), t.n, H, false);
        } else if (d < 3 + gs) {  // g is spent: dyf widens the gradient
            Base::AddGroStep(d - 3, X, xh, dyf, SlotGro(t.b), cnt);
        } else if constexpr (kF32) {
            CanonStep(d - 3 - gs, xh, mask_, canon);
        } else {
            if (d == 4 + gs && p_.lag && outPending_[t.q]) {  // dx of the group before last has left
                WaitFlag<HardEvent::MTE3_V>(outEvt_[t.q]);
                outPending_[t.q] = false;
            }
            Base::HoldNanOf(true);  // held since InitConstants: a direct dw store comes after every dx
            CanonCastStep(d - 3 - gs, X, xh, mask_, canon, cnt, p_.lag);
        }
        if (t.step < TailSteps()) return;
        ring_.BeforeStore(t.b);
        StoreRows(dxGm_[static_cast<uint64_t>(t.row0) * H], X, t.n, H * sizeof(T));
        t.step = -1;
        if (p_.lag) {  // its buffer is written again by the dx of the group after next
            SetFlag<HardEvent::MTE3_V>(outEvt_[t.q]);
            outPending_[t.q] = true;
            return;
        }
        ring_.AfterStore(t.b);
        if (t.g + p_.ringSlots < groups_) LoadGroup(t.g + p_.ringSlots);
    }
    // t's steps left, a barrier between each two.
    __aicore__ inline void Flush(Tail& t)
    {
        while (t.step >= 0) {
            TailStep(t);
            if (t.step >= 0) PipeBarrier<PIPE_V>();
        }
    }

    // dy widened into dyf (16-bit dy); p_.lag: the slot is done with then, and its next group loads
    // while this one is worked on.
    __aicore__ inline void WidenDy(int64_t g, int32_t b, const LocalTensor<float>& dyf, const LocalTensor<D>& DY,
                                   uint32_t cnt)
    {
        if constexpr (!kDy32) Cast(dyf, DY, RoundMode::CAST_NONE, cnt);
        if (p_.lag) {
            ring_.AfterComputeOnly(b);
            if (g + p_.ringSlots < groups_) LoadGroup(g + p_.ringSlots);
        }
    }

    // A group of n rows, every step over all of them: xh (fp32 x: in place in the slot), dy widened
    // and then g = dy*w (fp32 dy: in place), the dw terms and then g*xh in gg_, reduced there to each
    // tile's lanes; the rest (the lanes gathered from gg_, c = sum/H broadcast in brC_, dx) is its Tail.
    // p_.lag: the slot is done with once widened, so the slot's next group loads from then on, and
    // the previous group's tail steps share these barrier windows (up to its tree's last level; the
    // rest is flushed after it): they touch only that group's xh, g, dx buffer and rstd broadcast,
    // and l_, cv_, brC_ and mask_, which this group writes after them (Flush, EarlySteps); their
    // first, the gather, reads gg_ in the first window, two before this group writes it (unless the
    // group before made its own gather: EarlySteps). dx, dw: whether this group's dx and dw terms are
    // made here (ShareDx); a group without dx (its parity the next one's) leaves a pending tail to the
    // next group's windows.
    __aicore__ inline void ComputeGroup(int64_t g, int32_t b, int32_t q, int32_t n, int64_t k, bool first, bool last,
                                        bool dx, bool dw, Tail& t)
    {
        const int32_t H = a_.hidden;
        const uint32_t P = p_.P, cnt = static_cast<uint32_t>(n) * P;
        const uint8_t rep = static_cast<uint8_t>(P / 8);
        const LocalTensor<T> X = SlotX(b);
        const LocalTensor<D> DY = SlotDy(b);
        const LocalTensor<float> xh = Xh(b, q), dyf = Dyf(b, q), brR = BrR(q);
        TailStep(t);
        Brcb(brR, SlotRs(b), static_cast<uint8_t>(p_.gp / 8), BrcbRepeatParams(1, 8));
        if constexpr (!kF32) Cast(xh, X, RoundMode::CAST_NONE, cnt);
        // LAG_ONE_DY: the tail before reads its g in this buffer up to its Sub (step CSteps() + 1)
        const bool dyLater = p_.lag == dev::LAG_ONE_DY && t.step >= 0 && t.step <= CSteps() + 1;
        if (!dyLater) WidenDy(g, b, dyf, DY, cnt);
        PipeBarrier<PIPE_V>();
        TailStep(t);
        RowsMulF(xh, xh, brR, n, H);  // xh = x * rstd
        if (dyLater) {  // the tail's windows up to its Sub, which dy is widened beside (the pipe is in order)
            while (t.step >= 0 && t.step <= CSteps() + 1) {
                const bool sub = t.step == CSteps() + 1;
                TailStep(t);
                if (!sub) PipeBarrier<PIPE_V>();
            }
            WidenDy(g, b, dyf, DY, cnt);
            PipeBarrier<PIPE_V>();
        }
        // the dw terms dy*xh; g = dy*w over dy (after the terms have read it: the pipe is in order)
        TailStep(t);
        if (dw) Mul(gg_, dyf, xh, cnt);
        if (weight_ && dx) {
            RowsMulW(dyf, n, H);
        } else {
            PipeBarrier<PIPE_V>();
        }
        // The dw terms added to the chunk's partial in row order. With dx wanted the last add shares
        // its barrier window with the products below: they overwrite the terms it reads (the pipe is
        // in order) and read nothing it writes.
        TailStep(t);
        if (dw) {
            int32_t r0 = 0;
            if (first) {  // tile by tile: each waits only for its own part of the partial to have left
                for (int32_t tt = 0; tt < p_.tiles; ++tt) {
                    const int32_t off = tt * kTile;
                    piece_ = tt;
                    Accumulate(acc_[off], gg_[off], Min32(kTile, static_cast<uint32_t>(H - off)), true);
                }
                r0 = 1;
            }
            if (p_.stripes) {
                if (n > r0) {
                    if (r0 > 0) PipeBarrier<PIPE_V>();
                    StripeAccumulate(acc_, gg_[r0 * P], H, n - r0, rep);
                }
            } else {
                for (int32_t r = r0; r < n; ++r) {
                    if (r > 0) PipeBarrier<PIPE_V>();  // the add before it wrote the partial
                    Add(acc_, acc_, gg_[r * P], H);
                }
            }
            if (last && EarlyPieces()) {  // the partial leaves while dx is made
                for (int32_t tt = 0; tt < p_.tiles; ++tt) StorePiece(k, tt);
            }
        }
        if (!dx) {
            if (dw) PipeBarrier<PIPE_V>();  // the partial is read next (a dw finished here)
            return;
        }
        // the products g * xh and their trees (c's first steps)
        Mul(gg_, dyf, xh, cnt);
        PipeBarrier<PIPE_V>();
        if (p_.stripes) {
            for (int32_t lv = 0; lv < TreeSteps(H); ++lv) {
                TailStep(t);
                StripeTreeLevel(gg_, H, n, rep, lv);
                PipeBarrier<PIPE_V>();
            }
        } else {
            const int32_t lastLen = H - (p_.tiles - 1) * kTile;
            for (int32_t lv = 0; lv < SegTreeLevels(p_.tiles, lastLen); ++lv) {
                TailStep(t);
                SegTreeLevel(gg_, n, P, p_.tiles, lastLen, lv);
                PipeBarrier<PIPE_V>();
            }
        }
        for (int32_t s = 0; s < early_; ++s) {  // its tail's first step (EarlySteps)
            TailStep(t);
            CStep(s, gg_);
            PipeBarrier<PIPE_V>();
        }
        Flush(t);  // the group before's steps (short trees only: they are done by now otherwise)
    }

    int64_t groups_ = 0;      // the block's groups (RunGroup)
    int32_t early_ = 0;       // the tail's steps a group makes in its own windows (EarlySteps)
    event_t outEvt_[2] = {};  // p_.lag: dx of the group of each parity has left its dx buffer
    bool outPending_[2] = {};
};

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_BWD_BACKWARD_GROUP_H_
