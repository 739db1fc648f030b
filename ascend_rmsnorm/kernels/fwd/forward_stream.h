// ascend-rmsnorm: the forward of LAYOUT_STREAM: rows too long for UB, tile by tile from GM, two passes per row.

#ifndef ASCEND_RMSNORM_FWD_FORWARD_STREAM_H_
#define ASCEND_RMSNORM_FWD_FORWARD_STREAM_H_

#include "forward_base.h"

namespace rmsnorm {

template <typename T, typename W, typename O>
class ForwardStream : public ForwardBase<T, W, O> {
    using Base = ForwardBase<T, W, O>;
    using Base::a_, Base::p_, Base::pipe_, Base::ring_, Base::rowBegin_, Base::rowEnd_, Base::residual_, Base::weight_,
          Base::xGm_, Base::resGm_, Base::routGm_, Base::yGm_, Base::wGm_, Base::v_, Base::l_, Base::off_, Base::ln_,
          Base::wrawB_, Base::kWideY, Base::SlotX, Base::SlotR, Base::SlotY, Base::RstdOut, Base::InitConstants,
          Base::Begin, Base::End, Base::CellElem, Base::TileSquares, Base::TileResidual, Base::TileOutput;

public:
    __aicore__ inline ForwardStream(GM_ADDR x, GM_ADDR res, GM_ADDR w, GM_ADDR y, GM_ADDR rstd, GM_ADDR rout,
                                    const FwdArgs& a, TPipe* pipe)
        : Base(x, res, w, y, rstd, rout, a, pipe)
    {}

    __aicore__ inline void Process()
    {
        if (!Begin()) return;
        RunStream();
        End();
    }

private:
    // Job j of the block: row j / (2 * tiles), pass (j / tiles) % 2, tile j % tiles.
    __aicore__ inline void LoadJob(int64_t j)
    {
        const int32_t tiles = p_.tiles, b = static_cast<int32_t>(j % p_.ringSlots);
        const int64_t row = rowBegin_ + j / (2 * tiles);
        const int32_t pass = static_cast<int32_t>((j / tiles) % 2), t = static_cast<int32_t>(j % tiles);
        const int32_t off = t * kTile, len = a_.hidden - off < kTile ? a_.hidden - off : kTile;
        const uint64_t at = static_cast<uint64_t>(row) * a_.hidden + off;
        ring_.BeforeLoad(*pipe_, b);
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
            if (weight_) LoadRows(wrawB_.template Get<W>()[b * kTile], wGm_[off], 1, len * sizeof(W));
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
        if (residual_) routEvt_ = static_cast<event_t>(pipe_->template AllocEventID<HardEvent::MTE3_MTE2>());
        int64_t next = 0;
        while (next < jobs && next < p_.ringSlots && CanLoad(next, -1)) LoadJob(next++);
        InitConstants();
        // one tile per job, its lanes packed (a short last tile's missing lanes are set per row)
        OffsetsPacked(off_.template ReinterpretCast<int32_t>(), l_.template ReinterpretCast<int32_t>(), p_.J, p_.gp, 1, 8,
                      static_cast<int32_t>(CellElem() * 4));
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
        if (residual_) pipe_->template ReleaseEventID<HardEvent::MTE3_MTE2>(routEvt_);
    }

    event_t routEvt_ = EVENT_ID0;  // residual_out of a row is in GM (pass 2 reads it back)
};

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_FWD_FORWARD_STREAM_H_
