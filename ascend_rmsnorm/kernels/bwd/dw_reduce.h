// ascend-rmsnorm: the dw reduce kernel class: the chunk partials of dw combined by the tree over the chunk index.

#ifndef ASCEND_RMSNORM_BWD_DW_REDUCE_H_
#define ASCEND_RMSNORM_BWD_DW_REDUCE_H_

#include "../common/constants.h"
#include "../common/scalar.h"
#include "../common/copy.h"
#include "../common/numerics.h"
#include "dw_workspace.h"

namespace rmsnorm {

// =============================================================================================
// dw reduce: per column, the fold-and-halve tree over the chunk partials, the canonical NaN, the
// cast to the weight's dtype. Each block takes column slices. All of a slice's partials at once
// (the workspace is slice-major: one burst, or one per chunk where the slice is not a whole number of
// 32-byte blocks wide; each tree level is one Add over contiguous partial rows), or,
// when they do not fit, a stack: the leaves in bit-reversed order, the same additions operand for
// operand as the level-by-level tree.
// =============================================================================================
template <typename W>
class DwReduce {
public:
    __aicore__ inline DwReduce(GM_ADDR ws, GM_ADDR dw, int64_t chunks, int32_t hidden, int32_t slice, int32_t stack)
        : chunks_(chunks), hidden_(hidden), slice_(slice), stack_(stack != 0), ws_{chunks, hidden, slice}
    {
        wsGm_.SetGlobalBuffer((__gm__ float*)ws, static_cast<uint64_t>(chunks) * hidden);
        dwGm_.SetGlobalBuffer((__gm__ W*)dw, static_cast<uint64_t>(hidden));
        leaves_ = 1;
        levels_ = 0;
        while (leaves_ * 2 <= chunks) {
            leaves_ *= 2;
            ++levels_;
        }
    }

    __aicore__ inline void Process()
    {
        const int32_t slices = ws_.Slices();
        const int32_t blocks = static_cast<int32_t>(GetBlockNum()), b = static_cast<int32_t>(GetBlockIdx());
        if (b >= slices) return;
        rowB_ = Align32(Align64Elems(static_cast<uint32_t>(slice_)) * 4);
        if (stack_) {
            pipe_.InitBuffer(aQ_, 2, rowB_);
            pipe_.InitBuffer(bQ_, 2, rowB_);
            pipe_.InitBuffer(allB_, (levels_ + 1) * rowB_);
        } else {
            const uint32_t pitch = (static_cast<uint32_t>(slice_) + 7u) / 8u * 8u;
            pipe_.InitBuffer(allB_, Align32(static_cast<uint32_t>(chunks_) * pitch * 4) + rowB_);
        }
        pipe_.InitBuffer(outB_, Align32(static_cast<uint32_t>(slice_) * sizeof(W)));
        pipe_.InitBuffer(maskB_, Align32(Align64Elems(static_cast<uint32_t>(slice_)) / 8));
        for (int32_t s = b; s < slices; s += blocks) {
            if (s != b) {  // the previous slice's result has left, and its buffers are free again
                SyncPipes<HardEvent::V_MTE2>(pipe_);
                SyncPipes<HardEvent::MTE3_MTE2>(pipe_);
                SyncPipes<HardEvent::MTE3_V>(pipe_);
            }
            const int32_t col = s * slice_;
            const int32_t n = ws_.Width(s);
            const LocalTensor<float> res = stack_ ? ReduceStack(s, n) : ReduceAll(s, n);
            Canon(res, maskB_.Get<uint8_t>(), Align64Elems(static_cast<uint32_t>(n)));
            if constexpr (IsSame<W, float>::value) {
                SyncPipes<HardEvent::V_MTE3>(pipe_);
                StoreRows(dwGm_[col], res, 1, static_cast<uint32_t>(n) * 4);
            } else {
                LocalTensor<W> out = outB_.Get<W>();
                Cast(out, res, RoundMode::CAST_RINT, n);
                SyncPipes<HardEvent::V_MTE3>(pipe_);
                StoreRows(dwGm_[col], out, 1, static_cast<uint32_t>(n) * sizeof(W));
            }
        }
    }

private:
    // Slice s (n columns): its partials, chunk after chunk, at a pitch of n rounded to 8. A slice of
    // whole 32-byte blocks lies in UB as in GM: one burst of all of it (it fits the UB, so it fits
    // blockLen's 21 bits); else one burst per chunk, 4095 (blockCount) per DMA.
    __aicore__ inline LocalTensor<float> ReduceAll(int32_t s, int32_t n)
    {
        const uint32_t pitch = (static_cast<uint32_t>(n) + 7u) / 8u * 8u;
        LocalTensor<float> all = allB_.Get<float>();
        const uint64_t at = ws_.SliceAt(s);
        DataCopyPadExtParams<float> pad(false, 0, 0, 0.0f);
        if (pitch == static_cast<uint32_t>(n)) {
            DataCopyExtParams p(1, static_cast<uint32_t>(chunks_) * pitch * 4, 0, 0, 0);
            DataCopyPad(all, wsGm_[at], p, pad);
        } else {
            for (int64_t c0 = 0; c0 < chunks_; c0 += kMaxBursts) {
                const int64_t cnt = chunks_ - c0 < kMaxBursts ? chunks_ - c0 : kMaxBursts;
                DataCopyExtParams p(static_cast<uint16_t>(cnt), static_cast<uint32_t>(n) * 4, 0, 0, 0);
                DataCopyPad(all[static_cast<uint32_t>(c0) * pitch], wsGm_[at + static_cast<uint64_t>(c0) * n], p, pad);
            }
        }
        SyncPipes<HardEvent::MTE2_V>(pipe_);
        int64_t b = leaves_;
        if (b < chunks_) {
            Add(all, all, all[static_cast<uint32_t>(b) * pitch], static_cast<int32_t>((chunks_ - b) * pitch));
            PipeBarrier<PIPE_V>();
        }
        while (b > 1) {
            b >>= 1;
            Add(all, all, all[static_cast<uint32_t>(b) * pitch], static_cast<int32_t>(b * pitch));
            PipeBarrier<PIPE_V>();
        }
        return all;
    }

    __aicore__ inline uint32_t BitReverse(uint32_t p) const
    {
        uint32_t r = 0;
        for (int32_t i = 0; i < levels_; ++i) {
            r = (r << 1) | (p & 1u);
            p >>= 1;
        }
        return r;
    }

    __aicore__ inline void Load(TQue<TPosition::VECIN, 1>& q, int64_t chunk, int32_t s, int32_t n)
    {
        LocalTensor<float> t = q.AllocTensor<float>();
        LoadRows(t, wsGm_[ws_.SliceAt(s) + static_cast<uint64_t>(chunk) * n], 1, static_cast<uint32_t>(n) * 4);
        q.EnQue(t);
    }

    __aicore__ inline LocalTensor<float> ReduceStack(int32_t s, int32_t n)
    {
        const uint32_t n8 = (static_cast<uint32_t>(n) + 7u) / 8u * 8u;
        const uint32_t rowE = rowB_ / 4;
        LocalTensor<float> stack = allB_.Get<float>();
        int32_t depth = 0;
        int32_t level[64];
        for (uint32_t p = 0; p < static_cast<uint32_t>(leaves_); ++p) {
            const int64_t i = BitReverse(p);
            const bool folded = i + leaves_ < chunks_;  // leaf i = partial[i] (+ partial[i + leaves])
            Load(aQ_, i, s, n);
            if (folded) Load(bQ_, i + leaves_, s, n);
            LocalTensor<float> a = aQ_.DeQue<float>();
            LocalTensor<float> top = stack[depth * rowE];
            if (folded) {
                LocalTensor<float> bt = bQ_.DeQue<float>();
                Add(top, a, bt, n);
                bQ_.FreeTensor(bt);
            } else {
                DataCopy(top, a, n8);
            }
            aQ_.FreeTensor(a);
            PipeBarrier<PIPE_V>();
            level[depth++] = 0;
            while (depth >= 2 && level[depth - 1] == level[depth - 2]) {
                LocalTensor<float> lhs = stack[(depth - 2) * rowE];
                Add(lhs, lhs, stack[(depth - 1) * rowE], n);
                PipeBarrier<PIPE_V>();
                ++level[depth - 2];
                --depth;
            }
        }
        return stack;
    }

    int64_t chunks_;
    int32_t hidden_, slice_;
    bool stack_;
    DwWorkspace ws_;
    int64_t leaves_;
    int32_t levels_;
    uint32_t rowB_ = 0;
    TPipe pipe_;
    TQue<TPosition::VECIN, 1> aQ_, bQ_;
    TBuf<TPosition::VECIN> allB_;
    TBuf<TPosition::VECOUT> outB_;
    TBuf<TPosition::VECCALC> maskB_;
    GlobalTensor<float> wsGm_;
    GlobalTensor<W> dwGm_;
};

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_BWD_DW_REDUCE_H_
