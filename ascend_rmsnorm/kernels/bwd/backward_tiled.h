// ascend-rmsnorm: the backward of LAYOUT_TILED: one row per ring slot, each 4096-element tile its own ring unit.

#ifndef ASCEND_RMSNORM_BWD_BACKWARD_TILED_H_
#define ASCEND_RMSNORM_BWD_BACKWARD_TILED_H_

#include "backward_pieces.h"

namespace rmsnorm {

template <typename T, typename W, typename D>
class BackwardTiled : public BackwardPieces<T, W, D> {
    using Base = BackwardPieces<T, W, D>;
    using Base::a_, Base::p_, Base::pipe_, Base::ring_, Base::wantDw_, Base::gro_, Base::piece_,
          Base::wRawAt_, Base::dyPending_, Base::dyFree_, Base::acc_, Base::brR_, Base::brC_, Base::dyGm_,
          Base::xGm_, Base::dxGm_, Base::groGm_, Base::rstdGm_, Base::ln_, Base::CSteps, Base::CStep, Base::Begin,
          Base::End, Base::InitConstants, Base::SelectAcc, Base::SlotDy, Base::SlotX, Base::SlotGro, Base::SlotRs,
          Base::GroupCount, Base::GroupAt, Base::EarlyPieces, Base::StorePartial, Base::StorePiece, Base::TermStep,
          Base::TermSteps, Base::TermsOf, Base::DxStep, Base::DxSteps, Base::DxStagger, Base::Staggered, Base::kDy32, Base::kF32, Base::Active, Base::q_, Base::xh_, Base::TileA, Base::PieceA, Base::HalfPieces, Base::TreeLevelsA, Base::TreeLevelA, Base::GroupDx, Base::GroupDw;

public:
    __aicore__ inline BackwardTiled(GM_ADDR dy, GM_ADDR x, GM_ADDR w, GM_ADDR rstd, GM_ADDR gro, GM_ADDR dx, GM_ADDR dw,
                              GM_ADDR ws, const BwdArgs& a, TPipe* pipe)
        : Base(dy, x, w, rstd, gro, dx, dw, ws, a, pipe)
    {}

    __aicore__ inline void Process()
    {
        if (!Begin()) return;
        RunTiled();
        End();
    }

private:
    // LAYOUT_TILED, each tile its own ring unit, so a row's first tile is worked on while its last
    // one is still coming in. Group g's x tiles (the rstd with the first) into its slot, and/or its dy
    // tiles into dy slot g % dySlots, each once V has read that tile of the row before in the slot (with
    // fewer dy slots than x slots a dy tile is free before its dx is stored).
    __aicore__ inline void LoadTiles(int64_t g, bool x, bool dy)
    {
        int64_t row0, k;
        int32_t n;
        bool first, last;
        GroupAt(g, row0, n, k, first, last);
        const int32_t b = static_cast<int32_t>(g % p_.ringSlots), d = static_cast<int32_t>(g % p_.dySlots);
        for (int32_t t = 0; t < p_.tiles; ++t) {
            const int32_t c = t * kTile, u = d * p_.tiles + t;
            const uint32_t len = Min32(kTile, static_cast<uint32_t>(a_.hidden - c));
            const uint64_t at = static_cast<uint64_t>(row0) * a_.hidden + c;
            if (x) {
                ring_.BeforeLoad(*pipe_, Unit(b, t));
                if (t == 0) LoadRows(SlotRs(b), rstdGm_[row0], 1, 4);
                LoadRows(SlotX(b)[c], xGm_[at], 1, len * sizeof(T));
                if (gro_) LoadRows(SlotGro(b)[c], groGm_[at], 1, len * sizeof(T));
            }
            if (dy) {
                if (dyPending_[u]) {
                    WaitFlag<HardEvent::V_MTE2>(dyFree_[u]);
                    dyPending_[u] = false;
                }
                LoadRows(SlotDy(d)[c], dyGm_[at], 1, len * sizeof(D));
                ring_.AfterLoad(Unit(b, t));
            }
        }
    }

    // Tile t's elements.
    __aicore__ inline int32_t TileLen(int32_t t) const
    {
        const int32_t left = a_.hidden - t * kTile;
        return left < kTile ? left : kTile;
    }
    // The windows of pass 1: tile t's pieces from start[t] to end[t] (its tree's first window),
    // start[tiles] the pass's windows. A tile's tree starts after its last piece and its lanes are
    // copied out of q_ L levels later; the next tile's first products, which write q_, come in that
    // window at the earliest (after the copy in it), its terms before them, but none before the window
    // of the tile before's last dw add, which reads xh_. Without products (dx) there are no trees: the
    // pieces run on as within a tile. tiles <= kMaxRingUnits (a ring unit per tile of a row slot).
    __aicore__ inline void TileWindows(int32_t ts, bool products, int32_t* start, int32_t* end) const
    {
        start[0] = 0;
        for (int32_t u = 0; u < p_.tiles; ++u) {
            const int32_t len = TileLen(u);
            end[u] = start[u] + Staggered(HalfPieces(FusedHalf(len), len, -1, nullptr, nullptr), ts + 2, ts + 1);
            const int32_t copy = products ? end[u] + TreeLevelsA(len) : end[u] - 1;  // the lanes' copy, or the last dw add
            const int32_t next = copy - ts > end[u] - 1 ? copy - ts : end[u] - 1;
            start[u + 1] = u + 1 == p_.tiles ? copy + 1 : next;
        }
    }

    // LAYOUT_TILED: the ring unit of tile t of slot b (the plan keeps ringSlots * tiles <= kMaxRingUnits).
    __aicore__ inline int32_t Unit(int32_t b, int32_t t) const { return b * p_.tiles + t; }

    // V has read tile t of dy slot d for the last time (with fewer dy slots than x slots, the next
    // row's dy may come in).
    __aicore__ inline void DyRead(int32_t d, int32_t t)
    {
        if (p_.dySlots == p_.ringSlots) return;
        SetFlag<HardEvent::V_MTE2>(dyFree_[d * p_.tiles + t]);
        dyPending_[d * p_.tiles + t] = true;
    }

    // dx of tile t of slot b to GM, and the tile's unit free for the next load.
    __aicore__ inline void StoreDx(int32_t b, int64_t row0, int32_t t)
    {
        const int32_t c = t * kTile;
        const uint32_t m = Min32(kTile, static_cast<uint32_t>(a_.hidden - c));
        ring_.BeforeStore(Unit(b, t));
        StoreRows(dxGm_[static_cast<uint64_t>(row0) * a_.hidden + c], SlotX(b)[c], 1, m * sizeof(T));
        ring_.AfterStore(Unit(b, t));
    }

    __aicore__ inline void RunTiled()
    {
        const int64_t groups = GroupCount();
        // with fewer dy slots, x runs ringSlots rows ahead, dy dySlots
        const bool split = p_.dySlots < p_.ringSlots;
        for (int64_t g = 0; g < groups && g < p_.ringSlots; ++g) LoadTiles(g, true, !split);
        for (int64_t g = 0; split && g < groups && g < p_.dySlots; ++g) LoadTiles(g, false, true);
        InitConstants();
        for (int64_t g = 0; g < groups; ++g) {
            int64_t row0, k;
            int32_t n;
            bool first, last;
            GroupAt(g, row0, n, k, first, last);
            const int32_t b = static_cast<int32_t>(g % p_.ringSlots);
            const bool dx = GroupDx(g), dw = GroupDw(g);
            if (dw) SelectAcc(k);
            ComputeTiled(b, static_cast<int32_t>(g % p_.dySlots), row0, k, first, last, dx, dw);
            if (wantDw_ && last && !EarlyPieces()) StorePartial(k, acc_, 0, a_.hidden);
            if (!split) {
                if (g + p_.ringSlots < groups) LoadTiles(g + p_.ringSlots, true, true);
            } else {
                // dy first: the MTE2 queue is in order, and the x slot waits for a dx store
                if (g + p_.dySlots < groups) LoadTiles(g + p_.dySlots, false, true);
                if (g + p_.ringSlots < groups) LoadTiles(g + p_.ringSlots, true, false);
            }
        }
    }

    // One row: pass 1 tile by tile (each tile once it is in), c, then pass 2 tile by tile, each
    // tile's dx stored as soon as it is made.
    __aicore__ inline void ComputeTiled(int32_t b, int32_t d, int64_t row0, int64_t k, bool first, bool last, bool dx,
                                        bool dw)
    {
        const int32_t H = a_.hidden;
        const LocalTensor<T> X = SlotX(b);
        const LocalTensor<D> DY = SlotDy(d);
        ring_.BeforeCompute(Unit(b, 0));
        // the rstd broadcast, beside the first piece's casts (16-bit x: fp32 x is multiplied by it there)
        Brcb(brR_, SlotRs(b), 1, BrcbRepeatParams(1, 8));
        if constexpr (kF32) PipeBarrier<PIPE_V>();
        wRawAt_ = 0;
        // pass 1: every tile's pieces (PieceA) and tree in one run of windows: a tile's pieces staggered
        // as in TileA, its tree after its last piece, the next tile's pieces started so that their first
        // products (into q_) come once the tree's lanes have left q_ (and their terms, in the tree's
        // last windows, once the tile before has read xh_ for the last time)
        const int32_t tsA = TermSteps(dx), stepsA = tsA + 2;
        int32_t starts[kMaxRingUnits + 1], ends[kMaxRingUnits];
        TileWindows(tsA, dx, starts, ends);
        for (int32_t w = 0; w < starts[p_.tiles]; ++w) {
            for (int32_t t = 0; t < p_.tiles; ++t) {
                const int32_t off = t * kTile, len = TileLen(t);
                const int32_t start = starts[t], end = ends[t];  // end: the tree's first window
                if (w < start || w > end + TreeLevelsA(len)) continue;
                const int32_t pieces = HalfPieces(FusedHalf(len), len, -1, nullptr, nullptr);
                piece_ = t;
                if (w == start && t > 0) ring_.BeforeCompute(Unit(b, t));
                if (w < end) {
                    int32_t j0, j1;
                    Active(w - start, pieces, stepsA, tsA + 1, j0, j1);
                    for (int32_t j = j0; j <= j1; ++j) {
                        PieceA(w - start - j * (tsA + 1), X, DY, off, len, j, dw, first, dx, brR_);
                    }
                } else if (dx && w < end + TreeLevelsA(len)) {
                    TreeLevelA(len, w - end);
                } else if (dx) {
                    DataCopy(ln_[t * p_.gp * 8], q_, 8);
                }
                if (w + 1 == end) {  // its dw terms are in; without dx, the tile is done with
                    if (last && EarlyPieces()) StorePiece(k, t);
                    if (!dx) {
                        DyRead(d, t);
                        ring_.AfterComputeOnly(Unit(b, t));
                    }
                }
            }
            if (w + 1 < starts[p_.tiles]) PipeBarrier<PIPE_V>();
        }
        if (!dx) return;
        PipeBarrier<PIPE_V>();
        // c (the lanes gathered and reduced, times 1/H, broadcast), then pass 2: the row's pieces
        // staggered (Staggered), xh in xh_ and q_ by turns where a piece fits q_ (the squares' tree is
        // done with), each tile's dy free once read and its dx stored once made. The first pieces'
        // terms, which need no c, run in c's last windows.
        const int32_t S = p_.subTile, pieces = (H + S - 1) / S, ts = TermSteps(true), steps = ts + DxSteps();
        const int32_t sets = S <= p_.qE ? 2 : 1, stagger = DxStagger(true, sets);
        const int32_t lead = CSteps() - ts;
        const int32_t windows = lead + Staggered(pieces, steps, stagger);
        const int32_t lastDy = kDy32 ? ts + 1 : 0;  // the last step that reads the dy tile: its cast, or (fp32 dy) the minus
        for (int32_t w = 0; w < windows; ++w) {
            if (w < CSteps()) CStep(w, ln_);
            int32_t j0 = 0, j1 = -1;
            if (w >= lead) Active(w - lead, pieces, steps, stagger, j0, j1);
            for (int32_t j = j0; j <= j1; ++j) {
                const int32_t at = j * S, s = w - lead - j * stagger, t = at / kTile;
                const uint32_t n = Min32(S, static_cast<uint32_t>(H - at));
                const bool tileEnd = at + static_cast<int32_t>(n) == H || (at + static_cast<int32_t>(n)) % kTile == 0;
                const LocalTensor<float> xhB = j % sets ? q_ : xh_;
                if (s < ts) {
                    TermStep(s, X, DY, at, n, brR_, true, xhB);
                } else {
                    DxStep(s - ts, X[at], TermsOf(DY, at, xhB, true), n, brC_, brR_, b, at);
                    if (s + 1 == steps && tileEnd) StoreDx(b, row0, t);
                }
                if (s == lastDy && tileEnd) DyRead(d, t);
            }
            if (w + 1 < windows) PipeBarrier<PIPE_V>();
        }
    }
};

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_BWD_BACKWARD_TILED_H_
