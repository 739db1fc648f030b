// ascend-rmsnorm: byte-exact GM <-> UB row copies, with the non-template parameter structs (the
// DataCopyPadExtParams<T> form builds its pad value from T, which bfloat16_t's host-pass proxy cannot).

#ifndef ASCEND_RMSNORM_COMMON_COPY_H_
#define ASCEND_RMSNORM_COMMON_COPY_H_

#include "constants.h"

namespace rmsnorm {

// `count` rows of `bytes` bytes each, back to back in GM. In UB each row is padded to 32 bytes plus
// `ubGap` blocks. Rows of whole 32-byte blocks with no gap lie back to back in UB too: one burst of
// count * bytes then moves them (a DMA pays per burst, docs/perf-model.md §1) while that fits
// DataCopyParams' 16-bit byte length; else one burst per row.
__aicore__ inline bool OneBurst(uint32_t count, uint32_t bytes, uint32_t ubGap)
{
    return count > 1 && bytes % 32 == 0 && ubGap == 0 && static_cast<uint64_t>(count) * bytes <= 0xFFFFu;
}

template <typename T>
__aicore__ inline void LoadRows(const LocalTensor<T>& dst, const GlobalTensor<T>& src, uint32_t count, uint32_t bytes,
                                uint32_t ubGap = 0)
{
    const bool one = OneBurst(count, bytes, ubGap);
    DataCopyParams p(static_cast<uint16_t>(one ? 1 : count), static_cast<uint16_t>(one ? count * bytes : bytes), 0,
                     static_cast<uint16_t>(ubGap));
    DataCopyPadParams pad;
    DataCopyPad(dst, src, p, pad);
}

template <typename T>
__aicore__ inline void StoreRows(const GlobalTensor<T>& dst, const LocalTensor<T>& src, uint32_t count, uint32_t bytes,
                                 uint32_t ubGap = 0)
{
    const bool one = OneBurst(count, bytes, ubGap);
    DataCopyParams p(static_cast<uint16_t>(one ? 1 : count), static_cast<uint16_t>(one ? count * bytes : bytes),
                     static_cast<uint16_t>(ubGap), 0);
    DataCopyPad(dst, src, p);
}

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_COMMON_COPY_H_
