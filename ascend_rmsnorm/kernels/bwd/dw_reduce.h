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
// when they do not fit, the stacked form: the tree cut at the level of `group` leaves per node, each
// node's leaves (every M-th partial, M = leaves / group) read in one strided load and halved where
// they lie, the nodes in bit-reversed order on a stack: the same additions, operand for operand, as
// the level-by-level tree.
// =============================================================================================
template <typename W>
class DwReduce {
public:
    // `pipe`: the kernel entry's, which outlives the object (common/kernel_base.h says why)
    __aicore__ inline DwReduce(GM_ADDR ws, GM_ADDR dw, int64_t chunks, int32_t hidden, int32_t slice, int32_t stack,
                               TPipe* pipe)
        : chunks_(chunks), hidden_(hidden), slice_(slice), group_(stack), ws_{chunks, hidden, slice}, pipe_(pipe)
    {
        wsGm_.SetGlobalBuffer((__gm__ float*)ws, static_cast<uint64_t>(chunks) * hidden);
        dwGm_.SetGlobalBuffer((__gm__ W*)dw, static_cast<uint64_t>(hidden));
        leaves_ = 1;
        levels_ = 0;
        while (leaves_ * 2 <= chunks) {
            leaves_ *= 2;
            ++levels_;
        }
        nodeLevels_ = levels_;  // the tree levels above the stacked form's nodes
        for (int32_t g = group_; g > 1; g >>= 1) --nodeLevels_;
    }

    __aicore__ inline void Process()
    {
        const int32_t slices = ws_.Slices();
        const int32_t blocks = static_cast<int32_t>(GetBlockNum()), b = static_cast<int32_t>(GetBlockIdx());
        if (b >= slices) return;
        rowB_ = Align32(Align64Elems(static_cast<uint32_t>(slice_)) * 4);
        if (group_ > 0) {
            const uint32_t load = Align32(static_cast<uint32_t>(group_) * ((static_cast<uint32_t>(slice_) + 7u) / 8u * 8u) * 4);
            pipe_->InitBuffer(aQ_, 2, load);
            pipe_->InitBuffer(bQ_, 2, load);
            pipe_->InitBuffer(allB_, (nodeLevels_ + 1) * rowB_);
        } else {
            const uint32_t pitch = (static_cast<uint32_t>(slice_) + 7u) / 8u * 8u;
            pipe_->InitBuffer(allB_, Align32(static_cast<uint32_t>(chunks_) * pitch * 4) + rowB_);
        }
        pipe_->InitBuffer(outB_, Align32(static_cast<uint32_t>(slice_) * sizeof(W)));
        const uint32_t maskBytes = Align32(Align64Elems(static_cast<uint32_t>(slice_)) / 8);
        pipe_->InitBuffer(maskB_, maskBytes + 32);  // the mask, then the NaN block the register holds
        // the NaN dw's dtype takes (16-bit: selected after the cast, which leaves a NaN's bits open),
        // ordered by the barrier after the compare
        HoldNan(maskB_.Get<uint8_t>()[maskBytes].ReinterpretCast<float>(), NanBits16<W>(), !IsSame<W, float>::value);
        for (int32_t s = b; s < slices; s += blocks) {
            if (s != b) {  // the previous slice's result has left, and its buffers are free again
                SyncPipes<HardEvent::V_MTE2>(*pipe_);
                SyncPipes<HardEvent::MTE3_MTE2>(*pipe_);
                SyncPipes<HardEvent::MTE3_V>(*pipe_);
            }
            const int32_t col = s * slice_;
            const int32_t n = ws_.Width(s);
            const LocalTensor<float> res = group_ > 0 ? ReduceStack(s, n) : ReduceAll(s, n);
            const uint32_t canon = Align64Elems(static_cast<uint32_t>(n));
            if constexpr (IsSame<W, float>::value) {
                Canon(res, maskB_.Get<uint8_t>(), canon);
                SyncPipes<HardEvent::V_MTE3>(*pipe_);
                StoreRows(dwGm_[col], res, 1, static_cast<uint32_t>(n) * 4);
            } else {
                LocalTensor<W> out = outB_.Get<W>();
                CanonCast(out, res, maskB_.Get<uint8_t>(), canon, static_cast<uint32_t>(n));
                SyncPipes<HardEvent::V_MTE3>(*pipe_);
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
        SyncPipes<HardEvent::MTE2_V>(*pipe_);
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

    // p's lowest `bits` bits in reverse order
    __aicore__ inline uint32_t BitReverse(uint32_t p, int32_t bits) const
    {
        uint32_t r = 0;
        for (int32_t i = 0; i < bits; ++i) {
            r = (r << 1) | (p & 1u);
            p >>= 1;
        }
        return r;
    }

    // `count` partials of slice s (n columns), chunks first, first + stride, ..., in one strided load,
    // each at a pitch of n rounded to 8
    __aicore__ inline void Load(TQue<TPosition::VECIN, 1>& q, int64_t first, int64_t stride, int32_t count, int32_t s,
                                int32_t n)
    {
        LocalTensor<float> t = q.AllocTensor<float>();
        const uint64_t gap = static_cast<uint64_t>(stride - 1) * static_cast<uint64_t>(n) * 4;  // the plan keeps it in 32 bits
        DataCopyExtParams p(static_cast<uint16_t>(count), static_cast<uint32_t>(n) * 4, static_cast<uint32_t>(gap), 0, 0);
        DataCopyPadExtParams<float> pad(false, 0, 0, 0.0f);
        DataCopyPad(t, wsGm_[ws_.SliceAt(s) + static_cast<uint64_t>(first) * n], p, pad);
        q.EnQue(t);
    }

    // Node j (of M = leaves / group) holds tree leaves j, j + M, ..., each leaf i the partial i plus,
    // where i + leaves < chunks, the partial i + leaves: its leaves and their folded partials in two
    // strided loads.
    __aicore__ inline int32_t Folded(int64_t j, int64_t m) const
    {
        const int64_t left = chunks_ - leaves_ - j;  // partials i + leaves < chunks for i = j + k m: k < left / m
        if (left <= 0) return 0;
        const int64_t f = (left + m - 1) / m;
        return static_cast<int32_t>(f < group_ ? f : group_);
    }
    __aicore__ inline void LoadNode(int64_t j, int64_t m, int32_t s, int32_t n)
    {
        Load(aQ_, j, m, group_, s, n);
        const int32_t folded = Folded(j, m);
        if (folded > 0) Load(bQ_, j + leaves_, m, folded, s, n);
    }

    // The folds in one Add, then the halving within the node (leaf k with leaf k + half) down to one
    // row, the last step into `top`.
    __aicore__ inline void ReduceNode(const LocalTensor<float>& top, const LocalTensor<float>& a,
                                      const LocalTensor<float>& b, int32_t folded, int32_t n)
    {
        const uint32_t n8 = (static_cast<uint32_t>(n) + 7u) / 8u * 8u;
        if (folded > 0) {
            Add(a, a, b, static_cast<int32_t>(static_cast<uint32_t>(folded) * n8));
            PipeBarrier<PIPE_V>();
        }
        for (int32_t half = group_ / 2; half > 1; half /= 2) {
            Add(a, a, a[static_cast<uint32_t>(half) * n8], static_cast<int32_t>(static_cast<uint32_t>(half) * n8));
            PipeBarrier<PIPE_V>();
        }
        Add(top, a, a[n8], n);  // the plan keeps group >= 2
        PipeBarrier<PIPE_V>();
    }

    // The nodes in bit-reversed order, so that the two halves of every tree level above them meet on
    // the stack: each node pushed as level 0, the top two added while their levels are equal. The next
    // node's loads go out once this one's have been taken from the queues (two buffers each), before
    // it is worked on.
    __aicore__ inline LocalTensor<float> ReduceStack(int32_t s, int32_t n)
    {
        const uint32_t rowE = rowB_ / 4;
        const int64_t m = leaves_ / group_;
        LocalTensor<float> stack = allB_.Get<float>();
        int32_t depth = 0;
        int32_t level[64];
        LoadNode(BitReverse(0, nodeLevels_), m, s, n);
        for (uint32_t p = 0; p < static_cast<uint32_t>(m); ++p) {
            const int64_t j = BitReverse(p, nodeLevels_);
            const int32_t folded = Folded(j, m);
            LocalTensor<float> a = aQ_.DeQue<float>();
            LocalTensor<float> b;
            if (folded > 0) b = bQ_.DeQue<float>();
            if (p + 1 < static_cast<uint32_t>(m)) LoadNode(BitReverse(p + 1, nodeLevels_), m, s, n);
            ReduceNode(stack[depth * rowE], a, b, folded, n);
            aQ_.FreeTensor(a);
            if (folded > 0) bQ_.FreeTensor(b);
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
    int32_t group_;  // the stacked form's tree leaves per node (0: all partials at once)
    DwWorkspace ws_;
    int64_t leaves_;
    int32_t levels_, nodeLevels_;
    uint32_t rowB_ = 0;
    TPipe* pipe_;
    TQue<TPosition::VECIN, 1> aQ_, bQ_;
    TBuf<TPosition::VECIN> allB_;
    TBuf<TPosition::VECOUT> outB_;
    TBuf<TPosition::VECCALC> maskB_;
    GlobalTensor<float> wsGm_;
    GlobalTensor<W> dwGm_;
};

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_BWD_DW_REDUCE_H_
