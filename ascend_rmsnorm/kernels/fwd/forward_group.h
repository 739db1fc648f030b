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
          Base::RstdOut, Base::InitConstants, Base::Begin, Base::End, Base::RowsMulF, Base::RowsMulW;

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
                if constexpr (Base::kNarrow) {
                    CanonCast(R, xf_, v_.mask, canon, cnt);  // residual_out
                } else {
                    Canon(xf_, v_.mask, canon);
                    Cast(R, xf_, RoundMode::CAST_RINT, cnt);  // residual_out
                }
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
        // 3. y = (x * rstd) [-> x's dtype and back: llama] * w, canonical NaN, cast. Its first step,
        // x widened again (16-bit x), needs no rstd: it shares the rstd chain's first barrier window.
        LocalTensor<float> wk;
        if constexpr (kWideY) {
            wk = SlotY(b);
        } else if constexpr (kF32) {
            wk = X.template ReinterpretCast<float>();
        } else {
            wk = xf_;
        }
        if constexpr (!kF32) Cast(wk, src, RoundMode::CAST_NONE, cnt);
        RstdOut(row0, n);
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
