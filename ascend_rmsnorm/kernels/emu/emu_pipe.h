// TPipe / TQue / TBuf and intra-core synchronisation (SetFlag/WaitFlag, PipeBarrier) for the
// emulation, with the queue protocol and the UB budget checked the way CPU-debug builds check
// them (and more strictly: the NPU checks none of it).
#pragma once

#include "emu_base.h"
#include "emu_tensor.h"

namespace AscendC {

using TEventID = int8_t;

// The vector-core subset of Ascend C's HardEvent (name = SRC_DST: DST waits for SRC).
enum class HardEvent : uint8_t {
    MTE2_V,
    V_MTE2,
    MTE3_V,
    V_MTE3,
    V_V,
    MTE3_MTE2,
    MTE2_MTE3,
    S_V,
    V_S,
    S_MTE2,
    MTE2_S,
    S_MTE3,
    MTE3_S,
    MAX,
};

namespace emu_detail {
struct EventPipes {
    int src, dst;
};
constexpr EventPipes Pipes(HardEvent e)
{
    using namespace ascend_emu;
    switch (e) {
        case HardEvent::MTE2_V: return {kMte2, kV};
        case HardEvent::V_MTE2: return {kV, kMte2};
        case HardEvent::MTE3_V: return {kMte3, kV};
        case HardEvent::V_MTE3: return {kV, kMte3};
        case HardEvent::V_V: return {kV, kV};
        case HardEvent::MTE3_MTE2: return {kMte3, kMte2};
        case HardEvent::MTE2_MTE3: return {kMte2, kMte3};
        case HardEvent::S_V: return {kS, kV};
        case HardEvent::V_S: return {kV, kS};
        case HardEvent::S_MTE2: return {kS, kMte2};
        case HardEvent::MTE2_S: return {kMte2, kS};
        case HardEvent::S_MTE3: return {kS, kMte3};
        case HardEvent::MTE3_S: return {kMte3, kS};
        default: return {-1, -1};
    }
}
inline const char* EventName(HardEvent e)
{
    static const char* names[] = {"MTE2_V", "V_MTE2", "MTE3_V", "V_MTE3", "V_V",    "MTE3_MTE2", "MTE2_MTE3",
                                  "S_V",    "V_S",    "S_MTE2", "MTE2_S", "S_MTE3", "MTE3_S"};
    const int i = static_cast<int>(e);
    return i >= 0 && i < static_cast<int>(HardEvent::MAX) ? names[i] : "?";
}
inline void PerfFlag(bool set, HardEvent e, int32_t id)
{
    if (!ascend_emu::perf::On()) return;
    ascend_emu::perf::Flag(set, static_cast<int>(e), EventName(e), Pipes(e).src, Pipes(e).dst, id);
}
inline void CheckEventId(HardEvent e, int32_t id, const char* api)
{
    if (Pipes(e).src < 0) ascend_emu::Fail("event protocol", ascend_emu::Fmt("%s with an unknown HardEvent", api), ascend_emu::doc::kSetFlag);
    if (id < 0 || id >= ascend_emu::kEventIds) {
        ascend_emu::Fail("event protocol", ascend_emu::Fmt("%s with event id %d; ids are 0..7", api, id),
                         ascend_emu::doc::kSetFlag);
    }
}

// The TPipe's 8 ids per HardEvent: taken by AllocEventID and by the queues (EnQue until its DeQue,
// FreeTensor until the buffer's next AllocTensor), as kernel_tquebind_impl.h takes them.
inline TEventID FreeEventId(HardEvent e, const char* api)
{
    auto& s = ascend_emu::State();
    for (int id = 0; id < ascend_emu::kEventIds; ++id) {
        if (!s.reserved_ids[static_cast<int>(e)][id]) return id;
    }
    ascend_emu::Fail("event protocol",
                     ascend_emu::Fmt("%s: all 8 event ids of %s are taken (AllocEventID, tensors in a queue and "
                                     "freed queue buffers each hold one)",
                                     api, EventName(e)),
                     ascend_emu::doc::kSetFlag);
}
inline TEventID TakeEventId(HardEvent e, const char* api)
{
    TEventID id = FreeEventId(e, api);
    ascend_emu::State().reserved_ids[static_cast<int>(e)][id] = true;
    return id;
}
// A queue's EnQue and FreeTensor set their event on the id they take (kernel_tquebind_impl.h): a SetFlag
// of the kernel's own on that id still waiting for its WaitFlag (FetchEventID reserves nothing) would be
// set twice (SetFlag-WaitFlag(ISASI).md: undefined, a later PipeBarrier<PIPE_ALL> hangs).
inline TEventID TakeQueueEventId(HardEvent e, const char* api)
{
    TEventID id = TakeEventId(e, api);
    if (ascend_emu::State().flags[static_cast<int>(e)][id].set) {
        ascend_emu::Fail("event protocol",
                         ascend_emu::Fmt("%s sets %s id %d, on which a SetFlag of the kernel still waits for its "
                                         "WaitFlag (FetchEventID does not reserve the id it returns): set twice",
                                         api, EventName(e), id),
                         ascend_emu::doc::kSetFlag);
    }
    return id;
}
// An id a queue holds (from its EnQue to the DeQue, from its FreeTensor to the buffer's next AllocTensor)
// is not the kernel's to set or wait for: with the TPipe-TQue framework a SetFlag/WaitFlag id comes from
// AllocEventID or FetchEventID (SetFlag-WaitFlag(ISASI).md), neither of which hands out such an id.
inline void CheckNotQueueHeld(HardEvent e, int32_t id, const char* api)
{
    const auto& s = ascend_emu::State();
    if (s.reserved_ids[static_cast<int>(e)][id] && !s.alloc_ids[static_cast<int>(e)][id]) {
        ascend_emu::Fail("event protocol",
                         ascend_emu::Fmt("%s on %s id %d, which a queue holds (its EnQue or FreeTensor set that flag); "
                                         "take ids from AllocEventID or FetchEventID",
                                         api, EventName(e), id),
                         ascend_emu::doc::kSetFlag);
    }
}
inline void GiveEventId(HardEvent e, TEventID id) { ascend_emu::State().reserved_ids[static_cast<int>(e)][id] = false; }
} // namespace emu_detail

template <HardEvent event>
inline void SetFlag(int32_t eventID)
{
    emu_detail::CheckEventId(event, eventID, "SetFlag");
    emu_detail::CheckNotQueueHeld(event, eventID, "SetFlag");
    auto& f = ascend_emu::State().flags[static_cast<int>(event)][eventID];
    if (f.set) {
        ascend_emu::Fail("event protocol",
                         ascend_emu::Fmt("SetFlag twice on event %d id %d without a WaitFlag in between "
                                         "(undefined; a later PipeBarrier<PIPE_ALL> hangs)",
                                         static_cast<int>(event), eventID),
                         ascend_emu::doc::kSetFlag);
    }
    f.set = true;
    f.snapshot = ascend_emu::Snapshot(emu_detail::Pipes(event).src);
    emu_detail::PerfFlag(true, event, eventID);
}

template <HardEvent event>
inline void WaitFlag(int32_t eventID)
{
    emu_detail::CheckEventId(event, eventID, "WaitFlag");
    emu_detail::CheckNotQueueHeld(event, eventID, "WaitFlag");
    auto& f = ascend_emu::State().flags[static_cast<int>(event)][eventID];
    if (!f.set) {
        ascend_emu::Fail("event protocol",
                         ascend_emu::Fmt("WaitFlag on event %d id %d with no pending SetFlag: the pipe would wait "
                                         "forever",
                                         static_cast<int>(event), eventID),
                         ascend_emu::doc::kSetFlag);
    }
    ascend_emu::Observe(emu_detail::Pipes(event).dst, f.snapshot);
    f.set = false;
    emu_detail::PerfFlag(false, event, eventID);
}

template <pipe_t pipe>
inline void PipeBarrier()
{
    using namespace ascend_emu;
    BlockState& s = State();
    perf::Barrier(pipe == PIPE_V ? kV : pipe == PIPE_MTE2 ? kMte2 : pipe == PIPE_MTE3 ? kMte3 : pipe == PIPE_ALL ? -1 : 99);
    switch (pipe) {
        case PIPE_V: s.clock[kV][kV] = s.seq[kV]; break;
        case PIPE_MTE2: s.clock[kMte2][kMte2] = s.seq[kMte2]; break;
        case PIPE_MTE3: s.clock[kMte3][kMte3] = s.seq[kMte3]; break;
        case PIPE_ALL:
            for (int p = 0; p < kPipes; ++p)
                for (int q = 0; q < kPipes; ++q) s.clock[p][q] = s.seq[q];
            break;
        case PIPE_S: Fail("pipe sync", "PipeBarrier<PIPE_S> is not supported", doc::kPipeBarrier);
        default: break;
    }
}

class TPipe;
inline TPipe* GetTPipePtr();

namespace emu_detail {
// Queue-side events: which pipe produces into / consumes from a queue of this position.
inline int Producer(TPosition pos) { return pos == TPosition::VECIN ? ascend_emu::kMte2 : ascend_emu::kV; }
inline int Consumer(TPosition pos) { return pos == TPosition::VECIN ? ascend_emu::kV : ascend_emu::kMte3; }
inline int& LiveCount(TPosition pos)
{
    static thread_local int counts[static_cast<int>(TPosition::MAX) + 1];
    return counts[static_cast<int>(pos)];
}
} // namespace emu_detail

template <TPosition pos, int32_t depth, auto mask = 0>
class TQue {
    static_assert(pos != TPosition::VECCALC, "TQue does not accept VECCALC: use TBuf<TPosition::VECCALC>");
    static_assert(pos == TPosition::VECIN || pos == TPosition::VECOUT,
                  "this emulation covers vector-core queues (VECIN, VECOUT) only");
    static_assert(depth >= 1, "depth 0 (in-place) queues are not emulated");

public:
    template <typename T>
    LocalTensor<T> AllocTensor()
    {
        CheckInit("AllocTensor");
        int pick = -1;
        for (int i = 0; i < num_; ++i) {
            int b = (next_ + i) % num_;
            if (state_[b] == kFree) {
                pick = b;
                break;
            }
        }
        if (pick < 0) {
            ascend_emu::Fail("queue protocol",
                             ascend_emu::Fmt("AllocTensor with all %d buffers of the queue in use (FreeTensor "
                                             "missing?); the NPU hangs here",
                                             num_),
                             ascend_emu::doc::kAllocTensor);
        }
        int& live = emu_detail::LiveCount(pos);
        if (live + 1 > ascend_emu::kMaxLivePerPosition) {
            ascend_emu::Fail("queue protocol",
                             ascend_emu::Fmt("more than %d tensors allocated at once on one TPosition",
                                             ascend_emu::kMaxLivePerPosition),
                             ascend_emu::doc::kAllocTensor);
        }
        ++live;
        next_ = (pick + 1) % num_;
        state_[pick] = kAllocated;
        if (free_id_[pick] >= 0) {  // the FreeTensor's event is waited for here, and its id given back
            emu_detail::GiveEventId(kFreeEvent, free_id_[pick]);
            free_id_[pick] = -1;
        }
        // The producer pipe may not overwrite the buffer before the consumer is done with it.
        ascend_emu::Observe(emu_detail::Producer(pos), free_clock_[pick]);
        Perf(ascend_emu::perf::kOpAlloc, pick);
        if (!ascend_emu::perf::SkipCompute()) ascend_emu::PoisonUb(addr_[pick], len_);  // uninitialised contents
        return LocalTensor<T>(addr_[pick], len_, pos, this, pick);
    }

    template <typename T>
    bool EnQue(const LocalTensor<T>& t)
    {
        int b = Owned(t, "EnQue");
        if (state_[b] != kAllocated) {
            ascend_emu::Fail("queue protocol", "EnQue of a tensor that is already queued or was freed",
                             ascend_emu::doc::kEnQue);
        }
        if (count_ >= depth) {
            ascend_emu::Fail("queue protocol",
                             ascend_emu::Fmt("EnQue with %d tensors already queued; the queue depth is %d", count_,
                                             depth),
                             ascend_emu::doc::kEnQue);
        }
        enq_clock_[b] = ascend_emu::Snapshot(emu_detail::Producer(pos));
        enq_id_[b] = emu_detail::TakeQueueEventId(kEnQueEvent, "EnQue");  // until its DeQue
        state_[b] = kQueued;
        fifo_[(head_ + count_) % kMaxBuffers] = b;
        ++count_;
        Perf(ascend_emu::perf::kOpEnQue, b);
        return true;
    }

    template <typename T>
    LocalTensor<T> DeQue()
    {
        CheckInit("DeQue");
        if (count_ == 0) {
            ascend_emu::Fail("queue protocol", "DeQue on an empty queue (DeQue before EnQue)",
                             ascend_emu::doc::kDeQue);
        }
        int b = fifo_[head_];
        head_ = (head_ + 1) % kMaxBuffers;
        --count_;
        state_[b] = kAllocated;
        emu_detail::GiveEventId(kEnQueEvent, enq_id_[b]);
        enq_id_[b] = -1;
        ascend_emu::Observe(emu_detail::Consumer(pos), enq_clock_[b]);
        Perf(ascend_emu::perf::kOpDeQue, b);
        return LocalTensor<T>(addr_[b], len_, pos, this, b);
    }

    template <typename T>
    void FreeTensor(LocalTensor<T>& t)
    {
        int b = Owned(t, "FreeTensor");
        if (state_[b] == kQueued) {
            ascend_emu::Fail("queue protocol", "FreeTensor of a tensor that is still in the queue (not DeQue'd)",
                             ascend_emu::doc::kFreeTensor);
        }
        if (state_[b] == kFree) {
            ascend_emu::Fail("queue protocol", "FreeTensor of a tensor that is not allocated (freed twice?)",
                             ascend_emu::doc::kFreeTensor);
        }
        free_clock_[b] = ascend_emu::Snapshot(emu_detail::Consumer(pos));
        free_id_[b] = emu_detail::TakeQueueEventId(kFreeEvent, "FreeTensor");  // until the buffer's next AllocTensor
        state_[b] = kFree;
        Perf(ascend_emu::perf::kOpFree, b);
        --emu_detail::LiveCount(pos);
    }

    bool HasTensorInQue() const { return count_ > 0; }
    int32_t GetTensorCountInQue() const { return count_; }
    bool VacantInQue() const { return count_ < depth; }

    // ---- emulator internals (TPipe::InitBuffer) ----------------------------------------------
    void EmuInit(uint32_t base, uint8_t num, uint32_t len)
    {
        if (num_ != 0) ascend_emu::Fail("queue protocol", "InitBuffer twice on one queue", ascend_emu::doc::kInitBuffer);
        if (num < 1 || num > kMaxBuffers) {
            ascend_emu::Fail("queue protocol", ascend_emu::Fmt("InitBuffer with %d buffers", num),
                             ascend_emu::doc::kInitBuffer);
        }
        num_ = num;
        len_ = len;
        perf_id_ = ascend_emu::perf::NewQueue();
        for (int i = 0; i < num; ++i) {
            addr_[i] = base + i * len;
            state_[i] = kFree;
            free_clock_[i].fill(0);
        }
    }
    ~TQue()
    {
        // A tensor still queued when the kernel's queue goes: its EnQue's flag is set and nothing waits for
        // it (TPipe's destructor waits only for freed buffers' flags, kernel_tpipe_impl.h), so it outlives
        // the kernel. Not while a failed rule is unwinding (Fail aborts; nothing unwinds through it).
        if (count_ > 0 && ascend_emu::g_state != nullptr) {
            ascend_emu::Fail("event protocol",
                             ascend_emu::Fmt("the kernel ended with %d tensor(s) still in a queue: the %s flag their "
                                             "EnQue set is never waited on (DeQue them) and leaks into later kernels",
                                             count_, emu_detail::EventName(kEnQueEvent)),
                             ascend_emu::doc::kSetFlag);
        }
        for (int i = 0; i < num_; ++i) {
            if (state_[i] != kFree) --emu_detail::LiveCount(pos);
            if (enq_id_[i] >= 0) emu_detail::GiveEventId(kEnQueEvent, enq_id_[i]);
            if (free_id_[i] >= 0) emu_detail::GiveEventId(kFreeEvent, free_id_[i]);
        }
    }

private:
    static constexpr int kMaxBuffers = 8;
    // The events a queue's EnQue and FreeTensor set (kernel_tquebind_impl.h), each on an id of the TPipe's.
    static constexpr HardEvent kEnQueEvent = pos == TPosition::VECIN ? HardEvent::MTE2_V : HardEvent::V_MTE3;
    static constexpr HardEvent kFreeEvent = pos == TPosition::VECIN ? HardEvent::V_MTE2 : HardEvent::MTE3_V;
    enum BufState { kFree, kAllocated, kQueued };

    void Perf(ascend_emu::perf::OpKind kind, int buffer) const
    {
        if (!ascend_emu::perf::On()) return;
        ascend_emu::perf::Queue(kind, perf_id_, buffer, emu_detail::Producer(pos), emu_detail::Consumer(pos));
    }
    void CheckInit(const char* api) const
    {
        if (num_ == 0) {
            ascend_emu::Fail("queue protocol", ascend_emu::Fmt("%s on a queue that TPipe::InitBuffer never set up", api),
                             ascend_emu::doc::kInitBuffer);
        }
    }
    template <typename T>
    int Owned(const LocalTensor<T>& t, const char* api) const
    {
        CheckInit(api);
        int b = t.EmuBuffer();
        if (t.EmuOwner() != this || b < 0 || b >= num_ || t.EmuAddr() != addr_[b]) {
            ascend_emu::Fail("queue protocol",
                             ascend_emu::Fmt("%s of a tensor this queue did not hand out (UB byte %u)", api,
                                             t.EmuAddr()),
                             api[0] == 'E' ? ascend_emu::doc::kEnQue : ascend_emu::doc::kFreeTensor);
        }
        return b;
    }

    int num_ = 0;
    uint32_t len_ = 0;
    uint32_t addr_[kMaxBuffers] = {};
    BufState state_[kMaxBuffers] = {};
    ascend_emu::Clock enq_clock_[kMaxBuffers] = {};
    ascend_emu::Clock free_clock_[kMaxBuffers] = {};
    int fifo_[kMaxBuffers] = {};
    TEventID enq_id_[kMaxBuffers] = {-1, -1, -1, -1, -1, -1, -1, -1};
    TEventID free_id_[kMaxBuffers] = {-1, -1, -1, -1, -1, -1, -1, -1};
    int head_ = 0, count_ = 0, next_ = 0;
    int perf_id_ = 0;  // this queue's number in the performance trace of the block
};

template <TPosition pos = TPosition::VECCALC>
class TBuf {
public:
    // Not const, as in kernel_tpipe.h: a const member function of a kernel cannot call Get.
    template <typename T>
    LocalTensor<T> Get()
    {
        CheckInit();
        return LocalTensor<T>(addr_, len_, pos, this, 0);
    }
    template <typename T>
    LocalTensor<T> Get(uint32_t len)
    {
        CheckInit();
        uint64_t bytes = static_cast<uint64_t>(len) * sizeof(T);
        if (bytes == 0 || bytes > len_ || bytes % ascend_emu::kBlockBytes != 0) {
            ascend_emu::Fail("TBuf::Get",
                             ascend_emu::Fmt("Get<%zu-byte type>(%u): %llu bytes of a %u-byte buffer (must fit and be "
                                             "a multiple of 32)",
                                             sizeof(T), len, static_cast<unsigned long long>(bytes), len_),
                             ascend_emu::doc::kTBufGet);
        }
        return LocalTensor<T>(addr_, static_cast<uint32_t>(bytes), pos, this, 0);
    }
    void EmuInit(uint32_t base, uint32_t len)
    {
        if (len_ != 0) ascend_emu::Fail("TBuf::Get", "InitBuffer twice on one TBuf", ascend_emu::doc::kInitBuffer);
        addr_ = base;
        len_ = len;
    }

private:
    void CheckInit() const
    {
        if (len_ == 0) {
            ascend_emu::Fail("TBuf::Get", "Get on a TBuf that TPipe::InitBuffer never set up",
                             ascend_emu::doc::kInitBuffer);
        }
    }
    uint32_t addr_ = 0;
    uint32_t len_ = 0;
};

class TPipe {
public:
    TPipe()
    {
        auto& s = ascend_emu::State();
        if (s.pipe != nullptr) {
            ascend_emu::Fail("TPipe", "a second TPipe while one is alive; a kernel has exactly one",
                             ascend_emu::doc::kTPipe);
        }
        s.pipe = this;
    }
    ~TPipe()
    {
        auto& s = ascend_emu::State();
        if (s.pipe == this) s.pipe = nullptr;
    }
    TPipe(const TPipe&) = delete;
    TPipe& operator=(const TPipe&) = delete;

    template <class Q>
    bool InitBuffer(Q& que, uint8_t num, uint32_t len)
    {
        CheckLength(len, "InitBuffer(queue)");
        uint32_t rounded = Round32(len);
        uint32_t base = Reserve(static_cast<uint64_t>(rounded) * num, "InitBuffer(queue)", num);
        que.EmuInit(base, num, rounded);
        return true;
    }
    template <TPosition pos>
    bool InitBuffer(TBuf<pos>& buf, uint32_t len)
    {
        CheckLength(len, "InitBuffer(TBuf)");
        uint32_t rounded = Round32(len);
        uint32_t base = Reserve(rounded, "InitBuffer(TBuf)", 1);
        buf.EmuInit(base, rounded);
        return true;
    }

    template <HardEvent evt>
    TEventID FetchEventID()
    {
        return FetchEventID(evt);
    }
    // As kernel_tpipe_impl.h: the lowest id nobody took (AllocEventID, or a queue's EnQue or FreeTensor);
    // a flag that is set but not yet waited for does not take its id, so a second fetch before the wait
    // returns the same id, and setting it again is the event protocol's double SetFlag.
    TEventID FetchEventID(HardEvent evt) { return emu_detail::FreeEventId(evt, "FetchEventID"); }
    template <HardEvent evt>
    TEventID AllocEventID()
    {
        const TEventID id = emu_detail::TakeEventId(evt, "AllocEventID");
        ascend_emu::State().alloc_ids[static_cast<int>(evt)][id] = true;
        return id;
    }
    // ReleaseEventID.md: the id must come from AllocEventID (of the same event), once per AllocEventID;
    // the NPU frees any id it is given, a queue's included.
    template <HardEvent evt>
    void ReleaseEventID(TEventID id)
    {
        emu_detail::CheckEventId(evt, id, "ReleaseEventID");
        bool& mine = ascend_emu::State().alloc_ids[static_cast<int>(evt)][id];
        if (!mine) {
            ascend_emu::Fail("event protocol",
                             ascend_emu::Fmt("ReleaseEventID<%s>(%d): that id is not one AllocEventID<%s> handed out "
                                             "(or it was released already)",
                                             emu_detail::EventName(evt), id, emu_detail::EventName(evt)),
                             ascend_emu::doc::kReleaseEventID);
        }
        mine = false;
        emu_detail::GiveEventId(evt, id);
    }
    void Reset() { used_ = 0; handles_ = 0; }
    void Destroy() { PipeBarrier<PIPE_ALL>(); }

    uint32_t EmuUsedBytes() const { return used_; }

private:
    static uint32_t Round32(uint32_t len) { return (len + 31u) / 32u * 32u; }
    static void CheckLength(uint32_t len, const char* api)
    {
        if (len == 0) {  // kernel_tpipe_impl.h asserts it
            ascend_emu::Fail("UB capacity", ascend_emu::Fmt("%s with a length of 0 bytes", api),
                             ascend_emu::doc::kInitBuffer);
        }
    }
    // ``buffers``: a queue's every buffer counts towards the 64 (QBUF_MAX_LEN), a TBuf one
    uint32_t Reserve(uint64_t bytes, const char* api, int buffers)
    {
        handles_ += buffers;
        if (handles_ > ascend_emu::kMaxBufferHandles) {
            ascend_emu::Fail("UB capacity",
                             ascend_emu::Fmt("more than 64 buffers initialised in one TPipe (%d with this %s; a "
                                             "queue's every buffer counts)",
                                             handles_, api),
                             ascend_emu::doc::kInitBuffer);
        }
        if (used_ + bytes > ascend_emu::kUbUsable) {
            ascend_emu::Fail("UB capacity",
                             ascend_emu::Fmt("%s of %llu bytes brings the UB in use to %llu bytes; dav-2201 leaves %u "
                                             "usable (192 KB - 256 B - 8 KB reserved from 184 KB on, where Select "
                                             "keeps its temp). Nothing checks this on the NPU: buffers would "
                                             "silently overlap that and each other",
                                             api, static_cast<unsigned long long>(bytes),
                                             static_cast<unsigned long long>(used_ + bytes), ascend_emu::kUbUsable),
                             ascend_emu::doc::kUbLimits);
        }
        uint32_t base = used_;
        used_ += static_cast<uint32_t>(bytes);
        auto& s = ascend_emu::State();
        s.ub_peak = std::max(s.ub_peak, used_);
        return base;
    }
    uint32_t used_ = 0;
    int handles_ = 0;
};

inline TPipe* GetTPipePtr() { return static_cast<TPipe*>(ascend_emu::State().pipe); }

} // namespace AscendC
