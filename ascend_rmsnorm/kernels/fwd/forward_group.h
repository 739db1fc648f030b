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
          Base::RstdBegin, Base::RstdOutStep, Base::RstdEnd, Base::kRstdOutSteps, Base::InitConstants, Base::Begin, Base::End, Base::RowsMulF, Base::RowsMulW;

public:
    __aicore__ inline ForwardGroup(GM_ADDR x, GM_ADDR res, GM_ADDR w, GM_ADDR y, GM_ADDR rstd, GM_ADDR rout, const FwdArgs& a)
        : Base(x, res, w, y, rstd, rout, a)
    {}

    __aicore__ inline void Process()
    {
        if (!Begin()) return;
        RunGroup();
        End();
    }

private:
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

    // A plan that looks ahead (p_.ahead, common/ub_plan.h FwdAheadShape) issues the next group's sums
    // (squares, trees, lanes) in the barrier windows of this group's rstd chain, which has one small
    // instruction in each (Output); the next group's residual, which selects from the register the
    // chain reloads, goes first in windows of its own.
    __aicore__ inline void RunGroup()
    {
        const int64_t groups = (rowEnd_ - rowBegin_ + p_.G - 1) / p_.G;
        for (int64_t g = 0; g < groups && g < p_.ringSlots; ++g) LoadGroup(g);
        InitConstants();
        bool summed = false;  // group g's sums were made beside the group before's rstd
        for (int64_t g = 0; g < groups; ++g) {
            const int32_t b = static_cast<int32_t>(g % p_.ringSlots), n = GroupRows(g);
            const int64_t row0 = rowBegin_ + g * p_.G;
            if (!summed) {
                ring_.BeforeCompute(b);
                Residual(b, n);
                for (int32_t k = 0; k < SumSteps(); ++k) {
                    SumStep(b, n, k);
                    PipeBarrier<PIPE_V>();
                }
            }
            const bool next = p_.ahead && g + 1 < groups;
            const int32_t b1 = static_cast<int32_t>((g + 1) % p_.ringSlots), n1 = next ? GroupRows(g + 1) : 0;
            if (next) {
                ring_.BeforeCompute(b1);
                Residual(b1, n1);
            }
            summed = next;
            Output(b, row0, n, next ? b1 : -1, n1);
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
                Canon(xf_, v_.mask, canon);
                Cast(R, xf_, RoundMode::CAST_RINT, cnt);
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

    // 3. y = (x * rstd) [-> x's dtype and back: llama] * w, canonical NaN, cast, for the group in slot b
    // whose sums are in l_; beside its rstd chain the sums of the group in slot b1 (-1: none; their
    // gather writes l_ after the chain's first step has read it). Its first step, x widened again
    // (16-bit x), needs no rstd: it shares a window of the chain, after the gather that last reads
    // xf_ when it widens into xf_.
    __aicore__ inline void Output(int32_t b, int64_t row0, int32_t n, int32_t b1, int32_t n1)
    {
        const int32_t H = a_.hidden;
        const uint32_t cnt = static_cast<uint32_t>(n) * p_.P, canon = Align64Elems(cnt);
        const LocalTensor<T> X = SlotX(b);
        const LocalTensor<T> src = Rows(b);
        LocalTensor<float> wk;
        if constexpr (kWideY) {
            wk = SlotY(b);
        } else if constexpr (kF32) {
            wk = X.template ReinterpretCast<float>();
        } else {
            wk = xf_;
        }
        const int32_t sums = b1 >= 0 ? SumSteps() : 0;
        const int32_t castAt = b1 >= 0 && !kF32 && !kWideY ? GatherStep() + 1 : 0;
        int32_t windows = sums > kRstdOutSteps ? sums : kRstdOutSteps;
        if (castAt + 1 > windows) windows = castAt + 1;
        RstdBegin();
        for (int32_t k = 0; k < windows; ++k) {
            if (k < kRstdOutSteps) RstdOutStep(k);
            if (k < sums) SumStep(b1, n1, k);
            if constexpr (!kF32) {
                if (k == castAt) Cast(wk, src, RoundMode::CAST_NONE, cnt);
            }
            PipeBarrier<PIPE_V>();
        }
        RstdEnd(row0, n);
        if constexpr (kF32) {
            RowsMulF(wk, src, br_, n, H);
        } else {
            RowsMulF(wk, wk, br_, n, H);
            if (llama_) {
                Cast(X, wk, RoundMode::CAST_RINT, cnt);
                PipeBarrier<PIPE_V>();
                Cast(wk, X, RoundMode::CAST_NONE, cnt);
                PipeBarrier<PIPE_V>();
            }
        }
        if (weight_) RowsMulW(wk, n, H);
        if constexpr (Base::kNarrow) {
            CanonCast(X, wk, v_.mask, canon, cnt);
        } else {
            Canon(wk, v_.mask, canon);
        }
    }
};

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_FWD_FORWARD_GROUP_H_
