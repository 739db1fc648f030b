// ascend-rmsnorm: the ring of slots that orders loads (MTE2), compute (V) and stores (MTE3).

#ifndef ASCEND_RMSNORM_COMMON_RING_H_
#define ASCEND_RMSNORM_COMMON_RING_H_

#include "constants.h"
#include "scalar.h"

namespace rmsnorm {

// The ring of ringSlots: a slot is loaded (MTE2), computed (V) and stored (MTE3), then loaded again.
// Only pipes wait on these flags, never the scalar unit.
struct Ring {
    int32_t ringSlots = 0;
    event_t load[kMaxRingUnits], comp[kMaxRingUnits], free_[kMaxRingUnits];
    bool pending[kMaxRingUnits] = {};
    bool vfree[kMaxRingUnits] = {};  // the unit was released by V (no store), not by MTE3

    __aicore__ inline void Init(TPipe& pipe, int32_t n)
    {
        ringSlots = n;
        for (int32_t b = 0; b < ringSlots; ++b) {
            load[b] = static_cast<event_t>(pipe.AllocEventID<HardEvent::MTE2_V>());
            comp[b] = static_cast<event_t>(pipe.AllocEventID<HardEvent::V_MTE3>());
            free_[b] = static_cast<event_t>(pipe.AllocEventID<HardEvent::MTE3_MTE2>());
        }
    }
    // Before MTE2 writes slot b: its previous contents were stored (or consumed by V).
    __aicore__ inline void BeforeLoad(TPipe& pipe, int32_t b)
    {
        if (pending[b]) {
            WaitFlag<HardEvent::MTE3_MTE2>(free_[b]);
            pending[b] = false;
        }
        if (vfree[b]) {
            SyncPipes<HardEvent::V_MTE2>(pipe);
            vfree[b] = false;
        }
    }
    __aicore__ inline void AfterLoad(int32_t b) { SetFlag<HardEvent::MTE2_V>(load[b]); }
    __aicore__ inline void BeforeCompute(int32_t b) { WaitFlag<HardEvent::MTE2_V>(load[b]); }
    __aicore__ inline void BeforeStore(int32_t b)
    {
        SetFlag<HardEvent::V_MTE3>(comp[b]);
        WaitFlag<HardEvent::V_MTE3>(comp[b]);
    }
    __aicore__ inline void AfterStore(int32_t b)
    {
        SetFlag<HardEvent::MTE3_MTE2>(free_[b]);
        pending[b] = true;
    }
    __aicore__ inline void AfterComputeOnly(int32_t b) { vfree[b] = true; }
    __aicore__ inline void Release(TPipe& pipe)
    {
        for (int32_t b = 0; b < ringSlots; ++b) {
            if (pending[b]) {
                WaitFlag<HardEvent::MTE3_MTE2>(free_[b]);
                pending[b] = false;
            }
            pipe.ReleaseEventID<HardEvent::MTE2_V>(load[b]);
            pipe.ReleaseEventID<HardEvent::V_MTE3>(comp[b]);
            pipe.ReleaseEventID<HardEvent::MTE3_MTE2>(free_[b]);
        }
    }
};

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_COMMON_RING_H_
