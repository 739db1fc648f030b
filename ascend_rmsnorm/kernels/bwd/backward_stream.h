// ascend-rmsnorm: the backward of LAYOUT_STREAM: tiles from GM, two passes per dw chunk.

#ifndef ASCEND_RMSNORM_BWD_BACKWARD_STREAM_H_
#define ASCEND_RMSNORM_BWD_BACKWARD_STREAM_H_

#include "backward_pieces.h"

namespace rmsnorm {

template <typename T, typename W, typename D>
class BackwardStream : public BackwardPieces<T, W, D> {
    using Base = BackwardPieces<T, W, D>;
    using Terms = typename Base::Terms;
    using Base::a_, Base::p_, Base::pipe_, Base::ring_, Base::chunkRows_, Base::kBegin_, Base::kEnd_, Base::weight_,
          Base::wantDx_, Base::wantDw_, Base::gro_, Base::wRawAt_, Base::gg_, Base::acc_, Base::brR_, Base::brC_,
          Base::run_, Base::rsv_, Base::dyGm_, Base::xGm_, Base::dxGm_, Base::groGm_, Base::wGm_, Base::rstdGm_,
          Base::l_, Base::ln_, Base::off_, Base::wrawB_, Base::Begin, Base::End, Base::InitConstants, Base::SlotDy,
          Base::SlotX, Base::SlotGro, Base::Accumulate, Base::StorePartial, Base::SubTerms, Base::DxTerms, Base::TileA,
          Base::CellElem;

public:
    __aicore__ inline BackwardStream(GM_ADDR dy, GM_ADDR x, GM_ADDR w, GM_ADDR rstd, GM_ADDR gro, GM_ADDR dx, GM_ADDR dw,
                              GM_ADDR ws, const BwdArgs& a, TPipe* pipe)
        : Base(dy, x, w, rstd, gro, dx, dw, ws, a, pipe)
    {}

    __aicore__ inline void Process()
    {
        if (!Begin()) return;
        RunStream();
        End();
    }

private:
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
        ring_.BeforeLoad(*pipe_, b);
        LoadRows(SlotDy(b), dyGm_[at], 1, len * sizeof(D));
        LoadRows(SlotX(b), xGm_[at], 1, len * sizeof(T));
        if (gro_ && pass == 1) LoadRows(SlotGro(b), groGm_[at], 1, len * sizeof(T));  // dx is made in pass 2
        if (weight_) LoadRows(wrawB_.template Get<W>()[b * kTile], wGm_[off], 1, len * sizeof(W));
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
            SyncPipes<HardEvent::V_MTE2>(*pipe_);
            LoadRows(rsv_, rstdGm_[first], 1, static_cast<uint32_t>(rows) * 4);
            SyncPipes<HardEvent::MTE2_V>(*pipe_);
            Brcb(brR_, rsv_, static_cast<uint8_t>((rows + 7) / 8), BrcbRepeatParams(1, 8));
            PipeBarrier<PIPE_V>();
            const int64_t base = seq;
            const int64_t skip = wantDx_ ? 0 : rows * tiles;  // without dx, jobs start at pass 2
            int64_t next = 0;
            for (; next < jobs && next < p_.ringSlots; ++next) LoadJob(k, next + skip, rows, base + next);
            if (k == kBegin_) InitConstants();
            if (k == kBegin_) LaneOffsetsOneRow();
            for (int64_t j = 0; j < jobs; ++j) {
                int32_t pass, r, t;
                JobAt(j + skip, rows, pass, r, t);
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
                    TileA(X, DY, 0, len, false, false, 0, true, fr);  // pass 1: c only, dw in pass 2
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
                        const Terms terms = SubTerms(X, DY, a, n, fr, wantDx_);
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
                for (; next < jobs && next < j + 1 + p_.ringSlots; ++next) LoadJob(k, next + skip, rows, base + next);
            }
            seq = base + jobs;
        }
    }

    // Every slot reads the one row's lanes: each slot's sum is that row's tile partial.
    __aicore__ inline void LaneOffsetsOneRow()
    {
        LocalTensor<int32_t> offs = off_.template ReinterpretCast<int32_t>();
        for (int32_t k = 0; k < 8; ++k) Duplicate(offs[k * p_.J], 4 * k, p_.J);
        PipeBarrier<PIPE_V>();
    }

    // The last tile's missing lanes (len < 8) read the -0 cell while it is reduced.
    __aicore__ inline void PadLanes(int32_t len, bool pad)
    {
        LocalTensor<int32_t> offs = off_.template ReinterpretCast<int32_t>();
        for (int32_t k = len; k < 8; ++k) {
            Duplicate(offs[k * p_.J], pad ? static_cast<int32_t>(CellElem() * 4) : 4 * k, p_.J);
        }
        PipeBarrier<PIPE_V>();
    }
};

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_BWD_BACKWARD_STREAM_H_
