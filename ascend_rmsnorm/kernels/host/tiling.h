// ascend-rmsnorm: the host's plan choice (CANN's op_host tiling): which path, group size, ring slots and
// sub-tile a launch takes, from H, the dtypes and the options only.

#ifndef ASCEND_RMSNORM_HOST_TILING_H_
#define ASCEND_RMSNORM_HOST_TILING_H_

#include "../common/constants.h"

namespace rmsnorm_host {

using rmsnorm::kDwChunkRows;
using rmsnorm::kMaxRepeat;
using rmsnorm::kMaxRepStride;
using rmsnorm::kTile;
using rmsnorm::kMaxAccEvents;
using rmsnorm::kMaxRingUnits;
using rmsnorm::kUbBudget;

#define RMSNORM_PLAN_FN
#include "../common/ub_plan.h"
#undef RMSNORM_PLAN_FN

// 3: ascend_rmsnorm_bwd takes the residual's gradient; 4: plan2 reports the lag; 5: a launch the runtime
// refuses is a status (host/launch_check.h), and ascend_rmsnorm_launch_check_state; 6: plan2's lag is
// a PlanLag (2: the lag with one widened dy), and so is the backward kernels' lag argument; 7: plan2
// reports the backward's dw accumulators (out[11])
constexpr int32_t kAbiVersion = 7;
enum Status : int32_t {
    ST_OK = 0,
    ST_BAD_SHAPE = 1,      // rows < 0 or hidden < 1
    ST_BAD_DTYPE = 2,      // a dtype code or combination the kernels do not take
    ST_BAD_BLOCK_DIM = 3,  // block_dim outside [1, 65535]
    ST_NULL_POINTER = 4,   // a needed pointer is null
    ST_TOO_LARGE = 5,      // hidden above kMaxHidden, or no plan fits the UB (host/abi.h)
    ST_BAD_ARGUMENT = 6,   // an unknown formula
    // 7 and 100 and up: the runtime refused a launch (host/launch_check.h)
};
// Named kDt*, not DT_*: in non-.asc builds (CANN 8.0-8.3 -xcce) CANN's kernel_type.h defines DT_FLOAT,
// DT_FLOAT16, DT_BF16, ... as macros, which would replace these names.
enum Dtype : int32_t { kDtF32 = 0, kDtF16 = 1, kDtBf16 = 2 };
enum Formula : int32_t { kFormulaFp32 = 0, kFormulaLlama = 1 };
// Path codes of ascend_rmsnorm_plan2 (jit/library.py names them).
enum Path : int32_t {
    PATH_FWD_GROUP = 0,
    PATH_FWD_STREAM = 1,
    PATH_BWD_GROUP = 2,
    PATH_BWD_STREAM = 3,
    PATH_FWD_TILED = 4,
    PATH_BWD_TILED = 5,
};

inline uint32_t DtypeSize(int32_t d) { return d == kDtF32 ? 4u : 2u; }
inline bool KnownDtype(int32_t d) { return d == kDtF32 || d == kDtF16 || d == kDtBf16; }

//: Input bytes per row group worth aiming for (an 8 KB row: 3 rows; a 256-byte row: 96 rows).
constexpr int64_t kGroupBytes = 24 * 1024;

inline int32_t GroupTarget(int64_t H, uint32_t sT, int64_t cap)
{
    int64_t g = PlanCeilDiv(kGroupBytes, H * sT);
    if (g > kMaxRepeat) g = kMaxRepeat;
    if (g > cap) g = cap;
    return static_cast<int32_t>(g < 1 ? 1 : g);
}

// The largest G <= target whose plan fits, for ringSlots (0: none fits).
template <typename PlanFn>
inline int32_t FitG(PlanFn plan, int32_t target, int32_t ringSlots)
{
    for (int32_t g = target; g >= 1; --g) {
        if (plan(g, ringSlots).total <= kUbBudget) return g;
    }
    return 0;
}

// The group path's ring: four slots where that costs at most one row per group and leaves two or more
// (a slot is busy from its load to its store, so with three the next load of a slot waits for a whole
// load-compute-store chain), else three unless that halves the group, else two, else one (minNb: the
// fewest allowed).
template <typename PlanFn>
inline bool ChooseGroup(PlanFn plan, int32_t target, int32_t minNb, Plan& out)
{
    const int32_t g4 = FitG(plan, target, 4), g3 = FitG(plan, target, 3), g2 = FitG(plan, target, 2);
    const int32_t g1 = minNb <= 1 ? FitG(plan, target, 1) : 0;
    int32_t ringSlots = 0, g = 0;
    if (g4 >= 1 && (g4 == g3 || (g4 >= 2 && g4 + 1 >= g3))) {
        ringSlots = 4;
        g = g4;
    } else if (g3 >= 1 && (2 * g3 >= target || g3 >= g2)) {
        ringSlots = 3;
        g = g3;
    } else if (g2 >= 1) {
        ringSlots = 2;
        g = g2;
    } else if (g1 >= 1) {
        ringSlots = 1;
        g = g1;
    }
    if (ringSlots == 0) return false;
    out = plan(g, ringSlots);
    return true;
}

// Row-resident plans with the fp32 work in sub-tiles: three ring slots first (sub-tiles of 2048 or
// more, then 1024), then two; the fp32 weight before the raw one; single buffering and sub-tiles
// below 1024 only when nothing else fits.
template <typename PlanFn>
inline bool ChooseTiled(PlanFn plan, bool rawWeightPossible, Plan& out)
{
    const int32_t subs[] = {4096, 2048, 1024, 512, 256};
    const int32_t order[][2] = {{3, 2048}, {3, 1024}, {2, 2048}, {2, 1024}, {3, 256}, {2, 256}, {1, 256}};
    for (const auto& o : order) {
        const int32_t ringSlots = o[0], minSubTile = o[1];
        for (int32_t wide = 1; wide >= (rawWeightPossible ? 0 : 1); --wide) {
            for (int32_t subTile : subs) {
                if (subTile < minSubTile) continue;
                const Plan p = plan(ringSlots, subTile, wide != 0);
                if (p.total <= kUbBudget) {
                    out = p;
                    return true;
                }
            }
        }
    }
    return false;
}

template <typename PlanFn>
inline bool ChooseStream(PlanFn plan, Plan& out)
{
    const int32_t slots[] = {3, 2, 1}, subs[] = {4096, 2048, 1024, 512, 256};
    for (int32_t ringSlots : slots) {
        for (int32_t subTile : subs) {
            const Plan p = plan(ringSlots, subTile);
            if (p.total <= kUbBudget) {
                out = p;
                return true;
            }
        }
    }
    return false;
}

// Whether one row of x fits the UB: the group path's plans are tried only then (no group plan fits
// otherwise, and their int32 sizes would wrap near H 2^31).
inline bool RowFitsUb(const PlanShape& s) { return static_cast<uint64_t>(s.hidden) * s.sT <= kUbBudget; }

// The group path while whole groups fit with their fp32 copy (rows of several tiles: while double
// buffering fits), then the row-resident path with sub-tiles, then the streamed one.
inline Plan FwdChoose(const PlanShape& s)
{
    Plan p{};
    auto group = [&](int32_t g, int32_t ringSlots) { return FwdPlanFor(s, LAYOUT_GROUP, g, ringSlots, 0, true); };
    if (RowFitsUb(s) && ChooseGroup(group, GroupTarget(s.hidden, s.sT, kMaxRepeat), s.hidden <= kTile ? 1 : 2, p)) {
        // 16-bit x: the most rows per group that kAheadSlots slots allow (the plan then looks ahead),
        // and all kMaxRingUnits slots if they allow as many
        const int32_t g5 = s.sT == 2 ? FitG(group, p.G, kAheadSlots) : 0;
        if (g5 >= 1) p = group(g5, FitG(group, g5, kMaxRingUnits) == g5 ? kMaxRingUnits : kAheadSlots);
        return p;
    }
    // single-buffered rows lose more to latency than streaming x twice loses to traffic, except up
    // to H 16384 where the kernels keep the traffic at the minimum
    if (s.hidden <= 32768 &&
        ChooseTiled([&](int32_t ringSlots, int32_t subTile, bool wide) { return FwdPlanFor(s, LAYOUT_TILED, 1, ringSlots, subTile, wide); },
                    s.weight && s.sW == 2, p) &&
        (p.ringSlots > 1 || s.hidden <= 16384)) {
        return p;
    }
    ChooseStream([&](int32_t ringSlots, int32_t subTile) { return FwdPlanFor(s, LAYOUT_STREAM, 1, ringSlots, subTile, false); }, p);
    return p;
}

// The backward takes an event per dw accumulator and tile for the partials (BackwardBase::EarlyPieces).
inline bool BwdAccEventsFit(const Plan& p) { return p.accs * p.tiles <= kMaxAccEvents; }

// The group path's plan with `accs` dw accumulators, its groups made even within a dw chunk.
inline bool BwdGroup(const PlanShape& s, int64_t chunkRows, int32_t accs, Plan& p)
{
    auto group = [&](int32_t g, int32_t ringSlots) {
        Plan t = BwdPlanFor(s, LAYOUT_GROUP, g, ringSlots, 0, true, accs);
        if (!BwdAccEventsFit(t)) t.total = ~uint64_t(0);
        return t;
    };
    if (!ChooseGroup(group, GroupTarget(s.hidden, s.sT, chunkRows), s.hidden <= kTile ? 1 : 2, p)) {
        return false;
    }
    // groups never span dw chunks: the same number of rows in each group of a chunk
    const int64_t perChunk = PlanCeilDiv(chunkRows, p.G);
    const int32_t even = static_cast<int32_t>(PlanCeilDiv(chunkRows, perChunk));
    if (even < p.G) p = BwdPlanFor(s, LAYOUT_GROUP, even, p.ringSlots, 0, true, accs);
    return true;
}

inline Plan BwdChoose(const PlanShape& s, int64_t chunkRows)
{
    Plan p{}, two{}, lag{};
    auto lagFits = [&](int32_t g, int32_t slots, int32_t accs, int32_t kind) {
        lag = BwdPlanFor(s, LAYOUT_GROUP, g, slots, 0, true, accs, 0, kind);
        return lag.total <= kUbBudget && BwdAccEventsFit(lag);
    };
    // the first lag plan of kind `kind` that fits at g rows per group, from the group plan's ring slots
    // down to `fewest` (at least two). A second dw accumulator is worth a ring slot while three are
    // left: under the lag a slot is free once its dy is widened, while with one accumulator the next
    // chunk's first group waits for the partial's store to leave (an MTE3 queue shared with dx). So
    // first two accumulators at three slots or more, then the most slots, two accumulators where they fit.
    auto lagAt = [&](int32_t g, int32_t fewest, int32_t kind) {
        for (int32_t slots = p.ringSlots; s.dw && slots >= fewest && slots >= 3; --slots) {
            if (lagFits(g, slots, 2, kind)) return true;
        }
        for (int32_t slots = p.ringSlots; slots >= fewest && slots >= 2; --slots) {
            for (int32_t accs = s.dw ? 2 : 1; accs >= 1; --accs) {
                if (lagFits(g, slots, accs, kind)) return true;
            }
        }
        return false;
    };
    if (RowFitsUb(s) && BwdGroup(s, chunkRows, 1, p)) {
        // The steps after a group's tree (c, dx) lag a group (bwd/backward_group.h), its slot free once
        // widened: where a second group's xh, g and dx fit, with at most one ring slot fewer; else
        // with one widened dy for both groups, down to two slots (groups of several rows: at most one
        // fewer); else, where the group plan has three ring slots or fewer (each busy from its load
        // to its store), with both buffers at fewer rows per group, even within a dw chunk (with
        // four, the ring covers what the lag would free).
        if (BwdLagShape(s, p)) {
            if (lagAt(p.G, p.ringSlots - 1, LAG_TWO_DY)) return lag;
            if (lagAt(p.G, p.G > 1 ? p.ringSlots - 1 : 2, LAG_ONE_DY)) return lag;
            for (int32_t g = p.G - 1; p.ringSlots <= 3 && g >= 1; --g) {
                if (PlanCeilDiv(chunkRows, PlanCeilDiv(chunkRows, g)) == g && lagAt(g, p.ringSlots - 1, LAG_TWO_DY)) return lag;
            }
        }
        // a second accumulator when it costs neither rows per group nor ring slots
        if (s.dw && BwdGroup(s, chunkRows, 2, two) && two.G == p.G && two.ringSlots == p.ringSlots) return two;
        return p;
    }
    // a ring unit (with its events) per tile of each row slot; one dy slot fewer than x slots where
    // the x slots fit only so
    auto tiled = [&](int32_t ringSlots, int32_t subTile, bool wide) {
        Plan t = BwdPlanFor(s, LAYOUT_TILED, 1, ringSlots, subTile, wide);
        if (t.total > kUbBudget && ringSlots > 1) t = BwdPlanFor(s, LAYOUT_TILED, 1, ringSlots, subTile, wide, 1, ringSlots - 1);
        if (static_cast<int64_t>(ringSlots) * t.tiles > kMaxRingUnits) t.total = ~uint64_t(0);
        return t;
    };
    if (s.hidden <= 32768 && ChooseTiled(tiled, s.weight && s.sW == 2, p)) {
        return p;
    }
    ChooseStream([&](int32_t ringSlots, int32_t subTile) { return BwdPlanFor(s, LAYOUT_STREAM, 1, ringSlots, subTile, false); }, p);
    return p;
}

// Rows per dw chunk (docs/design.md §3 item 4): a function of the row count only, R = clamp(N / 128, 1, 64),
// so a batch has at least min(N, 128) chunks and every core gets one whenever N >= cores.
inline int64_t DwChunkRows(int64_t rows)
{
    const int64_t r = rows / rmsnorm::kDwMinChunks;
    return r < 1 ? 1 : (r > kDwChunkRows ? kDwChunkRows : r);
}

// The dw reduce: column slices over the blocks; all partials of a slice at once when they fit.
struct DwPlan {
    int32_t slice;
    int32_t stack;  // 0: all partials of a slice at once; else the stacked form's tree leaves per load
    int32_t blocks;
    uint64_t bytes;
};

//: The stacked dw reduce's most tree leaves per load (a power of two within blockCount's 12 bits).
constexpr int32_t kDwMaxGroup = 2048;

// The stacked form's leaves per load for slice s: the largest power of two <= the tree's leaves (and
// kDwMaxGroup) whose buffers fit and whose GM gap between leaves fits DataCopyExtParams' 32-bit
// srcStride; 0 when not even two fit.
inline int32_t DwGroup(int64_t chunks, int64_t s, uint32_t sW)
{
    const int64_t leaves = int64_t(1) << PlanLog2Floor(chunks);
    for (int64_t g = leaves < kDwMaxGroup ? leaves : kDwMaxGroup; g >= 2; g /= 2) {
        const uint64_t gap = static_cast<uint64_t>(leaves / g - 1) * static_cast<uint64_t>(s) * 4;
        if (gap <= 0xFFFFFFFFull && DwPlanBytes(chunks, static_cast<int32_t>(s), sW, static_cast<int32_t>(g)) <= kUbBudget) {
            return static_cast<int32_t>(g);
        }
    }
    return 0;
}

inline DwPlan DwChoose(int64_t chunks, int64_t H, uint32_t sW, uint32_t blockDim)
{
    DwPlan d{};
    // slices of 8 columns or more (32-byte bursts) over all blocks: the reduce reads a slice in one
    // burst whatever its width, so narrow slices cost only the backward's stores a burst each
    const int64_t spread = PlanAlign(PlanCeilDiv(H, blockDim), 8), h8 = PlanAlign(H, 8);
    int64_t s = spread > 4096 ? 4096 : spread;
    if (s > h8) s = h8;
    while (s > 8 && DwPlanBytes(chunks, static_cast<int32_t>(s), sW, 0) > kUbBudget) s = PlanAlign(s / 2, 8);
    // All partials of a slice at once while they fit (the workspace is slice-major, bwd/dw_workspace.h:
    // they lie back to back in GM); else the stacked form, still a slice per block, with as many tree
    // leaves per strided load as fit (a slice narrower, down to 8 columns, while not even two do).
    if (DwPlanBytes(chunks, static_cast<int32_t>(s), sW, 0) > kUbBudget) {
        s = spread > 1024 ? 1024 : spread;
        if (s > h8) s = h8;
        while (s > 8 && DwGroup(chunks, s, sW) == 0) s = PlanAlign(s / 2, 8);
        d.stack = DwGroup(chunks, s, sW);
    }
    d.slice = static_cast<int32_t>(s);
    const int64_t slices = PlanCeilDiv(H, s);
    d.blocks = static_cast<int32_t>(slices < blockDim ? slices : blockDim);
    d.bytes = DwPlanBytes(chunks, d.slice, sW, d.stack);
    return d;
}

// y's dtype (forward) or dy's (backward): x's, or fp32 when the kernel's weight is fp32 (llama with an
// fp32 weight and 16-bit x gives fp32 y; its dy is fp32). Without a weight the kernels take x's dtype.
inline bool OutAllowed(int32_t dtype, int32_t wDtype, bool weight, int32_t oDtype)
{
    if (oDtype == dtype) return true;
    return oDtype == kDtF32 && (!weight || wDtype == kDtF32);
}

// The kernels' weight dtype: the given one, or (no weight) the one whose instantiation takes oDtype.
inline int32_t KernelW(int32_t dtype, int32_t wDtype, bool weight, int32_t oDtype)
{
    if (weight) return wDtype;
    return oDtype == kDtF32 ? kDtF32 : dtype;
}

}  // namespace rmsnorm_host

#endif  // ASCEND_RMSNORM_HOST_TILING_H_
