// ascend-rmsnorm: the set-up both directions share: a block's share of the work, the pipe and the
// ring, the UB plan, the buffers both reserve, the weight held in fp32, the lane-gather offsets.

#ifndef ASCEND_RMSNORM_COMMON_KERNEL_BASE_H_
#define ASCEND_RMSNORM_COMMON_KERNEL_BASE_H_

#include "constants.h"
#include "device_plan.h"
#include "scalar.h"
#include "copy.h"
#include "numerics.h"
#include "ring.h"

namespace rmsnorm {

class KernelBase {
protected:
    // The TPipe is the kernel entry's and outlives this object: as a member, the global pointer its
    // constructor sets would reach into the object, and the compiler would no longer constant-fold or
    // propagate the object's scalars (asc-devkit guide, 避免TPipe在对象内创建和初始化).
    __aicore__ inline explicit KernelBase(TPipe* pipe) : pipe_(pipe) {}

    // [begin, end) of `count` items (rows, or dw chunks) split evenly over the blocks, the first
    // count % blocks blocks one more.
    __aicore__ inline void BlockShare(int64_t count, int64_t& begin, int64_t& end) const
    {
        const int64_t blocks = GetBlockNum(), b = GetBlockIdx();
        const int64_t base = count / blocks, rem = count % blocks;
        begin = b * base + (b < rem ? b : rem);
        end = begin + base + (b < rem ? 1 : 0);
    }

    // The reservations both directions make, in the plan's InitBuffer order (common/ub_plan.h):
    // the ring and the weight first, the lanes (squares, lane slots, sums, gather offsets) later.
    __aicore__ inline void InitRingAndWeight()
    {
        pipe_->InitBuffer(ringB_, static_cast<uint32_t>(p_.ring));
        if (p_.wraw) pipe_->InitBuffer(wrawB_, static_cast<uint32_t>(p_.wraw));
        if (p_.wf) pipe_->InitBuffer(wfB_, static_cast<uint32_t>(p_.wf));
        if (p_.wf) wf_ = wfB_.Get<float>();
    }
    __aicore__ inline void InitLanes()
    {
        if (p_.q) pipe_->InitBuffer(qB_, static_cast<uint32_t>(p_.q));
        if (p_.ln) pipe_->InitBuffer(lnB_, static_cast<uint32_t>(p_.ln));
        pipe_->InitBuffer(lB_, static_cast<uint32_t>(p_.l));
        pipe_->InitBuffer(offB_, static_cast<uint32_t>(p_.off));
        if (p_.q) q_ = qB_.Get<float>();
        l_ = lB_.Get<float>();
        off_ = offB_.Get<uint32_t>();
        if (p_.ln) ln_ = lnB_.Get<float>();
    }

    // The weight as the formulas use it: fp32, plus the offset. Read once per block, tile by tile
    // (a 16-bit one through `stage`, the start of the fp32 work buffer; an fp32 one straight into
    // place). LAYOUT_TILED may hold the raw weight instead (widened per sub-tile); LAYOUT_STREAM
    // reads it per tile with the rows.
    template <typename W>
    __aicore__ inline void LoadWeight(const GlobalTensor<W>& wGm, const LocalTensor<float>& stage, int32_t H,
                                      bool offset, float offsetValue)
    {
        if (p_.layout == dev::LAYOUT_STREAM) return;
        if (!p_.wWide) {
            LocalTensor<W> raw = wrawB_.Get<W>();
            for (int32_t c = 0; c < H; c += kTile) {
                const uint32_t n = Min32(kTile, static_cast<uint32_t>(H - c));
                LoadRows(raw[c], wGm[c], 1, n * sizeof(W));
            }
            SyncPipes<HardEvent::MTE2_V>(*pipe_);
            return;
        }
        // a 16-bit weight is staged in the fp32 work buffer: chunks of at most what it holds
        const int32_t chunk = IsSame<W, float>::value ? kTile : static_cast<int32_t>(Min32(kTile, p_.subTile * 2));
        for (int32_t c = 0; c < H; c += chunk) {
            const uint32_t n = Min32(chunk, static_cast<uint32_t>(H - c));
            if constexpr (IsSame<W, float>::value) {
                LoadRows(wf_[c], wGm[c], 1, n * 4);
            } else {
                LocalTensor<W> raw = stage.ReinterpretCast<W>();
                if (c > 0) SyncPipes<HardEvent::V_MTE2>(*pipe_);  // the previous chunk was widened
                LoadRows(raw, wGm[c], 1, n * sizeof(W));
                SyncPipes<HardEvent::MTE2_V>(*pipe_);
                Cast(wf_[c], raw, RoundMode::CAST_NONE, n);
                PipeBarrier<PIPE_V>();
            }
        }
        if constexpr (IsSame<W, float>::value) SyncPipes<HardEvent::MTE2_V>(*pipe_);
        if (offset) {
            Adds(wf_, wf_, offsetValue, H);
            PipeBarrier<PIPE_V>();
        }
    }

    // The -0 cell after the lanes (at `cell` elements of `src`) and the byte offsets of the lane
    // gather of the group and tiled paths (the stream paths set their own).
    __aicore__ inline void LaneOffsets(const LocalTensor<float>& src, uint32_t cell, int32_t H)
    {
        Duplicate(src[cell], BitsFloat(kNegZeroBits), 8);
        PipeBarrier<PIPE_V>();
        LocalTensor<int32_t> offs = off_.ReinterpretCast<int32_t>();
        LocalTensor<int32_t> tmp = l_.ReinterpretCast<int32_t>();
        const int32_t cellB = static_cast<int32_t>(cell * 4);
        const int32_t last = H - (p_.tiles - 1) * kTile;
        if (p_.layout == dev::LAYOUT_GROUP) {
            OffsetsRows(offs, tmp, p_.gp, p_.tiles, p_.P, last, cellB);
        } else if (p_.layout == dev::LAYOUT_TILED) {
            OffsetsPacked(offs, tmp, p_.J, p_.gp, p_.tiles, last, cellB);
        }
    }

    // Per-row steps of a group of n rows of H at the plan's pitch: dst[r] = src[r] * f[r] (f: one
    // broadcast block per row), or dst[r] *= w (the fp32 weight). One instruction per 64-column stripe
    // with repeat = rows when the pitch allows, else one per row; one barrier after the step.
    __aicore__ inline void RowsMulF(const LocalTensor<float>& dst, const LocalTensor<float>& src,
                                    const LocalTensor<float>& f, int32_t n, int32_t H, bool barrier = true)
    {
        if (p_.stripes) {
            StripeMulB(dst, src, f, H, n, static_cast<uint8_t>(p_.P / 8), barrier);
        } else {
            for (int32_t r = 0; r < n; ++r) RowMulB(dst[r * p_.P], src[r * p_.P], f[r * 8], H);
            if (barrier) PipeBarrier<PIPE_V>();
        }
    }
    __aicore__ inline void RowsMulW(const LocalTensor<float>& dst, int32_t n, int32_t H, bool barrier = true)
    {
        if (p_.stripes) {
            StripeMulW(dst, dst, wf_, H, n, static_cast<uint8_t>(p_.P / 8), barrier);
        } else {
            for (int32_t r = 0; r < n; ++r) Mul(dst[r * p_.P], dst[r * p_.P], wf_, H);
            if (barrier) PipeBarrier<PIPE_V>();
        }
    }

    // Where the lane gather's -0 cell sits: after the group's work buffer, else after the lane slots.
    __aicore__ inline uint32_t CellElem() const
    {
        return p_.layout == dev::LAYOUT_GROUP ? static_cast<uint32_t>(p_.subTile) : static_cast<uint32_t>(p_.J) * 8;
    }

    dev::Plan p_;
    TPipe* pipe_;  // the kernel entry's
    Ring ring_;
    TBuf<TPosition::VECIN> ringB_, wrawB_, wfB_, xfB_;
    TBuf<TPosition::VECCALC> qB_, lnB_, lB_, offB_, maskB_, brB_;
    LocalTensor<float> wf_, q_, l_, ln_;
    LocalTensor<uint32_t> off_;
};

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_COMMON_KERNEL_BASE_H_
