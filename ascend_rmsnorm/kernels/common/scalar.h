// ascend-rmsnorm: scalar helpers: type tests, float bits, alignment, a pipe-to-pipe sync.

#ifndef ASCEND_RMSNORM_COMMON_SCALAR_H_
#define ASCEND_RMSNORM_COMMON_SCALAR_H_

#include "constants.h"

namespace rmsnorm {

template <typename A, typename B>
struct IsSame {
    static constexpr bool value = false;
};
template <typename A>
struct IsSame<A, A> {
    static constexpr bool value = true;
};

// ---- scalar helpers ---------------------------------------------------------------------------
__aicore__ inline float BitsFloat(uint32_t u)
{
    union {
        float f;
        uint32_t u;
    } v;
    v.u = u;
    return v.f;
}

__aicore__ inline int32_t Pow2Floor(int32_t n)
{
    int32_t b = 1;
    while (b <= n / 2) b *= 2;
    return b;
}

__aicore__ inline uint32_t Align32(uint32_t bytes) { return (bytes + 31u) / 32u * 32u; }
__aicore__ inline uint32_t Align64Elems(uint32_t n) { return (n + 63u) / 64u * 64u; }
__aicore__ inline uint32_t Min32(uint32_t a, uint32_t b) { return a < b ? a : b; }

template <HardEvent E>
__aicore__ inline void SyncPipes(TPipe& pipe)
{
    event_t id = static_cast<event_t>(pipe.FetchEventID(E));
    SetFlag<E>(id);
    WaitFlag<E>(id);
}

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_COMMON_SCALAR_H_
