// Counters and a pipe timeline for the performance model (`ascend-rmsnorm bench --model`,
// ascend_rmsnorm/perf/, its front end cli/perfmodel.py). Off by default: every hook starts with one test of a
// thread-local flag, so an ordinary emu run pays nothing measurable.
//
// While recording, each block of each launch gets
//   - counts: GM bytes, DMAs and bursts per GM region (a region is what one SetGlobalBuffer call
//     set up; the Python side names regions by the address ranges of the tensors it passed),
//     vector instructions / repeats / elements per API, SetFlag and WaitFlag per HardEvent,
//     PipeBarriers per pipe, TQue AllocTensor/EnQue/DeQue/FreeTensor, scalar UB GetValue/SetValue,
//     scalar GM accesses, the UB peak;
//   - a trace: one small record per instruction in program order (what the scalar unit issues),
//     replayed afterwards on four in-order pipes (S, V, MTE2, MTE3) with latency parameters
//     (Replay below). Replaying is cheap, so one recorded run serves any number of parameter sets.
// "Fast" recording also skips the arithmetic and the data movement (element loops, memcpy, UB
// poisoning): a kernel's control flow may not depend on data, so the counts are the same.
// Every sync and protocol check still runs in fast mode.
//
// How an emulated API reports itself (one call per API family; docs/perf-model.md §1):
//   vector instruction: perf::Vector(api, repeats, elements)  or  perf::VectorBytes(api, bytes, elements)
//   GM<->UB DMA:        perf::Dma(pipe, gm_region, gm_address, bytes, bursts)
//   flags / barriers:   perf::Flag(...), perf::Barrier(pipe)      queues: perf::Queue(...)
//   scalar UB access:   perf::ScalarUb(write)                       GM scalar: perf::GmScalar(...)
// and skips its arithmetic when perf::SkipCompute() is true (after its checks and sync tracking).
#pragma once

#include <algorithm>
#include <atomic>
#include <deque>
#include <string>
#include <vector>

#include "emu_base.h"

namespace ascend_emu {
namespace perf {

constexpr int32_t kVersion = 1;

// Trace record kinds.
enum OpKind : uint8_t {
    kOpVector,
    kOpDma,
    kOpSetFlag,
    kOpWaitFlag,
    kOpBarrier,
    kOpAlloc,
    kOpEnQue,
    kOpDeQue,
    kOpFree,
    kOpUbRead,
    kOpUbWrite,
    kOpGmRead,
    kOpGmWrite,
};

// One issued instruction. `a`: a pipe, or src<<4|dst for flags and queues; `b`: event slot or
// queue buffer slot (a vector instruction: bit 0, a same-window overwrite); `n`: repeats or bursts;
// `bytes` and `addr` for DMAs.
struct TraceOp {
    uint8_t kind;
    uint8_t a;
    uint16_t b;
    uint32_t n;
    uint64_t bytes;
    uint64_t addr;
};

struct ApiCount {
    const char* api;
    uint64_t instr, repeats, elements;
};

struct GmCount {
    uintptr_t base;
    uint64_t size;  // bytes given to SetGlobalBuffer (0: unsized)
    uint64_t read_bytes, write_bytes, read_dmas, write_dmas, read_bursts, write_bursts;
    uint64_t scalar_reads, scalar_writes;
};

constexpr int kMaxEvents = 16;
constexpr int kBarrierKinds = 5;  // V, MTE2, MTE3, ALL, other
inline const char* BarrierName(int k)
{
    static const char* names[] = {"PIPE_V", "PIPE_MTE2", "PIPE_MTE3", "PIPE_ALL", "other"};
    return names[k];
}

struct BlockRecord {
    int64_t block = -1;
    std::vector<ApiCount> vec;
    std::vector<GmCount> gm;
    uint64_t set_flag[kMaxEvents] = {}, wait_flag[kMaxEvents] = {};
    uint64_t barrier[kBarrierKinds] = {};
    uint64_t alloc = 0, enque = 0, deque = 0, free = 0;
    uint64_t ub_get = 0, ub_set = 0;
    uint32_t ub_peak = 0;
    uint32_t issued[kPipes] = {};  // operations the emulation issued per pipe (BlockState::seq)
    int queues = 0;  // queue ids handed out in this block
    std::vector<TraceOp> trace;
    // Vector instructions that write UB bytes an earlier one of the same barrier window read or
    // wrote (SameWindowOverwrite); their trace records carry bit 0 of `b`.
    uint64_t overwrites = 0;
    size_t last_vector = static_cast<size_t>(-1);  // the trace index of the last vector record
    uint32_t last_vector_op = 0;                    // and its op number (BlockState::seq[kV])
    bool overwrite_next = false;                    // the next vector record is such an op
};

struct LaunchRecord {
    std::string kernel;
    uint32_t block_dim = 0;
    std::vector<BlockRecord> blocks;  // indexed by block index
};

struct Recorder {
    bool on = false;
    bool fast = false;
    std::vector<LaunchRecord> launches;
    BlockRecord* cur = nullptr;
    const char* event_names[kMaxEvents] = {};
};

inline thread_local Recorder g_rec;
// Threads recording right now, process-wide: while it is 0 (always, outside the model) a hook costs
// one plain load and no thread-local lookup.
inline std::atomic<int> g_recording{0};

// Each hook is a small inline test of this, and the recording itself out of line.
inline bool Recording() { return g_recording.load(std::memory_order_relaxed) != 0; }
inline bool On() { return Recording() && g_rec.on; }
// True while a fast recording runs: an API skips its element loop / memcpy (not its checks).
inline bool SkipCompute() { return Recording() && g_rec.fast; }

inline BlockRecord* Cur() { return On() ? g_rec.cur : nullptr; }

inline void Push(BlockRecord* b, uint8_t kind, uint8_t a, uint16_t slot, uint32_t n, uint64_t bytes = 0,
                 uint64_t addr = 0)
{
    b->trace.push_back(TraceOp{kind, a, slot, n, bytes, addr});
}

// ---- hooks -----------------------------------------------------------------------------------

// One vector instruction (PIPE_V) of `repeats` 256-byte repeats over `elements` elements.
__attribute__((noinline)) inline void VectorRecord(const char* api, uint64_t repeats, uint64_t elements)
{
    BlockRecord* b = Cur();
    if (b == nullptr) return;
    ApiCount* c = nullptr;
    for (auto& e : b->vec) {
        if (e.api == api || std::strcmp(e.api, api) == 0) {
            c = &e;
            break;
        }
    }
    if (c == nullptr) {
        b->vec.push_back(ApiCount{api, 0, 0, 0});
        c = &b->vec.back();
    }
    c->instr += 1;
    c->repeats += repeats;
    c->elements += elements;
    Push(b, kOpVector, kV, b->overwrite_next ? 1 : 0, static_cast<uint32_t>(repeats > 0xFFFFFFFFu ? 0xFFFFFFFFu : repeats));
    b->overwrite_next = false;
    b->last_vector = b->trace.size() - 1;
    b->last_vector_op = State().seq[kV];
}

// Vector op `op` writes UB bytes that an earlier vector op of the same barrier window read or wrote
// (emu_base.h TrackWrite). The emulation allows it (docs/design.md §9); the replay puts a barrier
// before it under `war_barriers`, the what-if of a compiler or pipe that orders it. An API records its
// instruction before or after its hazard tracking, so the op's record is the last one or the next.
inline void SameWindowOverwrite(uint32_t op)
{
    BlockRecord* b = Cur();
    if (b == nullptr) return;
    if (b->last_vector < b->trace.size() && b->last_vector_op == op) {
        TraceOp& t = b->trace[b->last_vector];
        if ((t.b & 1) == 0) {
            t.b |= 1;
            ++b->overwrites;
        }
    } else if (!b->overwrite_next) {
        b->overwrite_next = true;
        ++b->overwrites;
    }
}

inline void Vector(const char* api, uint64_t repeats, uint64_t elements)
{
    if (Recording()) VectorRecord(api, repeats, elements);
}

// A level-2 (count) vector instruction touching `bytes` per operand at its widest type.
inline void VectorBytes(const char* api, uint64_t bytes, uint64_t elements)
{
    if (!On()) return;
    Vector(api, (bytes + kRepeatBytes - 1) / kRepeatBytes, elements);
}

inline GmCount& Region(BlockRecord* b, uintptr_t base, uint64_t size)
{
    for (auto& g : b->gm) {
        if (g.base == base) return g;
    }
    b->gm.push_back(GmCount{base, size, 0, 0, 0, 0, 0, 0, 0, 0});
    return b->gm.back();
}

// One DMA on MTE2 (GM->UB) or MTE3 (UB->GM): `bytes` moved in `bursts` bursts, starting at GM
// `addr`, inside the region that SetGlobalBuffer(base, size) set up.
__attribute__((noinline)) inline void DmaRecord(int pipe, uintptr_t base, uint64_t size, uintptr_t addr, uint64_t bytes, uint32_t bursts)
{
    BlockRecord* b = Cur();
    if (b == nullptr) return;
    GmCount& g = Region(b, base, size);
    if (pipe == kMte2) {
        g.read_bytes += bytes;
        g.read_dmas += 1;
        g.read_bursts += bursts;
    } else {
        g.write_bytes += bytes;
        g.write_dmas += 1;
        g.write_bursts += bursts;
    }
    Push(b, kOpDma, static_cast<uint8_t>(pipe), 0, bursts, bytes, addr);
}

inline void Dma(int pipe, uintptr_t base, uint64_t size, uintptr_t addr, uint64_t bytes, uint32_t bursts)
{
    if (Recording()) DmaRecord(pipe, base, size, addr, bytes, bursts);
}

// A scalar GetValue/SetValue on a GlobalTensor (the scalar unit reads/writes GM directly).
__attribute__((noinline)) inline void GmScalarRecord(uintptr_t base, uint64_t size, uint64_t bytes, bool write)
{
    BlockRecord* b = Cur();
    if (b == nullptr) return;
    GmCount& g = Region(b, base, size);
    (write ? g.scalar_writes : g.scalar_reads) += 1;
    (write ? g.write_bytes : g.read_bytes) += bytes;
    Push(b, write ? kOpGmWrite : kOpGmRead, kS, 0, 1, bytes, 0);
}

inline void GmScalar(uintptr_t base, uint64_t size, uint64_t bytes, bool write)
{
    if (Recording()) GmScalarRecord(base, size, bytes, write);
}

// SetFlag / WaitFlag of HardEvent number `event` (name for the report) from pipe src to dst.
__attribute__((noinline)) inline void FlagRecord(bool set, int event, const char* name, int src, int dst, int id)
{
    BlockRecord* b = Cur();
    if (b == nullptr || event < 0 || event >= kMaxEvents) return;
    g_rec.event_names[event] = name;
    (set ? b->set_flag : b->wait_flag)[event] += 1;
    Push(b, set ? kOpSetFlag : kOpWaitFlag, static_cast<uint8_t>(src << 4 | dst),
         static_cast<uint16_t>(event * kEventIds + id), 0);
}

inline void Flag(bool set, int event, const char* name, int src, int dst, int id)
{
    if (Recording()) FlagRecord(set, event, name, src, dst, id);
}

// PipeBarrier: pipe is kV, kMte2, kMte3, or -1 for PIPE_ALL.
__attribute__((noinline)) inline void BarrierRecord(int pipe)
{
    BlockRecord* b = Cur();
    if (b == nullptr) return;
    int k = pipe == kV ? 0 : pipe == kMte2 ? 1 : pipe == kMte3 ? 2 : pipe == -1 ? 3 : 4;
    b->barrier[k] += 1;
    Push(b, kOpBarrier, static_cast<uint8_t>(pipe < 0 ? 0xFF : pipe), 0, 0);
}

inline void Barrier(int pipe)
{
    if (Recording()) BarrierRecord(pipe);
}

// A new TQue in this block (TPipe::InitBuffer): its id names its buffers' slots in the trace.
inline int NewQueue()
{
    if (!Recording()) return 0;
    BlockRecord* b = Cur();
    return b == nullptr ? 0 : b->queues++;
}

// AllocTensor (kOpAlloc), EnQue, DeQue, FreeTensor of buffer `buffer` of queue `queue`, whose
// producer pipe fills it and consumer pipe drains it.
__attribute__((noinline)) inline void QueueRecord(OpKind kind, int queue, int buffer, int producer, int consumer)
{
    BlockRecord* b = Cur();
    if (b == nullptr) return;
    switch (kind) {
        case kOpAlloc: b->alloc += 1; break;
        case kOpEnQue: b->enque += 1; break;
        case kOpDeQue: b->deque += 1; break;
        default: b->free += 1; break;
    }
    Push(b, kind, static_cast<uint8_t>(producer << 4 | consumer), static_cast<uint16_t>(queue * 8 + buffer), 0);
}

inline void Queue(OpKind kind, int queue, int buffer, int producer, int consumer)
{
    if (Recording()) QueueRecord(kind, queue, buffer, producer, consumer);
}

// LocalTensor::GetValue (write = false) / SetValue (write = true) on the scalar unit.
__attribute__((noinline)) inline void ScalarUbRecord(bool write)
{
    BlockRecord* b = Cur();
    if (b == nullptr) return;
    (write ? b->ub_set : b->ub_get) += 1;
    Push(b, write ? kOpUbWrite : kOpUbRead, kS, 0, 0);
}

inline void ScalarUb(bool write)
{
    if (Recording()) ScalarUbRecord(write);
}

// ---- launch bookkeeping (emu_launch.h) -------------------------------------------------------
__attribute__((noinline)) inline void BeginLaunchRecord(const char* kernel, uint32_t block_dim)
{
    if (!On()) return;
    g_rec.launches.emplace_back();
    LaunchRecord& l = g_rec.launches.back();
    l.kernel = kernel;
    l.block_dim = block_dim;
    l.blocks.resize(block_dim);
}

inline void BeginLaunch(const char* kernel, uint32_t block_dim)
{
    if (Recording()) BeginLaunchRecord(kernel, block_dim);
}
__attribute__((noinline)) inline void BeginBlockRecord(int64_t idx)
{
    if (!On() || g_rec.launches.empty()) return;
    g_rec.cur = &g_rec.launches.back().blocks[static_cast<size_t>(idx)];
    g_rec.cur->block = idx;
}

inline void BeginBlock(int64_t idx)
{
    if (Recording()) BeginBlockRecord(idx);
}
// `seq`: the operations the emulation issued per pipe. Every API calls BeginOp once, so the Python
// side can tell when an API issued work without reporting it to these counters (a missing hook).
__attribute__((noinline)) inline void EndBlockRecord(uint32_t ub_peak, const uint32_t* seq)
{
    if (!On()) return;
    if (g_rec.cur != nullptr) {
        g_rec.cur->ub_peak = ub_peak;
        for (int p = 0; p < kPipes; ++p) g_rec.cur->issued[p] = seq[p];
    }
    g_rec.cur = nullptr;
}

inline void EndBlock(uint32_t ub_peak, const uint32_t* seq)
{
    if (Recording()) EndBlockRecord(ub_peak, seq);
}

// ---- the timeline ------------------------------------------------------------------------------
// Latency and cost parameters, all in cycles of the AI core clock except where named. The Python
// side (perf/params.py, perf/model.py's _c_params) documents each and fills them from a preset, a JSON file or the CLI.
struct Params {
    double vec_cycles_per_repeat = 1;  // V occupancy per 256-byte repeat
    double vec_latency = 20;           // V result visible this long after the op leaves the pipe
    double mte2_bytes_per_cycle = 0;   // GM->UB rate of this core; 0 = unlimited
    double mte3_bytes_per_cycle = 0;   // UB->GM rate of this core; 0 = unlimited
    double dma_burst_cycles = 0;       // extra MTE occupancy per burst
    double gm_latency = 900;           // DMA data visible this long after its last byte moved
    double s_flag_latency = 900;       // a flag with S on either end, one way
    double pipe_flag_latency = 50;     // a flag between two of V, MTE2, MTE3
    double queue_latency = 50;         // TQue EnQue->DeQue and FreeTensor->AllocTensor
    double issue_vector = 10;          // scalar cycles to issue one vector instruction
    double issue_dma = 20;             // ... one DMA
    double issue_sync = 2;             // ... one SetFlag/WaitFlag/PipeBarrier/queue op
    double scalar_ub_access = 10;      // GetValue/SetValue on UB
    double scalar_set_extra = 40;      // scalar work charged per SetValue (the math that made the value)
    double gm_scalar_access = 900;     // scalar GetValue on GM (blocks S); SetValue costs issue_dma
    double l2_bytes = 0;               // per-core window of recently read GM bytes that hit L2; 0 = no L2
    double l2_speedup = 4;             // an L2 hit moves this many times faster than HBM
    double war_barriers = 0;           // != 0: a PIPE_V barrier before each same-window overwrite
    double block = -1;                 // replay only this block of the launch (-1: every block)
};

inline bool SetParam(Params& p, const std::string& key, double v)
{
    struct Entry {
        const char* name;
        double Params::*field;
    };
    static const Entry table[] = {
        {"vec_cycles_per_repeat", &Params::vec_cycles_per_repeat},
        {"vec_latency", &Params::vec_latency},
        {"mte2_bytes_per_cycle", &Params::mte2_bytes_per_cycle},
        {"mte3_bytes_per_cycle", &Params::mte3_bytes_per_cycle},
        {"dma_burst_cycles", &Params::dma_burst_cycles},
        {"gm_latency", &Params::gm_latency},
        {"s_flag_latency", &Params::s_flag_latency},
        {"pipe_flag_latency", &Params::pipe_flag_latency},
        {"queue_latency", &Params::queue_latency},
        {"issue_vector", &Params::issue_vector},
        {"issue_dma", &Params::issue_dma},
        {"issue_sync", &Params::issue_sync},
        {"scalar_ub_access", &Params::scalar_ub_access},
        {"scalar_set_extra", &Params::scalar_set_extra},
        {"gm_scalar_access", &Params::gm_scalar_access},
        {"l2_bytes", &Params::l2_bytes},
        {"l2_speedup", &Params::l2_speedup},
        {"war_barriers", &Params::war_barriers},
        {"block", &Params::block},
    };
    for (const auto& e : table) {
        if (key == e.name) {
            p.*(e.field) = v;
            return true;
        }
    }
    return false;
}

// "name=value" pairs separated by whitespace, commas or semicolons; false on an unknown name.
inline bool ParseParams(const char* text, Params& p, std::string& bad)
{
    std::string s = text == nullptr ? "" : text;
    size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == ',' || s[i] == ';' || s[i] == '\t')) ++i;
        if (i >= s.size()) break;
        size_t eq = s.find('=', i);
        if (eq == std::string::npos) {
            bad = s.substr(i);
            return false;
        }
        std::string key = s.substr(i, eq - i);
        char* end = nullptr;
        double v = std::strtod(s.c_str() + eq + 1, &end);
        if (end == s.c_str() + eq + 1 || !SetParam(p, key, v)) {
            bad = key;
            return false;
        }
        i = static_cast<size_t>(end - s.c_str());
    }
    return true;
}

struct BlockTime {
    double finish = 0;                 // cycles from the block's start until all its pipes are done
    double busy[kPipes] = {};          // occupancy per pipe (S: issue and scalar work)
    double stall_s = 0;                // cycles S spent waiting in WaitFlag<*_S> / GM reads
};

// Replay one block's trace on the four in-order pipes. Each instruction is issued by S in program
// order (S pays the issue cost) and starts on its pipe when the pipe is free, S has issued it and
// every WaitFlag/DeQue/AllocTensor/PipeBarrier before it on that pipe is satisfied. A SetFlag (or
// EnQue/FreeTensor) fires when everything issued before it on its source pipe has completed
// (results visible: DMA data after gm_latency, vector results after vec_latency) and every wait before
// it on that pipe is satisfied (it is that pipe's instruction, held back as the others), plus the flag's
// latency; a WaitFlag on S blocks S until then, on any other pipe it holds back that pipe's next
// instruction. PipeBarrier<PIPE_V> makes the next vector instruction wait for the previous ones to
// complete; PIPE_ALL waits for everything, S included.
inline BlockTime ReplayBlock(const BlockRecord& blk, const Params& p)
{
    BlockTime out;
    double S = 0;
    double ready[kPipes] = {0, 0, 0, 0};  // earliest start of the next instruction on the pipe
    double done[kPipes] = {0, 0, 0, 0};   // completion of everything issued so far on the pipe
    std::vector<double> flag(kMaxEvents * kEventIds, 0.0);
    std::vector<double> enq(static_cast<size_t>(blk.queues + 1) * 8, 0.0), freed(enq.size(), 0.0);
    struct Range {
        uint64_t lo, hi;
    };
    std::deque<Range> l2;  // recent reads, oldest first
    double l2_held = 0;
    auto start_on = [&](int pipe) { return std::max(S, ready[pipe]); };
    auto rate_time = [](double bytes, double rate) { return rate > 0 ? bytes / rate : 0.0; };
    for (const TraceOp& op : blk.trace) {
        const int src = op.a >> 4, dst = op.a & 0xF;
        switch (op.kind) {
            case kOpVector: {
                if ((op.b & 1) != 0 && p.war_barriers != 0) {  // the barrier a same-window overwrite would get
                    S += p.issue_sync;
                    out.busy[kS] += p.issue_sync;
                    ready[kV] = std::max(ready[kV], done[kV]);
                }
                S += p.issue_vector;
                out.busy[kS] += p.issue_vector;
                const double t0 = start_on(kV), occ = op.n * p.vec_cycles_per_repeat;
                ready[kV] = t0 + occ;
                done[kV] = std::max(done[kV], t0 + occ + p.vec_latency);
                out.busy[kV] += occ;
                break;
            }
            case kOpDma: {
                S += p.issue_dma;
                out.busy[kS] += p.issue_dma;
                const int pipe = op.a;
                const double rate = pipe == kMte2 ? p.mte2_bytes_per_cycle : p.mte3_bytes_per_cycle;
                double occ;
                if (pipe == kMte2 && p.l2_bytes > 0) {
                    // bytes of this read that the same core read within its last l2_bytes
                    const uint64_t lo = op.addr, hi = op.addr + op.bytes;
                    uint64_t hit = 0;
                    for (const Range& r : l2) {
                        const uint64_t a = std::max(lo, r.lo), z = std::min(hi, r.hi);
                        if (z > a) hit += z - a;
                    }
                    if (hit > op.bytes) hit = op.bytes;
                    occ = rate_time(static_cast<double>(op.bytes - hit), rate) +
                          rate_time(static_cast<double>(hit), rate * p.l2_speedup);
                    l2.push_back(Range{lo, hi});
                    l2_held += static_cast<double>(op.bytes);
                    while (!l2.empty() && l2_held > p.l2_bytes) {
                        l2_held -= static_cast<double>(l2.front().hi - l2.front().lo);
                        l2.pop_front();
                    }
                } else {
                    occ = rate_time(static_cast<double>(op.bytes), rate);
                }
                occ += op.n * p.dma_burst_cycles;
                const double t0 = start_on(pipe);
                ready[pipe] = t0 + occ;
                done[pipe] = std::max(done[pipe], t0 + occ + p.gm_latency);
                out.busy[pipe] += occ;
                break;
            }
            case kOpSetFlag: {
                S += p.issue_sync;
                out.busy[kS] += p.issue_sync;
                const double lat = (src == kS || dst == kS) ? p.s_flag_latency : p.pipe_flag_latency;
                // a SetFlag is an instruction of its source pipe: it runs after that pipe's earlier
                // instructions complete and after any WaitFlag/DeQue before it on that pipe is satisfied
                // (SetFlag-WaitFlag(ISASI).md: WaitFlag blocks the destination pipe's later instructions),
                // so a WaitFlag and a SetFlag with nothing between them on one pipe chain
                const double fire = src == kS ? S : std::max({S, done[src], ready[src]});
                flag[op.b] = fire + lat;
                break;
            }
            case kOpWaitFlag: {
                S += p.issue_sync;
                out.busy[kS] += p.issue_sync;
                if (dst == kS) {
                    if (flag[op.b] > S) out.stall_s += flag[op.b] - S;
                    S = std::max(S, flag[op.b]);
                } else {
                    ready[dst] = std::max(ready[dst], std::max(S, flag[op.b]));
                }
                break;
            }
            case kOpBarrier: {
                S += p.issue_sync;
                out.busy[kS] += p.issue_sync;
                if (op.a == 0xFF) {
                    double t = S;
                    for (int q = 1; q < kPipes; ++q) t = std::max(t, done[q]);
                    if (t > S) out.stall_s += t - S;
                    S = t;
                    for (int q = 1; q < kPipes; ++q) ready[q] = std::max(ready[q], t);
                } else if (op.a < kPipes) {
                    ready[op.a] = std::max(ready[op.a], done[op.a]);
                }
                break;
            }
            case kOpAlloc: {
                S += p.issue_sync;
                out.busy[kS] += p.issue_sync;
                ready[src] = std::max(ready[src], freed[op.b]);
                break;
            }
            case kOpEnQue: {
                S += p.issue_sync;
                out.busy[kS] += p.issue_sync;
                enq[op.b] = std::max({S, done[src], ready[src]}) + p.queue_latency;  // as a SetFlag
                break;
            }
            case kOpDeQue: {
                S += p.issue_sync;
                out.busy[kS] += p.issue_sync;
                ready[dst] = std::max(ready[dst], std::max(S, enq[op.b]));
                break;
            }
            case kOpFree: {
                S += p.issue_sync;
                out.busy[kS] += p.issue_sync;
                freed[op.b] = std::max({S, done[dst], ready[dst]}) + p.queue_latency;  // as a SetFlag
                break;
            }
            case kOpUbRead: {
                S += p.scalar_ub_access;
                out.busy[kS] += p.scalar_ub_access;
                break;
            }
            case kOpUbWrite: {
                S += p.scalar_ub_access + p.scalar_set_extra;
                out.busy[kS] += p.scalar_ub_access + p.scalar_set_extra;
                break;
            }
            case kOpGmRead: {
                S += p.gm_scalar_access;
                out.busy[kS] += p.gm_scalar_access;
                break;
            }
            case kOpGmWrite: {
                S += p.issue_dma;
                out.busy[kS] += p.issue_dma;
                break;
            }
            default: break;
        }
    }
    double finish = S;
    for (int q = 1; q < kPipes; ++q) finish = std::max(finish, done[q]);
    out.finish = finish;
    return out;
}

// ---- the report (JSON, for the Python side) ----------------------------------------------------
inline void Append(std::string& s, const char* fmt, unsigned long long v)
{
    char buf[64];
    std::snprintf(buf, sizeof(buf), fmt, v);
    s += buf;
}

inline std::string CountsJson()
{
    std::string s = "{\"version\":";
    Append(s, "%llu", kVersion);
    s += ",\"launches\":[";
    for (size_t li = 0; li < g_rec.launches.size(); ++li) {
        const LaunchRecord& l = g_rec.launches[li];
        if (li) s += ",";
        s += "{\"kernel\":\"" + l.kernel + "\",\"blocks\":";
        Append(s, "%llu", l.block_dim);
        s += ",\"block\":[";
        for (size_t bi = 0; bi < l.blocks.size(); ++bi) {
            const BlockRecord& b = l.blocks[bi];
            if (bi) s += ",";
            s += "{\"idx\":";
            Append(s, "%llu", static_cast<unsigned long long>(bi));
            s += ",\"ub_peak\":";
            Append(s, "%llu", b.ub_peak);
            s += ",\"ops\":";
            Append(s, "%llu", b.trace.size());
            s += ",\"overwrites\":";
            Append(s, "%llu", b.overwrites);
            s += ",\"issued\":[";
            Append(s, "%llu", b.issued[kS]);
            Append(s, ",%llu", b.issued[kV]);
            Append(s, ",%llu", b.issued[kMte2]);
            Append(s, ",%llu]", b.issued[kMte3]);
            s += ",\"vector\":{";
            for (size_t i = 0; i < b.vec.size(); ++i) {
                if (i) s += ",";
                s += "\"" + std::string(b.vec[i].api) + "\":[";
                Append(s, "%llu", b.vec[i].instr);
                Append(s, ",%llu", b.vec[i].repeats);
                Append(s, ",%llu]", b.vec[i].elements);
            }
            s += "},\"gm\":[";
            for (size_t i = 0; i < b.gm.size(); ++i) {
                const GmCount& g = b.gm[i];
                if (i) s += ",";
                Append(s, "[%llu", g.base);
                Append(s, ",%llu", g.size);
                Append(s, ",%llu", g.read_bytes);
                Append(s, ",%llu", g.write_bytes);
                Append(s, ",%llu", g.read_dmas);
                Append(s, ",%llu", g.write_dmas);
                Append(s, ",%llu", g.read_bursts);
                Append(s, ",%llu", g.write_bursts);
                Append(s, ",%llu", g.scalar_reads);
                Append(s, ",%llu]", g.scalar_writes);
            }
            s += "],\"flags\":{";
            bool first = true;
            for (int e = 0; e < kMaxEvents; ++e) {
                if (b.set_flag[e] == 0 && b.wait_flag[e] == 0) continue;
                if (!first) s += ",";
                first = false;
                s += "\"" + std::string(g_rec.event_names[e] ? g_rec.event_names[e] : "?") + "\":[";
                Append(s, "%llu", b.set_flag[e]);
                Append(s, ",%llu]", b.wait_flag[e]);
            }
            s += "},\"barriers\":{";
            first = true;
            for (int k = 0; k < kBarrierKinds; ++k) {
                if (b.barrier[k] == 0) continue;
                if (!first) s += ",";
                first = false;
                s += "\"" + std::string(BarrierName(k)) + "\":";
                Append(s, "%llu", b.barrier[k]);
            }
            s += "},\"queue\":[";
            Append(s, "%llu", b.alloc);
            Append(s, ",%llu", b.enque);
            Append(s, ",%llu", b.deque);
            Append(s, ",%llu]", b.free);
            s += ",\"scalar\":[";
            Append(s, "%llu", b.ub_get);
            Append(s, ",%llu]}", b.ub_set);
        }
        s += "]}";
    }
    s += "]}";
    return s;
}

inline std::string ReplayJson(const LaunchRecord& l, const Params& p)
{
    std::string s = "{\"blocks\":[";
    char buf[160];
    bool first = true;
    for (size_t bi = 0; bi < l.blocks.size(); ++bi) {
        if (p.block >= 0 && static_cast<double>(bi) != p.block) continue;
        const BlockTime t = ReplayBlock(l.blocks[bi], p);
        std::snprintf(buf, sizeof(buf), "%s[%.17g,%.17g,%.17g,%.17g,%.17g,%.17g]", first ? "" : ",", t.finish,
                      t.busy[kS], t.busy[kV], t.busy[kMte2], t.busy[kMte3], t.stall_s);
        s += buf;
        first = false;
    }
    s += "]}";
    return s;
}

inline int64_t Emit(const std::string& s, char* buf, int64_t cap)
{
    const int64_t n = static_cast<int64_t>(s.size());
    if (buf != nullptr && cap > n) {
        std::memcpy(buf, s.data(), s.size());
        buf[n] = '\0';
    }
    return n;
}

}  // namespace perf
}  // namespace ascend_emu

// ---- C entry points for the Python side (perf/kernel.py) -------------------------------------
#define ASCEND_EMU_PERF_EXPORT extern "C" __attribute__((visibility("default"), used)) inline

ASCEND_EMU_PERF_EXPORT int32_t ascend_rmsnorm_emu_perf_version() { return ascend_emu::perf::kVersion; }

// Start recording on this thread (mode 1: full, 2: fast = no arithmetic); drops earlier records.
ASCEND_EMU_PERF_EXPORT int32_t ascend_rmsnorm_emu_perf_start(int32_t mode)
{
    auto& r = ascend_emu::perf::g_rec;
    if (mode != 1 && mode != 2) return -1;
    r.launches.clear();
    r.cur = nullptr;
    if (!r.on) ascend_emu::perf::g_recording.fetch_add(1);
    r.on = true;
    r.fast = mode == 2;
    return 0;
}

// Stop recording (the records stay for the queries below until the next start or clear).
ASCEND_EMU_PERF_EXPORT void ascend_rmsnorm_emu_perf_stop()
{
    auto& r = ascend_emu::perf::g_rec;
    if (r.on) ascend_emu::perf::g_recording.fetch_sub(1);
    r.on = false;
    r.fast = false;
    r.cur = nullptr;
}

ASCEND_EMU_PERF_EXPORT void ascend_rmsnorm_emu_perf_clear()
{
    ascend_rmsnorm_emu_perf_stop();
    std::vector<ascend_emu::perf::LaunchRecord>().swap(ascend_emu::perf::g_rec.launches);
}

// The counts of every launch recorded, as JSON. Returns its length; writes it (NUL-terminated)
// into buf when cap is larger.
ASCEND_EMU_PERF_EXPORT int64_t ascend_rmsnorm_emu_perf_counts(char* buf, int64_t cap)
{
    return ascend_emu::perf::Emit(ascend_emu::perf::CountsJson(), buf, cap);
}

// Replay launch number `launch` with `params` ("name=value ..."; "block=N" replays block N alone); JSON
// per block: [finish, busy S, busy V, busy MTE2, busy MTE3, S stalled] in cycles. Returns the length as above,
// -1 for an unknown parameter name (written into buf), -2 for a launch number out of range.
ASCEND_EMU_PERF_EXPORT int64_t ascend_rmsnorm_emu_perf_replay(int32_t launch, const char* params, char* buf,
                                                             int64_t cap)
{
    using namespace ascend_emu::perf;
    if (launch < 0 || static_cast<size_t>(launch) >= g_rec.launches.size()) return -2;
    Params p;
    std::string bad;
    if (!ParseParams(params, p, bad)) {
        Emit(bad, buf, cap);
        return -1;
    }
    return Emit(ReplayJson(g_rec.launches[static_cast<size_t>(launch)], p), buf, cap);
}
