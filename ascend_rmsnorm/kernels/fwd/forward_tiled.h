// ascend-rmsnorm: the forward of LAYOUT_TILED: one whole row per ring slot, the fp32 work in sub-tiles.

#ifndef ASCEND_RMSNORM_FWD_FORWARD_TILED_H_
#define ASCEND_RMSNORM_FWD_FORWARD_TILED_H_

#include "forward_base.h"

namespace rmsnorm {

template <typename T, typename W, typename O>
class ForwardTiled : public ForwardBase<T, W, O> {
    using Base = ForwardBase<T, W, O>;
    using Base::a_, Base::p_, Base::pipe_, Base::ring_, Base::rowBegin_, Base::rowEnd_, Base::residual_, Base::xGm_,
          Base::resGm_, Base::routGm_, Base::yGm_, Base::l_, Base::off_, Base::ln_, Base::kWideY, Base::SlotX,
          Base::SlotR, Base::SlotY, Base::RstdOut, Base::InitConstants, Base::Begin, Base::End, Base::TileSquares,
          Base::TileResidual, Base::TileOutput;

public:
    __aicore__ inline ForwardTiled(GM_ADDR x, GM_ADDR res, GM_ADDR w, GM_ADDR y, GM_ADDR rstd, GM_ADDR rout,
                                   const FwdArgs& a, TPipe* pipe)
        : Base(x, res, w, y, rstd, rout, a, pipe)
    {}

    __aicore__ inline void Process()
    {
        if (!Begin()) return;
        RunTiled();
        End();
    }

private:
    __aicore__ inline void LoadRow(int64_t i)
    {
        const int32_t b = static_cast<int32_t>(i % p_.ringSlots);
        const uint64_t at = static_cast<uint64_t>(rowBegin_ + i) * a_.hidden;
        ring_.BeforeLoad(*pipe_, b);
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
};

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_FWD_FORWARD_TILED_H_
