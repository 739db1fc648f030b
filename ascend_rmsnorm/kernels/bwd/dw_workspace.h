// ascend-rmsnorm: where the dw partials lie in the workspace: slice-major, so the dw reduce reads each of
// its column slices in one burst.

#ifndef ASCEND_RMSNORM_BWD_DW_WORKSPACE_H_
#define ASCEND_RMSNORM_BWD_DW_WORKSPACE_H_

#include "../common/constants.h"
#include "../common/scalar.h"
#include "../common/copy.h"

namespace rmsnorm {

// The workspace holds chunks x H fp32 partials, laid out by the dw reduce's column slices of `slice`
// columns (the last one narrower): slice s is the chunks' partials of its columns, chunk after chunk,
// each `width` columns, back to back. The reduce then reads a slice in one burst (one per chunk where its
// width is not a whole number of 32-byte blocks); a chunk's partial leaves the backward as one burst
// per slice it crosses. Every slice but the last is `slice` wide, so slice s starts at s*chunks*slice.
struct DwWorkspace {
    int64_t chunks;
    int32_t hidden;
    int32_t slice;

    __aicore__ inline int32_t Slices() const
    {
        return static_cast<int32_t>((static_cast<int64_t>(hidden) + slice - 1) / slice);  // H + slice > 2^31
    }
    __aicore__ inline int32_t Width(int32_t s) const
    {
        const int64_t left = static_cast<int64_t>(hidden) - static_cast<int64_t>(s) * slice;
        return left < slice ? static_cast<int32_t>(left) : slice;
    }
    // the first partial of slice s
    __aicore__ inline uint64_t SliceAt(int32_t s) const
    {
        return static_cast<uint64_t>(s) * static_cast<uint64_t>(chunks) * static_cast<uint64_t>(slice);
    }
    // column `col` of chunk k's partial
    __aicore__ inline uint64_t At(int64_t k, int32_t col) const
    {
        const int32_t s = col / slice;
        return SliceAt(s) + static_cast<uint64_t>(k) * Width(s) + static_cast<uint64_t>(col - s * slice);
    }

    // Columns [col, col + n) of chunk k's partial, src[0] holding column col (col a multiple of 8, as
    // every slice start is, so each burst leaves UB from a 32-byte block). A run of whole slices goes in one
    // DMA, a burst per slice, while the GM gap between two of them fits DataCopyExtParams' 32-bit dstStride
    // and the run fits its 12-bit burst count; the rest (a slice's head or tail, or a slice at a time) one
    // DMA each.
    __aicore__ inline void Store(const GlobalTensor<float>& ws, const LocalTensor<float>& src, int64_t k, int32_t col,
                                 int32_t n) const
    {
        const uint64_t gap = (static_cast<uint64_t>(chunks) - 1) * static_cast<uint64_t>(slice) * 4;
        const int32_t end = col + n;
        for (int32_t c = col; c < end;) {
            const int32_t s = c / slice, in = c - s * slice, w = Width(s);
            int32_t run = in == 0 && w == slice && gap <= 0xFFFFFFFFull ? (end - c) / slice : 0;
            if (run > kMaxBursts) run = kMaxBursts;
            if (run >= 2) {  // whole slices inside [col, end) <= H: all `slice` wide
                DataCopyExtParams p(static_cast<uint16_t>(run), static_cast<uint32_t>(slice) * 4, 0,
                                    static_cast<uint32_t>(gap), 0);
                DataCopyPad(ws[At(k, c)], src[static_cast<uint32_t>(c - col)], p);
                c += run * slice;
                continue;
            }
            const int32_t m = w - in < end - c ? w - in : end - c;
            StoreRows(ws[At(k, c)], src[static_cast<uint32_t>(c - col)], 1, static_cast<uint32_t>(m) * 4);
            c += m;
        }
    }
};

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_BWD_DW_WORKSPACE_H_
