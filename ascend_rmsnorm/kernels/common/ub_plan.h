// ascend-rmsnorm: the UB plan of every kernel path, as plain arithmetic.
//
// Included twice: by common/device_plan.h inside namespace rmsnorm::dev with RMSNORM_PLAN_FN defined
// as __aicore__ (the kernels size their InitBuffer calls with it) and by host/tiling.h inside
// rmsnorm_host with it empty (the launchers choose a plan, check it against the UB budget and report it). One source for
// both, so what the host checks is, byte for byte, what a block reserves; the emulation records the
// reservations and a test compares them with the host's figure.
//
// Not a header to include on its own (no include guard): those two define RMSNORM_PLAN_FN and the constants first.

RMSNORM_PLAN_FN inline uint64_t PlanAlign(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
RMSNORM_PLAN_FN inline uint64_t PlanAlign32(uint64_t bytes) { return PlanAlign(bytes, 32); }
RMSNORM_PLAN_FN inline int64_t PlanCeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
// floor(log2(n)) for n >= 1: the levels of a fold-and-halve tree over n partials
RMSNORM_PLAN_FN inline int32_t PlanLog2Floor(int64_t n)
{
    int32_t k = 0;
    while ((int64_t(1) << (k + 1)) <= n) ++k;
    return k;
}
// Elements of a row of H elements of s bytes once its UB copy is padded to 32 bytes.
RMSNORM_PLAN_FN inline uint32_t PlanPitch(int64_t H, uint32_t s) { return static_cast<uint32_t>(PlanAlign(H, 32 / s)); }

enum PlanLayout : int32_t {
    LAYOUT_GROUP = 0,   // G whole rows per group with an fp32 copy of all of them: every step over the
                        // whole group (a row of several tiles is several segments of the trees)
    LAYOUT_TILED = 1,   // one whole row in UB, the fp32 work in sub-tiles of subTile elements
    LAYOUT_STREAM = 2,  // rows too long for UB: tile by tile from GM, x (or dy and x) read twice
};

// What the UB plan of a launch depends on besides the layout choice.
struct PlanShape {
    int64_t hidden;
    uint32_t sT;    // x, dx, residual, residual_out
    uint32_t sW;    // the weight as the kernel reads it (x's dtype or fp32)
    uint32_t sO;    // forward: y; backward: dy
    bool weight;    // a weight is given (else w = 1)
    bool residual;  // forward: the fused residual add; backward: the residual's gradient added to dx
    bool dw;        // backward: dw wanted
};

// The UB reservations of one block in InitBuffer order, each rounded to 32 bytes as
// TPipe::InitBuffer rounds it; `total` is their sum.
struct Plan {
    int32_t layout;
    int32_t G;       // rows per group (1 unless LAYOUT_GROUP)
    int32_t gp;      // G rounded up to 8: lane slots per tile
    int32_t gv;      // gp rounded up to 64: the length of the per-row vectors (whole compare repeats)
    int32_t ringSlots;  // ring slots: groups, rows or tiles in flight
    int32_t dySlots;    // backward: dy slots (LAYOUT_TILED may have fewer than ringSlots: V frees them, not MTE3)
    int32_t tiles;   // kTile tiles per row
    int32_t J;       // lane slots gathered at once (tiles * gp; LAYOUT_STREAM: gp, one tile)
    int32_t subTile;    // fp32 work elements at once (LAYOUT_GROUP: the group; else a sub-tile)
    int32_t qE;      // elements of the squares buffer (the tree's first level is fused into it)
    bool stripes;    // LAYOUT_GROUP: trees and broadcasts by 64-column stripes over the rows
    bool wWide;      // the weight is held as fp32 w + offset for the whole row
    int32_t accs;    // backward: dw accumulators (2: one chunk's partial is stored while the next one adds up)
    int32_t lag;     // backward: a PlanLag; not LAG_NONE: a group's steps after its tree (c, dx) run beside
                     // the next group's (BwdLagShape)
    bool ahead;      // forward: a group's sums run beside the group before's rstd chain (FwdAheadShape)
    uint32_t P;      // row pitch in UB, in x's elements (LAYOUT_STREAM: one tile)
    uint64_t slotA, slotB, slotC, slotD;  // one ring slot (forward: x, residual, fp32 y; backward: dy, x,
                                          // the residual's gradient, rstd)
    uint64_t ring, wraw, wf, acc, xf, tmp, t2, q, ln, l, off, vec, mask, br, rsq, out;
    uint64_t total;
};

// The elements of the squares buffer for a tile of up to `n` elements: the first tree level is
// added into it while the squares are made, so it holds half a power-of-two tile.
RMSNORM_PLAN_FN inline int32_t PlanHalf(int64_t n)
{
    int64_t b = 1;
    while (b * 2 <= n) b *= 2;
    const int64_t h = b == n ? b / 2 : b;
    return static_cast<int32_t>(h < 8 ? 8 : h);
}

RMSNORM_PLAN_FN inline void PlanCommon(Plan& p, const PlanShape& s, int32_t layout, int32_t G, int32_t ringSlots, int32_t subTile)
{
    p.layout = layout;
    p.G = layout == LAYOUT_GROUP ? G : 1;
    p.gp = static_cast<int32_t>(PlanAlign(p.G, 8));
    p.gv = static_cast<int32_t>(PlanAlign(p.gp, 64));
    p.ringSlots = ringSlots;
    p.tiles = static_cast<int32_t>(PlanCeilDiv(s.hidden, kTile));
    p.J = layout == LAYOUT_STREAM ? p.gp : p.tiles * p.gp;
    p.P = layout == LAYOUT_STREAM ? static_cast<uint32_t>(kTile) : PlanPitch(s.hidden, s.sT);
    p.stripes = layout == LAYOUT_GROUP && p.tiles == 1 && p.P / 8 <= kMaxRepStride && p.G <= kMaxRepeat;
    p.subTile = layout == LAYOUT_GROUP ? static_cast<int32_t>(PlanAlign(static_cast<uint64_t>(p.G) * p.P, 64)) : subTile;
    // LAYOUT_GROUP reduces the squares (products) where they are made and gathers the lanes from
    // there (the -0 cell after the work buffer); the other layouts keep a tile's half-size squares
    // buffer (the tree's first level fused in) and copy each tile's 8 lanes out.
    p.qE = layout == LAYOUT_GROUP ? 0 : PlanHalf(s.hidden < kTile ? s.hidden : kTile);
    p.q = layout == LAYOUT_GROUP ? 0 : PlanAlign32(static_cast<uint64_t>(p.qE) * 4) + 32;
    p.ln = layout == LAYOUT_GROUP ? 0 : PlanAlign32(static_cast<uint64_t>(p.J) * 32) + 32;
    p.l = PlanAlign32(static_cast<uint64_t>(p.J) * 32);
    p.off = p.l;
    p.vec = 8 * PlanAlign32(static_cast<uint64_t>(p.gv) * 4) + 64;  // the rstd vectors; NaN and +0 blocks
    const uint64_t canon = static_cast<uint64_t>(p.subTile) > static_cast<uint64_t>(p.gv) ? p.subTile : p.gv;
    p.mask = PlanAlign32(canon / 8) + PlanAlign32(p.gv / 8);
}

// The weight's buffers, the same in both directions: the fp32 weight (+ offset) held for the whole row
// when `wide` (always on the group path), else the raw weight: per ring slot, tile by tile, on the
// stream path, or whole.
RMSNORM_PLAN_FN inline void PlanWeight(Plan& p, const PlanShape& s, int32_t layout, int32_t ringSlots, bool wide)
{
    p.wWide = s.weight && wide;
    if (s.weight && layout == LAYOUT_STREAM) {
        p.wraw = static_cast<uint64_t>(ringSlots) * PlanAlign32(static_cast<uint64_t>(kTile) * s.sW);
    } else if (s.weight && !p.wWide) {
        p.wraw = PlanAlign32(static_cast<uint64_t>(s.hidden) * s.sW);
    }
    p.wf = p.wWide ? PlanAlign32(PlanAlign(s.hidden, 8) * 4) : 0;
}

// The group's fp32 work buffer with the -0 cell the lane gather reads after it.
RMSNORM_PLAN_FN inline uint64_t PlanWork(const Plan& p) { return static_cast<uint64_t>(p.subTile) * 4 + 32; }

// Whether the forward looks ahead (fwd/forward_group.h): LAYOUT_GROUP with 16-bit x and five ring slots or
// more. Its next group's sums then wait for that group's load, so each store waits a load longer: with
// fewer slots the loads stall on the stores, and fp32 rows, which are bound by their bytes, lose more by
// that than the hidden vector latency saves.
constexpr int32_t kAheadSlots = 5;
RMSNORM_PLAN_FN inline bool FwdAheadShape(const PlanShape& s, const Plan& p)
{
    return p.layout == LAYOUT_GROUP && s.sT == 2 && p.ringSlots >= kAheadSlots;
}

// Forward. `wWide`: the whole fp32 w + offset in UB (LAYOUT_TILED may hold the raw weight instead).
RMSNORM_PLAN_FN inline Plan FwdPlanFor(const PlanShape& s, int32_t layout, int32_t G, int32_t ringSlots, int32_t subTile, bool wWide)
{
    Plan p{};
    PlanCommon(p, s, layout, G, ringSlots, subTile);
    const uint64_t rowsElems = static_cast<uint64_t>(p.G) * p.P;
    const bool wideY = s.sO == 4 && s.sT == 2;
    const bool group = layout == LAYOUT_GROUP;
    // ring slot: x rows (y is written over them), the residual rows (residual_out over them), fp32 y
    // rows when y is wider than x. fp32 x of a group is worked on in place: whole compare repeats.
    p.slotA = group && s.sT == 4 ? PlanAlign(rowsElems, 64) * 4 : PlanAlign32(rowsElems * s.sT);
    p.slotB = s.residual ? PlanAlign32(rowsElems * s.sT) : 0;
    p.slotC = wideY ? (group ? PlanAlign(rowsElems, 64) * 4 : PlanAlign32(rowsElems * 4)) : 0;
    p.ring = static_cast<uint64_t>(ringSlots) * (p.slotA + p.slotB + p.slotC);
    PlanWeight(p, s, layout, ringSlots, group || wWide);
    // LAYOUT_GROUP: the squares (16-bit x: the widened rows, squared in place and widened again
    // for y); a second fp32 copy for the residual add of 16-bit rows. Else: sub-tile buffers.
    p.xf = group ? PlanWork(p) : PlanAlign32(static_cast<uint64_t>(p.subTile) * 4);
    p.tmp = group ? (s.residual && s.sT == 2 ? PlanAlign32(static_cast<uint64_t>(p.subTile) * 4) : 0)
                  : PlanAlign32(static_cast<uint64_t>(p.subTile) * 4);
    p.br = PlanAlign32(static_cast<uint64_t>(p.gp) * 32);
    p.rsq = static_cast<uint64_t>(ringSlots) * PlanAlign32(static_cast<uint64_t>(p.gv) * 4);
    p.ahead = FwdAheadShape(s, p);
    p.total = p.ring + p.wraw + p.wf + p.xf + p.tmp + p.q + p.ln + p.l + p.off + p.vec + p.mask + p.br + p.rsq;
    return p;
}

// How the backward lags (bwd/backward_group.h): not at all; with a widened dy (then g) per group in
// flight; or with one for both, the next group widening its dy once the tail before has read its g.
enum PlanLag : int32_t { LAG_NONE = 0, LAG_TWO_DY = 1, LAG_ONE_DY = 2 };

// Whether the backward can lag (bwd/backward_group.h): LAYOUT_GROUP, x and dy 16-bit (their slots are
// then done with once widened; dx is cast into a dx buffer of its own), no residual gradient (its rows
// are read by the dx steps).
RMSNORM_PLAN_FN inline bool BwdLagShape(const PlanShape& s, const Plan& p)
{
    return p.layout == LAYOUT_GROUP && s.sT == 2 && s.sO == 2 && !s.residual;
}

// Backward: the ring holds dySlots slots of a group's dy rows (at x's pitch) and ringSlots of its x rows
// (dx is written over them) with the residual's gradient (add_rms_norm: added to dx) and its rstd. `dySlots` (LAYOUT_TILED; 0: ringSlots) may be fewer than ringSlots: a dy
// row is done with once V has read it, an x row only once its dx is stored.
RMSNORM_PLAN_FN inline Plan BwdPlanFor(const PlanShape& s, int32_t layout, int32_t G, int32_t ringSlots, int32_t subTile, bool wWide,
                                       int32_t accs = 1, int32_t dySlots = 0, int32_t lag = LAG_NONE)
{
    Plan p{};
    PlanCommon(p, s, layout, G, ringSlots, subTile);
    p.dySlots = layout == LAYOUT_TILED && dySlots > 0 && dySlots < ringSlots ? dySlots : ringSlots;
    p.vec = 3 * PlanAlign32(static_cast<uint64_t>(p.gv) * 4) + 32;  // c, the running lane sums, rstd; the NaN block
    const uint64_t rowsElems = static_cast<uint64_t>(p.G) * p.P;
    const bool group = layout == LAYOUT_GROUP;
    // fp32 dy holds g, fp32 x (LAYOUT_GROUP) xh and then dx, in place: whole compare repeats
    p.slotA = s.sO == 4 ? PlanAlign(rowsElems, 64) * 4 : PlanAlign32(rowsElems * s.sO);
    p.slotB = group && s.sT == 4 ? PlanAlign(rowsElems, 64) * 4 : PlanAlign32(rowsElems * s.sT);
    p.slotC = s.residual ? PlanAlign32(rowsElems * s.sT) : 0;
    p.slotD = PlanAlign32(static_cast<uint64_t>(p.gp) * 4);
    p.ring = static_cast<uint64_t>(p.dySlots) * p.slotA + static_cast<uint64_t>(ringSlots) * (p.slotB + p.slotC + p.slotD);
    PlanWeight(p, s, layout, ringSlots, group || wWide);
    const uint64_t accElems = layout == LAYOUT_STREAM ? static_cast<uint64_t>(kTile) : PlanAlign(s.hidden, 64);
    p.accs = group && s.dw && accs == 2 ? 2 : 1;
    p.acc = s.dw ? p.accs * PlanAlign32(accElems * 4) : 0;
    p.lag = lag != LAG_NONE && BwdLagShape(s, p) ? lag : LAG_NONE;
    const uint64_t work = PlanAlign32(static_cast<uint64_t>(p.subTile) * 4);
    const uint64_t rowsLive = p.lag ? 2 : 1;  // lag: two groups' xh and g at once
    if (group) {
        p.xf = s.sT == 4 ? 0 : rowsLive * work;   // xh (fp32 x: in place in the slot)
        p.t2 = s.sO == 4 ? 0 : (p.lag == LAG_ONE_DY ? 1 : rowsLive) * work;   // dy widened, then g (fp32 dy: in place)
        p.tmp = PlanWork(p);           // the dw terms, then g*xh and its tree
    } else {
        p.xf = work;                   // xh, then the dx terms over it
        p.tmp = work;                  // a raw weight sub-tile widened, g over it, products over g
        p.t2 = s.sO == 4 ? 0 : work;   // dy widened (the dw terms over it on LAYOUT_STREAM)
    }
    // rstd and c, one block per row (LAYOUT_STREAM: every row of a dw chunk)
    p.br = (p.lag ? 3 : 2) * PlanAlign32(static_cast<uint64_t>(layout == LAYOUT_STREAM ? kDwChunkRows : p.gp) * 32);
    p.out = p.lag ? 2 * p.slotB : 0;  // lag: dx of two groups on its way out (the x slots are loaded again)
    p.total = p.ring + p.wraw + p.wf + p.acc + p.xf + p.tmp + p.t2 + p.q + p.ln + p.l + p.off + p.vec +
              p.mask + p.br + p.out;
    return p;
}

// The dw reduce of one column slice: all chunk partials at once (rows at a pitch of the slice rounded
// to 8) when they fit (group 0), else the stacked form: `group` tree leaves per strided load, two
// loads (the leaves and the partials folded into them) double-buffered, and a stack of partial rows,
// one per tree level above the groups (bwd/dw_reduce.h).
RMSNORM_PLAN_FN inline uint64_t DwPlanBytes(int64_t chunks, int32_t slice, uint32_t sW, int32_t group)
{
    const uint64_t row = PlanAlign32(PlanAlign(slice, 64) * 4);
    uint64_t body;
    if (group > 0) {  // a power of two: the tree levels above the groups are those not within one
        const uint64_t load = PlanAlign32(static_cast<uint64_t>(group) * PlanAlign(slice, 8) * 4);
        body = 4 * load + static_cast<uint64_t>(PlanLog2Floor(chunks) - PlanLog2Floor(group) + 1) * row;
    } else {
        body = PlanAlign32(static_cast<uint64_t>(chunks) * PlanAlign(slice, 8) * 4) + row;
    }
    return body + PlanAlign32(static_cast<uint64_t>(slice) * sW) + PlanAlign32(PlanAlign(slice, 64) / 8) + 32;  // + NaN
}
