// ascend-rmsnorm: the backward of LAYOUT_GROUP: G whole rows per ring slot, every step over the whole group.

#ifndef ASCEND_RMSNORM_BWD_BACKWARD_GROUP_H_
#define ASCEND_RMSNORM_BWD_BACKWARD_GROUP_H_

#include "backward_base.h"

namespace rmsnorm {

template <typename T, typename W, typename D>
class BackwardGroup : public BackwardBase<T, W, D> {
    using Base = BackwardBase<T, W, D>;
    using Base::a_, Base::p_, Base::pipe_, Base::ring_, Base::weight_, Base::wantDx_, Base::wantDw_, Base::gro_,
          Base::piece_, Base::xh_, Base::gg_, Base::dyf_, Base::acc_, Base::brR_, Base::brC_, Base::cv_, Base::mask_,
          Base::dyGm_, Base::xGm_, Base::dxGm_, Base::groGm_, Base::rstdGm_, Base::l_, Base::off_,
          Base::kF32, Base::kDy32, Base::Begin, Base::End, Base::RowsMulF, Base::RowsMulW, Base::InitConstants,
          Base::SelectAcc, Base::SlotDy,
          Base::SlotX, Base::SlotGro, Base::SlotRs, Base::DyGap, Base::GroupCount, Base::GroupAt, Base::EarlyPieces,
          Base::Accumulate, Base::StorePartial, Base::StorePiece, Base::AddGro;

public:
    __aicore__ inline BackwardGroup(GM_ADDR dy, GM_ADDR x, GM_ADDR w, GM_ADDR rstd, GM_ADDR gro, GM_ADDR dx, GM_ADDR dw,
                              GM_ADDR ws, const BwdArgs& a)
        : Base(dy, x, w, rstd, gro, dx, dw, ws, a)
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
        ring_.BeforeLoad(pipe_, b);
        LoadRows(SlotDy(b), dyGm_[at], n, a_.hidden * sizeof(D), DyGap(p_.P));
        LoadRows(SlotX(b), xGm_[at], n, a_.hidden * sizeof(T));
        if (gro_) LoadRows(SlotGro(b), groGm_[at], n, a_.hidden * sizeof(T));
        LoadRows(SlotRs(b), rstdGm_[row0], 1, static_cast<uint32_t>(n) * 4);
        ring_.AfterLoad(b);
    }

    __aicore__ inline void RunGroup()
    {
        const int64_t groups = GroupCount();
        for (int64_t g = 0; g < groups && g < p_.ringSlots; ++g) LoadGroup(g);
        InitConstants();
        for (int64_t g = 0; g < groups; ++g) {
            int64_t row0, k;
            int32_t n;
            bool first, last;
            GroupAt(g, row0, n, k, first, last);
            const int32_t b = static_cast<int32_t>(g % p_.ringSlots);
            SelectAcc(k);
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
            if (g + p_.ringSlots < groups) LoadGroup(g + p_.ringSlots);
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
        RowsMulF(xh, xh, brR_, n, H);  // xh = x * rstd
        // the dw terms dy*xh; g = dy*w over dy (after the terms have read it: the pipe is in order)
        if (wantDw_) Mul(gg_, dyf, xh, cnt);
        if (weight_ && wantDx_) {
            RowsMulW(dyf, n, H);
        } else {
            PipeBarrier<PIPE_V>();
        }
        // The dw terms added to the chunk's partial in row order. With dx wanted the last add shares
        // its barrier window with the products below: they overwrite the terms it reads (the pipe is
        // in order) and read nothing it writes.
        if (wantDw_) {
            int32_t r0 = 0;
            if (first) {  // tile by tile: each waits only for its own part of the partial to have left
                for (int32_t t = 0; t < p_.tiles; ++t) {
                    const int32_t off = t * kTile;
                    piece_ = t;
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
                for (int32_t t = 0; t < p_.tiles; ++t) StorePiece(k, t);
            }
        }
        if (!wantDx_) {
            if (wantDw_) PipeBarrier<PIPE_V>();  // the partial is read next (a dw finished here)
            return;
        }
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
        RowsMulF(xh, xh, brC_, n, H);
        Sub(xh, dyf, xh, cnt);
        PipeBarrier<PIPE_V>();
        RowsMulF(xh, xh, brR_, n, H);
        if (gro_) AddGro(X, xh, dyf, SlotGro(b), cnt);  // g is spent: dyf widens the gradient
        Canon(xh, mask_, canon);
        if constexpr (!kF32) Cast(X, xh, RoundMode::CAST_RINT, cnt);
    }
};

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_BWD_BACKWARD_GROUP_H_
