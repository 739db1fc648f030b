// ascend-rmsnorm: byte-exact GM <-> UB row copies.

#ifndef ASCEND_RMSNORM_COMMON_COPY_H_
#define ASCEND_RMSNORM_COMMON_COPY_H_

#include "constants.h"

namespace rmsnorm {

// `bytes` bytes, UB rows padded to 32 bytes plus `ubGap` blocks.
template <typename T>
__aicore__ inline void LoadRows(const LocalTensor<T>& dst, const GlobalTensor<T>& src, uint32_t count, uint32_t bytes,
                                uint32_t ubGap = 0)
{
    DataCopyParams p(static_cast<uint16_t>(count), static_cast<uint16_t>(bytes), 0, static_cast<uint16_t>(ubGap));
    DataCopyPadParams pad;
    DataCopyPad(dst, src, p, pad);
}

template <typename T>
__aicore__ inline void StoreRows(const GlobalTensor<T>& dst, const LocalTensor<T>& src, uint32_t count, uint32_t bytes,
                                 uint32_t ubGap = 0)
{
    DataCopyParams p(static_cast<uint16_t>(count), static_cast<uint16_t>(bytes), static_cast<uint16_t>(ubGap), 0);
    DataCopyPad(dst, src, p);
}

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_COMMON_COPY_H_
