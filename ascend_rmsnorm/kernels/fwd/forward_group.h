// ascend-rmsnorm: the forward of LAYOUT_GROUP: G whole rows per ring slot, every step over the whole group.

#ifndef ASCEND_RMSNORM_FWD_FORWARD_GROUP_H_
#define ASCEND_RMSNORM_FWD_FORWARD_GROUP_H_

#include "forward_base.h"

namespace rmsnorm {

template <typename T, typename W, typename O>
class ForwardGroup : public ForwardBase<T, W, O> {
    using Base = ForwardBase<T, W, O>;
    using Base::a_, Base::p_, Base::pipe_, Base::ring_, Base::rowBegin_, Base::rowEnd_, Base::residual_, Base::weight_,
          Base::llama_, Base::xGm_, Base::resGm_, Base::routGm_, Base::yGm_, Base::xf_, Base::tmp_,
          Base::br_, Base::v_, Base::l_, Base::off_, Base::kF32, Base::kWideY, Base::SlotX, Base::SlotR, Base::SlotY,
          Base::RstdBegin, Base::ChainStep, Base::RstdDone, Base::RstdEnd, Base::kChainSteps, Base::kNarrow, Base::InitConstants, Base::Begin, Base::End, Base::RowsMulF, Base::RowsMulW;

public:
    __aicore__ inline ForwardGroup(GM_ADDR x, GM_ADDR res, GM_ADDR w, GM_ADDR y, GM_ADDR rstd, GM_ADDR rout,
                                   const FwdArgs& a, TPipe* pipe)
        : Base(x, res, w, y, rstd, rout, a, pipe)
    {}

    __aicore__ inline void Process()
    {
        if (!Begin()) return;
        RunGroup();
        End();
    }

private:
    // A group whose rstd chain has run and whose y is still to be made and stored (Chain, TailStep).
    struct Tail {
        int64_t g;
        LocalTensor<float> rs;
    };
    // Group g's ring slot, first row and rows.
    __aicore__ inline int32_t SlotOf(int64_t g) const { return static_cast<int32_t>(g % p_.ringSlots); }
    __aicore__ inline int64_t RowOf(int64_t g) const { return rowBegin_ + g * p_.G; }
    __aicore__ inline int32_t GroupRows(int64_t g) const
    {
        const int64_t left = rowEnd_ - RowOf(g);
        return left < p_.G ? static_cast<int32_t>(left) : p_.G;
    }

    __aicore__ inline void LoadGroup(int64_t g)
    {
        const int32_t b = SlotOf(g), n = GroupRows(g);
        const uint64_t at = static_cast<uint64_t>(RowOf(g)) * a_.hidden;
        ring_.BeforeLoad(*pipe_, b);
        LoadRows(SlotX(b), xGm_[at], n, a_.hidden * sizeof(T));
        if (residual_) LoadRows(SlotR(b), resGm_[at], n, a_.hidden * sizeof(T));
        ring_.AfterLoad(b);
    }

    // A plan that looks ahead (p_.ahead, common/ub_plan.h FwdAheadShape) issues the next group's sums
    // (squares, trees, lanes) in the barrier windows of this group's rstd chain, which has one small
    // instruction in each (Chain); the next group's residual, which selects from the register the
    // chain reloads, goes first in windows of its own. A group's tail (its rstd's NaN, y, the store)
    // then runs in the first windows of the next group's chain; without a next chain, or with a
    // residual to come before it, right after its own.
    __aicore__ inline void RunGroup()
    {
        groups_ = (rowEnd_ - rowBegin_ + p_.G - 1) / p_.G;
        for (int64_t g = 0; g < groups_ && g < p_.ringSlots; ++g) LoadGroup(g);
        InitConstants();
        bool summed = false;  // group g's sums were made beside the group before's rstd
        for (int64_t g = 0; g < groups_; ++g) {
            const int32_t b = SlotOf(g), n = GroupRows(g);
            if (!summed) {
                ring_.BeforeCompute(b);
                Residual(b, n);
                for (int32_t k = 0; k < SumSteps(); ++k) {
                    SumStep(b, n, k);
                    PipeBarrier<PIPE_V>();
                }
            }
            const bool next = p_.ahead && g + 1 < groups_;
            const int32_t b1 = SlotOf(g + 1), n1 = next ? GroupRows(g + 1) : 0;
            if (next && residual_) {
                ring_.BeforeCompute(b1);
                Residual(b1, n1);
            }
            summed = next;
            Chain(Tail{g, RstdBegin()}, next ? b1 : -1, n1);
            if (!next || residual_) FlushTail();
        }
    }

    // The rows to normalise: x, or (residual) r = cast_x(x + residual) written over the residual.
    __aicore__ inline LocalTensor<T> Rows(int32_t b) { return residual_ ? SlotR(b) : SlotX(b); }

    // 1. residual: r = cast_x(x + residual), written over the residual (residual_out)
    __aicore__ inline void Residual(int32_t b, int32_t n)
    {
        if (!residual_) return;
        const uint32_t cnt = static_cast<uint32_t>(n) * p_.P, canon = Align64Elems(cnt);
        const LocalTensor<T> X = SlotX(b);
        const LocalTensor<T> R = SlotR(b);
        if constexpr (kF32) {
            Add(xf_, X, R, cnt);
            PipeBarrier<PIPE_V>();
            Canon(xf_, v_.mask, canon);
            DataCopy(R, xf_, cnt);
        } else {
            Cast(xf_, X, RoundMode::CAST_NONE, cnt);
            Cast(tmp_, R, RoundMode::CAST_NONE, cnt);
            PipeBarrier<PIPE_V>();
            Add(xf_, xf_, tmp_, cnt);
            PipeBarrier<PIPE_V>();
            if constexpr (Base::kNarrow) {
                CanonCast(R, xf_, v_.mask, canon, cnt);
            } else {
                Base::WideYCanonCast(R, xf_, canon, cnt);
            }
        }
        PipeBarrier<PIPE_V>();
    }

    // 2. the sums of squares of a group's rows into l_[0, gp), one step per barrier window: the squares
    // into the work buffer xf_ (16-bit x: widened first, squared in place), the tree of every row's
    // tiles down to 8 lanes where they are, the lanes of all rows gathered from there and added up.
    __aicore__ inline int32_t TreeLevels() const
    {
        return p_.stripes ? TreeSteps(a_.hidden) : SegTreeLevels(p_.tiles, a_.hidden - (p_.tiles - 1) * kTile);
    }
    static constexpr int32_t kSquareSteps = kF32 ? 1 : 2;
    __aicore__ inline int32_t GatherStep() const { return kSquareSteps + TreeLevels(); }  // reads xf_ last
    __aicore__ inline int32_t SumSteps() const { return GatherStep() + LaneReduceSteps(p_.tiles); }
    __aicore__ inline void SumStep(int32_t b, int32_t n, int32_t k)
    {
        const LocalTensor<T> src = Rows(b);
        const uint32_t cnt = static_cast<uint32_t>(n) * p_.P;
        if constexpr (kF32) {
            if (k == 0) {
                Mul(xf_, src, src, cnt);
                return;
            }
        } else {
            if (k == 0) {
                Cast(xf_, src, RoundMode::CAST_NONE, cnt);
                return;
            }
            if (k == 1) {
                Mul(xf_, xf_, xf_, cnt);
                return;
            }
        }
        if (k < GatherStep()) {
            const int32_t lv = k - kSquareSteps;
            if (p_.stripes) {
                StripeTreeLevel(xf_, a_.hidden, n, static_cast<uint8_t>(p_.P / 8), lv);
            } else {
                SegTreeLevel(xf_, n, p_.P, p_.tiles, a_.hidden - (p_.tiles - 1) * kTile, lv);
            }
            return;
        }
        LaneReduceStep(l_, xf_, off_, p_.J, p_.gp, k - GatherStep());
    }

    // 3. The rstd chain of the group in slot b (its sums in l_), and beside it the tail of the group
    // before (when pending) and the sums of the group in slot b1 (-1: none; their gather writes l_
    // after the chain's first step has read it), which start once the tail has last read the work
    // buffer. This group's x is widened again for y (16-bit x) after the last read of the work buffer
    // before it: the gather of b1's sums, or the tail's. The group's own tail is left pending.
    __aicore__ inline void Chain(const Tail& t, int32_t b1, int32_t n1)
    {
        const bool pend = pending_;
        const int32_t tailSteps = pend ? TailSteps() : 0;
        const int32_t free = pend && kNarrow ? tailSteps - 1 : 0;  // the first window the tail leaves xf_ alone
        const int32_t sums = b1 >= 0 ? SumSteps() : 0;
        const int32_t castAt = kNarrow && b1 >= 0 ? free + GatherStep() + 1 : free;
        int32_t windows = kChainSteps;
        if (tailSteps > windows) windows = tailSteps;
        if (free + sums > windows) windows = free + sums;
        if (castAt + 1 > windows) windows = castAt + 1;
        for (int32_t k = 0; k < windows; ++k) {
            if (k < kChainSteps) ChainStep(k, t.rs);
            if (k < tailSteps) TailStep(k);
            if (k >= free && k - free < sums) {
                if (k == free && !residual_) ring_.BeforeCompute(b1);
                SumStep(b1, n1, k - free);
            }
            if constexpr (!kF32) {  // 16-bit x widened for y: into xf_, or a wide y's own rows
                const int32_t b = SlotOf(t.g);
                if (k == castAt) Cast(Work(b), Rows(b), RoundMode::CAST_NONE, static_cast<uint32_t>(GroupRows(t.g)) * p_.P);
            }
            PipeBarrier<PIPE_V>();
            if (pend && k == 0) TailRstdOut();
        }
        tail_ = t;
        pending_ = true;
    }

    // The tail of a group whose chain has run: its rstd's canonical NaN beside y = (x * rstd), then
    // [-> x's dtype and back: llama] * w, the canonical NaN, the cast; the store once issued. A 16-bit
    // y's NaN goes back into the register in the second step (the first step's select reads the fp32
    // one). One step per barrier window.
    __aicore__ inline int32_t TailSteps() const { return 3 + (llama_ ? 2 : 0) + (weight_ ? 1 : 0); }
    __aicore__ inline LocalTensor<float> Work(int32_t b)
    {
        if constexpr (kWideY) {
            return SlotY(b);
        } else if constexpr (kF32) {
            return SlotX(b).template ReinterpretCast<float>();
        } else {
            return xf_;
        }
    }
    __aicore__ inline void TailStep(int32_t k)
    {
        const Tail& t = tail_;
        const int32_t H = a_.hidden, last = TailSteps() - 1, b = SlotOf(t.g), n = GroupRows(t.g);
        const uint32_t cnt = static_cast<uint32_t>(n) * p_.P, canon = Align64Elems(cnt);
        const LocalTensor<T> X = SlotX(b);
        const LocalTensor<float> wk = Work(b);
        if constexpr (kNarrow) {
            if (k == 1) SetCmpMask(NanOf(v_.nan, true));
        }
        if (k == 0) {
            RstdDone(t.rs);
            if constexpr (kF32) {
                RowsMulF(wk, Rows(b), br_, n, H, false);
            } else {
                RowsMulF(wk, wk, br_, n, H, false);
            }
        } else if (k < last - 1) {
            const int32_t s = llama_ ? k - 1 : 2;  // llama (16-bit x only): the two casts; then the weight
            if constexpr (!kF32) {
                if (s == 0) Cast(X, wk, RoundMode::CAST_RINT, cnt);
                if (s == 1) Cast(wk, X, RoundMode::CAST_NONE, cnt);
            }
            if (s == 2) RowsMulW(wk, n, H, false);
        } else if constexpr (kNarrow) {
            CanonCastStep(k - (last - 1), X, wk, v_.mask, canon, cnt);
        } else {
            CanonStep(k - (last - 1), wk, v_.mask, canon);
        }
        if (k == last) StoreTail();
    }

    // The pending tail in windows of its own (none after its last step: nothing reads what it writes).
    __aicore__ inline void FlushTail()
    {
        for (int32_t k = 0; k < TailSteps(); ++k) {
            TailStep(k);
            if (k + 1 == TailSteps()) break;
            PipeBarrier<PIPE_V>();
            if (k == 0) TailRstdOut();
        }
    }

    // The pending tail's rstd row to GM, after the barrier behind its NaN's select (RstdDone, step 0).
    __aicore__ inline void TailRstdOut() { RstdEnd(tail_.rs, RowOf(tail_.g), GroupRows(tail_.g)); }

    // y (and residual_out) of the pending tail to GM once V has made them; the slot's next load after.
    __aicore__ inline void StoreTail()
    {
        const int64_t g = tail_.g;
        const int32_t b = SlotOf(g), n = GroupRows(g);
        ring_.BeforeStore(b);
        const uint64_t at = static_cast<uint64_t>(RowOf(g)) * a_.hidden;
        if constexpr (kWideY) {
            const uint32_t gap = (p_.P * 4 - Align32(a_.hidden * 4)) / 32;
            StoreRows(yGm_[at], SlotY(b), n, a_.hidden * 4, gap);
        } else {
            StoreRows(yGm_[at], SlotX(b).template ReinterpretCast<O>(), n, a_.hidden * sizeof(O));
        }
        if (residual_) StoreRows(routGm_[at], SlotR(b), n, a_.hidden * sizeof(T));
        ring_.AfterStore(b);
        pending_ = false;
        if (g + p_.ringSlots < groups_) LoadGroup(g + p_.ringSlots);
    }

    int64_t groups_ = 0;  // the block's groups (RunGroup)
    Tail tail_{};         // the group whose tail is pending_
    bool pending_ = false;
};

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_FWD_FORWARD_GROUP_H_
