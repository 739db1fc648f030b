// GM ordering for the emulation: which GM bytes each block's DMAs (and scalar GlobalTensor accesses)
// touched in a launch, and the rules a later access must keep (split from emu_base.h, which includes
// this at its end).
#pragma once

#include "emu_base.h"

namespace ascend_emu {

// ---------------------------------------------------------------------------------------------
// GM ordering. Within a block, DMAs to and from GM run on MTE2 and MTE3 in parallel: reading GM
// that this block's MTE3 wrote needs a flag from MTE3 to MTE2 in between (or PIPE_ALL), and writing
// GM that this block's MTE2 read needs the write ordered after the read (an MTE2_MTE3 flag, or a
// chain of flags through V, or PIPE_ALL), else the write may land before the read. Across blocks of
// one launch nothing orders anything (no SyncAll here), so a block may neither read nor write GM
// bytes another block of the same launch wrote, nor write bytes another block read. Writes and
// reads are remembered per launch (full mode only: the checks do not change any count the
// performance model sees).
struct GmSpan {
    uintptr_t hi;
    int64_t block;
    uint32_t seq;  // the op number of its pipe (MTE3 for a write, MTE2 for a read) inside its block
};

// The spans one DMA pipe touched in a launch, by start address, every one kept (a later one at the same
// address must not hide behind an earlier one's seq); the longest bounds where an overlap can start.
struct GmSpans {
    using Map = std::multimap<uintptr_t, GmSpan>;
    Map by_start;
    uintptr_t max_len = 0;

    // The first span that can overlap bytes from `lo` on.
    Map::iterator From(uintptr_t lo) { return by_start.lower_bound(lo > max_len ? lo - max_len : 0); }
    Map::iterator Add(uintptr_t lo, const GmSpan& span)
    {
        Grew(lo, span.hi);
        return by_start.emplace(lo, span);
    }
    void Grew(uintptr_t lo, uintptr_t hi) { max_len = std::max<uintptr_t>(max_len, hi - lo); }
    void Clear()
    {
        by_start.clear();
        max_len = 0;
    }
};

struct GmLog {
    GmSpans writes;  // MTE3's
    GmSpans reads;   // MTE2's
    GmSpans scalar_writes;  // GlobalTensor::SetValue's, whole 64-byte data-cache lines (seq unused)
    GmSpans scalar_reads;   // GlobalTensor::GetValue's (seq unused)
    // the read span the last read made or extended (one op's rows back to back in GM grow one span)
    GmSpans::Map::iterator last_read = reads.by_start.end();
};

inline thread_local GmLog g_gm;
inline thread_local bool g_gm_checks = true;

inline void GmBeginLaunch(bool checks)
{
    g_gm.writes.Clear();
    g_gm.reads.Clear();
    g_gm.scalar_writes.Clear();
    g_gm.scalar_reads.Clear();
    g_gm.last_read = g_gm.reads.by_start.end();
    g_gm_checks = checks;
}

// An MTE3 write of GM bytes [lo, hi) (op `op` of this block) against the reads before it.
inline void GmCheckWriteAfterRead(uint32_t op, uintptr_t lo, uintptr_t hi)
{
    BlockState& s = State();
    const int64_t me = g_launch.block_idx;
    auto& reads = g_gm.reads.by_start;
    auto it = g_gm.reads.From(lo);
    while (it != reads.end() && it->first < hi) {
        const GmSpan& r = it->second;
        if (r.hi <= lo) {
            ++it;
            continue;
        }
        if (r.block != me) {
            Fail("GM ordering",
                 Fmt("a write of GM bytes [%#llx, %#llx) overlaps bytes block %lld read in the same launch; blocks run "
                     "in any order and nothing synchronises them",
                     static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi),
                     static_cast<long long>(r.block)),
                 doc::kGmOrder);
        }
        if (s.clock[kMte3][kMte2] < r.seq) {
            Fail("GM ordering",
                 Fmt("MTE3 writes GM bytes [%#llx, %#llx) that this block's MTE2 read (op %u) with nothing ordering "
                     "the write after the read (SetFlag/WaitFlag<MTE2_MTE3>, a chain of flags through V, or "
                     "PIPE_ALL): the write may land first",
                     static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi), r.seq),
                 doc::kGmOrder);
        }
        // Ordered before this write, and covered by it: the write's own entry answers for these bytes from
        // now on (another block touching them meets it; a later write of this block is ordered after it).
        if (it->first >= lo && r.hi <= hi) {
            if (it == g_gm.last_read) g_gm.last_read = reads.end();
            it = reads.erase(it);
        } else {
            ++it;
        }
    }
}

// An MTE2 read of GM bytes [lo, hi), remembered: the rows of one op that follow each other in GM grow
// one entry, and a read that covers an earlier one of this block replaces it (a write ordered after
// the later read is ordered after the earlier one).
inline void GmRecordRead(uint32_t op, uintptr_t lo, uintptr_t hi)
{
    const int64_t me = g_launch.block_idx;
    auto& reads = g_gm.reads.by_start;
    auto& last = g_gm.last_read;
    if (last != reads.end() && last->second.block == me && last->second.seq == op && last->second.hi == lo) {
        last->second.hi = hi;
        g_gm.reads.Grew(last->first, hi);
        return;
    }
    auto it = reads.lower_bound(lo);
    while (it != reads.end() && it->first < hi) {
        if (it->second.block == me && it->second.hi <= hi) {
            it = reads.erase(it);
        } else {
            ++it;
        }
    }
    last = g_gm.reads.Add(lo, GmSpan{hi, me, op});
}

// The first span of `spans` that overlaps GM bytes [lo, hi) and satisfies `pred`, or nullptr.
template <typename Pred>
inline const GmSpan* GmFind(GmSpans& spans, uintptr_t lo, uintptr_t hi, Pred pred)
{
    for (auto it = spans.From(lo); it != spans.by_start.end() && it->first < hi; ++it) {
        if (it->second.hi > lo && pred(it->second)) return &it->second;
    }
    return nullptr;
}

// Scalar GM access (GlobalTensor::GetValue/SetValue) runs through the AI Core's data cache
// (GlobalTensor/SetValue.md, GetValue.md): a SetValue changes the cache, which leaves for GM later as a
// whole 64-byte line, and a GetValue may read a line the cache holds from before. A DMA of a line a
// SetValue wrote, a GetValue of bytes a DMA wrote, or another block's scalar access to a line a
// SetValue wrote then meets stale or overwritten bytes unless DataCacheCleanAndInvalid (and a flag)
// orders them; the emulation offers no DataCacheCleanAndInvalid and refuses the mix in one launch.
constexpr uintptr_t kCacheLine = 64;
constexpr const char* kDataCacheDoc = "docs/zh/api/SIMD-API/基础API/数据结构/GlobalTensor/SetValue.md (DCache, Cache Line 64B)";

[[noreturn]] inline void GmScalarFail(const char* what, uintptr_t lo, uintptr_t hi, const char* other, int64_t block)
{
    Fail("GM ordering",
         Fmt("%s of GM bytes [%#llx, %#llx) meets %s (block %lld) in the same launch: scalar GM access goes through "
             "the core's data cache (64-byte lines) and needs DataCacheCleanAndInvalid, which the emulation does not "
             "offer, to be ordered with DMAs and other blocks",
             what, static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi), other,
             static_cast<long long>(block)),
         kDataCacheDoc);
}

inline void GmScalarAccess(bool write, uintptr_t lo, uint64_t bytes)
{
    if (g_state == nullptr || !g_gm_checks || bytes == 0) return;
    const int64_t me = g_launch.block_idx;
    uintptr_t hi = lo + bytes;
    const char* what = write ? "GlobalTensor::SetValue" : "GlobalTensor::GetValue";
    if (write) {  // the line it dirties
        lo = lo / kCacheLine * kCacheLine;
        hi = (hi + kCacheLine - 1) / kCacheLine * kCacheLine;
    }
    const auto any = [](const GmSpan&) { return true; };
    const auto other = [me](const GmSpan& s) { return s.block != me; };
    if (const GmSpan* s = GmFind(g_gm.writes, lo, hi, any)) GmScalarFail(what, lo, hi, "an MTE3 write", s->block);
    if (write) {
        if (const GmSpan* s = GmFind(g_gm.reads, lo, hi, any)) GmScalarFail(what, lo, hi, "an MTE2 read", s->block);
        if (const GmSpan* s = GmFind(g_gm.scalar_reads, lo, hi, other)) {
            GmScalarFail(what, lo, hi, "another block's GetValue", s->block);
        }
    }
    if (const GmSpan* s = GmFind(g_gm.scalar_writes, lo, hi, other)) {
        GmScalarFail(what, lo, hi, "another block's SetValue of that 64-byte line", s->block);
    }
    (write ? g_gm.scalar_writes : g_gm.scalar_reads).Add(lo, GmSpan{hi, me, 0});
}

// A DMA `pipe` (kMte2 reads GM, kMte3 writes it) touching GM bytes [lo, lo + bytes).
inline void GmAccess(int pipe, uint32_t op, uintptr_t lo, uint64_t bytes)
{
    if (!g_gm_checks || bytes == 0) return;
    BlockState& s = State();
    const uintptr_t hi = lo + bytes;
    const int64_t me = g_launch.block_idx;
    const bool write = pipe == kMte3;
    const auto any = [](const GmSpan&) { return true; };
    const char* dma = write ? "an MTE3 write" : "an MTE2 read";
    if (const GmSpan* s = GmFind(g_gm.scalar_writes, lo, hi, any)) {
        Fail("GM ordering",
             Fmt("%s of GM bytes [%#llx, %#llx) meets a GlobalTensor::SetValue of that 64-byte line (block %lld) in "
                 "the same launch: the value sits in the core's data cache and leaves it as a whole line "
                 "(DataCacheCleanAndInvalid, which the emulation does not offer, orders it)",
                 dma, static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi),
                 static_cast<long long>(s->block)),
             kDataCacheDoc);
    }
    if (write) {
        if (const GmSpan* s = GmFind(g_gm.scalar_reads, lo, hi, any)) {
            Fail("GM ordering",
                 Fmt("an MTE3 write of GM bytes [%#llx, %#llx) meets a GlobalTensor::GetValue of them (block %lld) in "
                     "the same launch: the scalar unit reads through its data cache, which nothing orders with the "
                     "DMA here (DataCacheCleanAndInvalid, which the emulation does not offer)",
                     static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi),
                     static_cast<long long>(s->block)),
                 kDataCacheDoc);
        }
    }
    auto& writes = g_gm.writes.by_start;
    auto it = g_gm.writes.From(lo);
    while (it != writes.end() && it->first < hi) {
        const GmSpan& w = it->second;
        if (w.hi <= lo) {
            ++it;
            continue;
        }
        if (w.block != me) {
            Fail("GM ordering",
                 Fmt("%s of GM bytes [%#llx, %#llx) overlaps bytes block %lld wrote in the same launch; blocks run "
                     "in any order and nothing synchronises them",
                     write ? "a write" : "a read", static_cast<unsigned long long>(lo),
                     static_cast<unsigned long long>(hi), static_cast<long long>(w.block)),
                 doc::kGmOrder);
        }
        if (write && w.seq != op && s.clock[kMte3][kMte3] < w.seq) {  // indeterminate, as in CheckOrdered
            s.unordered_gm.emplace_back(std::max(lo, it->first), std::min(hi, w.hi));
        }
        if (!write && s.clock[kMte2][kMte3] < w.seq) {
            Fail("GM ordering",
                 Fmt("MTE2 reads GM bytes [%#llx, %#llx) that this block's MTE3 wrote (op %u) with no "
                     "SetFlag/WaitFlag<MTE3_MTE2> (or PIPE_ALL) in between",
                     static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi), w.seq),
                 doc::kGmOrder);
        }
        // An earlier write of this block that this one covers says nothing the new entry does not (its
        // op is later, so whatever orders after it orders after the earlier one): dropped, so that
        // rewriting the same bytes stays linear.
        if (write && w.seq != op && it->first >= lo && w.hi <= hi) {
            it = writes.erase(it);
        } else {
            ++it;
        }
    }
    if (write) {
        GmCheckWriteAfterRead(op, lo, hi);
        g_gm.writes.Add(lo, GmSpan{hi, me, op});
    } else {
        GmRecordRead(op, lo, hi);
    }
}

} // namespace ascend_emu
