// ascend-rmsnorm: the backward's work in pieces of a row (the tiled and stream paths): a piece's terms
// (xh, dy widened, g), its dx, and the stagger that runs the pieces of a row side by side.

#ifndef ASCEND_RMSNORM_BWD_BACKWARD_PIECES_H_
#define ASCEND_RMSNORM_BWD_BACKWARD_PIECES_H_

#include "backward_base.h"

namespace rmsnorm {

// A row is worked on in pieces of at most subTile elements. A piece's steps depend on each other,
// one barrier window each; the pieces do not, so a new piece starts every few windows (Staggered)
// and the windows of one piece's steps hold the steps of the pieces after it. The stagger is the
// fewest windows that keep every buffer the pieces share (dyf_, gg_, xh_, mask_) written only after
// the piece before last read it: in the same window at the earliest, since a window's older pieces
// are issued first and the pipe runs in order.
template <typename T, typename W, typename D>
class BackwardPieces : public BackwardBase<T, W, D> {
    using Base = BackwardBase<T, W, D>;

protected:
    using Base::a_, Base::p_, Base::weight_, Base::offset_, Base::gro_, Base::wRawAt_, Base::wrawB_, Base::wf_, Base::xh_,
          Base::gg_, Base::dyf_, Base::q_, Base::ln_, Base::acc_, Base::mask_, Base::kF32, Base::kDy32,
          Base::kW32, Base::wantDw_, Base::SlotGro, Base::AddGroStep, Base::AddGroSteps, Base::HoldNanOf, Base::Accumulate;

    __aicore__ inline BackwardPieces(GM_ADDR dy, GM_ADDR x, GM_ADDR w, GM_ADDR rstd, GM_ADDR gro, GM_ADDR dx, GM_ADDR dw,
                                     GM_ADDR ws, const BwdArgs& a, TPipe* pipe)
        : Base(dy, x, w, rstd, gro, dx, dw, ws, a, pipe)
    {}

    // The terms of the piece of n elements at `at` (its place in the work buffers: Lead(at)), in
    // TermSteps() barrier windows: xh into xhB (xh_, or q_ on the tiled path's second pass), dy widened
    // into dyf_ (fp32 dy is used where it is), g = dy*w into gg_ (a raw weight piece is widened into
    // gg_ first and multiplied in place); g is the widened dy when there is no weight or it is not needed.
    struct Terms {
        LocalTensor<float> xh, dyf, g;
    };
    // A 16-bit raw weight with an offset takes a window of its own for the offset.
    __aicore__ inline bool RawOffset(bool needG) const { return weight_ && needG && !p_.wWide && !kW32 && offset_; }
    __aicore__ inline int32_t TermSteps(bool needG) const { return RawOffset(needG) ? 3 : 2; }
    __aicore__ inline Terms TermsOf(const LocalTensor<D>& DY, int32_t at, const LocalTensor<float>& xhB, bool needG)
    {
        const uint32_t lead = Lead(at);
        Terms t;
        t.xh = xhB[lead];
        if constexpr (kDy32) {
            t.dyf = DY[at];
        } else {
            t.dyf = dyf_[lead];
        }
        t.g = weight_ && needG ? gg_[lead] : t.dyf;
        return t;
    }
    __aicore__ inline void TermStep(int32_t step, const LocalTensor<T>& X, const LocalTensor<D>& DY, int32_t at, uint32_t n,
                                    const LocalTensor<float>& fr, bool needG, const LocalTensor<float>& xhB)
    {
        const bool g = weight_ && needG;
        const bool raw = g && !p_.wWide;
        const bool rawF32 = raw && kW32 && !offset_;  // used where it is
        const uint32_t lead = Lead(at);  // WeightRaw() starts a multiple of 16 in (a tile or ring slot): the same lead
        const Terms t = TermsOf(DY, at, xhB, needG);
        if (step == 0) {
            if constexpr (kF32) {
                RowMulB(t.xh, X[at], fr, n);
            } else {
                Cast(xhB, X[at - lead], RoundMode::CAST_NONE, n + lead);
            }
            if constexpr (!kDy32) Cast(dyf_, DY[at - lead], RoundMode::CAST_NONE, n + lead);
            if (raw && !rawF32) {  // the weight piece as the formula uses it: fp32, plus the offset
                if constexpr (kW32) {
                    Adds(t.g, WeightRaw()[at], a_.offset, n);
                } else {
                    Cast(gg_, WeightRaw()[at - lead], RoundMode::CAST_NONE, n + lead);
                }
            }
        } else if (step == 1 && RawOffset(needG)) {
            Adds(t.g, t.g, a_.offset, n);
        } else {
            if constexpr (!kF32) RowMulB(t.xh, t.xh, fr, n);
            if (g) {
                if (!raw) {
                    Mul(t.g, t.dyf, wf_[at], n);
                } else if (rawF32) {
                    Mul(t.g, t.dyf, WeightRaw()[at].template ReinterpretCast<float>(), n);
                } else {
                    Mul(t.g, t.dyf, t.g, n);
                }
            }
        }
    }
    __aicore__ inline Terms SubTerms(const LocalTensor<T>& X, const LocalTensor<D>& DY, int32_t at, uint32_t n,
                                     const LocalTensor<float>& fr, bool needG = true)
    {
        for (int32_t s = 0; s < TermSteps(needG); ++s) {
            TermStep(s, X, DY, at, n, fr, needG, xh_);
            PipeBarrier<PIPE_V>();
        }
        return TermsOf(DY, at, xh_, needG);
    }

    __aicore__ inline LocalTensor<W> WeightRaw() { return wrawB_.template Get<W>()[wRawAt_]; }

    // dx of n elements, rstd * (g - xh * c), from the piece's terms (xh worked on in place) and the
    // broadcast blocks, plus (gro_) the residual's gradient at groAt of ring slot b, into dst, in
    // DxSteps() barrier windows (no barrier after the last): times c, minus, times rstd, the
    // gradient's steps, the canonical NaN (16-bit: selected after the cast; fp32: selected into dst).
    __aicore__ inline int32_t DxSteps() const { return 5 + (gro_ ? AddGroSteps() : 0); }
    __aicore__ inline void DxStep(int32_t step, const LocalTensor<T>& dst, const Terms& t, uint32_t n,
                                  const LocalTensor<float>& fc, const LocalTensor<float>& fr, int32_t b, int32_t groAt)
    {
        const int32_t gs = gro_ ? AddGroSteps() : 0;
        if (step == 0) {
            RowMulB(t.xh, t.xh, fc, n);
        } else if (step == 1) {
            Sub(t.xh, t.g, t.xh, n);
        } else if (step == 2) {
            RowMulB(t.xh, t.xh, fr, n);
        } else if (step < 3 + gs) {  // g is spent: gg_ widens the gradient
            AddGroStep(step - 3, dst, t.xh, gg_, SlotGro(b)[groAt], n);
        } else if constexpr (kF32) {
            if (step == 3 + gs) {
                Compare(mask_, t.xh, t.xh, CMPMODE::EQ, Align64Elems(n));
            } else {
                SelectHeld(dst, mask_, t.xh, n);
            }
        } else {
            HoldNanOf(true);
            CanonCastStep(step - 3 - gs, dst, t.xh, mask_, Align64Elems(n), n);
        }
    }
    __aicore__ inline void DxTerms(const LocalTensor<T>& dst, const Terms& t, uint32_t n, const LocalTensor<float>& fc,
                                   const LocalTensor<float>& fr, int32_t b, int32_t groAt)
    {
        for (int32_t s = 0; s < DxSteps(); ++s) {
            if (s > 0) PipeBarrier<PIPE_V>();
            DxStep(s, dst, t, n, fc, fr, b, groAt);
        }
    }
    // The stagger of dx pieces (terms then dx; xh in `sets` buffers taken in turn): the next piece's
    // terms write gg_ and dyf_ once the minus has read g (a 16-bit gradient's add: gg_ too); a piece
    // `sets` later writes its xh once the NaN's compare (fp32: the select) has read it.
    __aicore__ inline int32_t DxStagger(bool needG, int32_t sets) const
    {
        const int32_t ts = TermSteps(needG), gs = gro_ ? AddGroSteps() : 0;
        const int32_t lastG = gro_ && !kF32 ? ts + 3 + gs - 1 : ts + 1;  // the gradient's add (its last step), or the minus
        const int32_t lastXh = ts + 3 + gs + (kF32 ? 1 : 0);
        const int32_t x = (lastXh + sets - 1) / sets;
        return x > lastG ? x : lastG;
    }

    // One tile of one row: with dwTerms, the dw terms into acc_[off] (accStart: the chunk's first row); the products
    // g*xh into q_ with the tree's first level fused, then the tree; lanes to ln_[8 * slot]. Per piece
    // the terms' windows, then the products and (in place over xh) the dw terms, then their sums
    // (PieceA); a piece starts once the one before has added its dw terms (it writes xh_ then), so a
    // piece costs the windows of its terms and one.
    __aicore__ inline void TileA(const LocalTensor<T>& X, const LocalTensor<D>& DY, int32_t off, int32_t len, bool dwTerms,
                                 bool accStart, int32_t slot, bool products, const LocalTensor<float>& fr)
    {
        const int32_t h = FusedHalf(len), ts = TermSteps(products), steps = ts + 2;
        const int32_t pieces = HalfPieces(h, len, -1, nullptr, nullptr);
        const int32_t windows = Staggered(pieces, steps, ts + 1);
        for (int32_t w = 0; w < windows; ++w) {
            int32_t j0, j1;
            Active(w, pieces, steps, ts + 1, j0, j1);
            for (int32_t j = j0; j <= j1; ++j) {
                PieceA(w - j * (ts + 1), X, DY, off, len, j, dwTerms, accStart, products, fr);
            }
            PipeBarrier<PIPE_V>();
        }
        if (products) {
            for (int32_t k = 0; k < TreeLevelsA(len); ++k) {
                TreeLevelA(len, k);
                PipeBarrier<PIPE_V>();
            }
            DataCopy(ln_[slot * 8], q_, 8);
        }
    }
    // Step s of piece j of a tile (TileA): its terms, then the products (into q_ below the fused half
    // h, else into gg_, over g with a weight, to be added into q_) and the dw terms over xh, then their
    // sums.
    __aicore__ inline void PieceA(int32_t s, const LocalTensor<T>& X, const LocalTensor<D>& DY, int32_t off, int32_t len,
                                  int32_t j, bool dwTerms, bool accStart, bool products,
                                  const LocalTensor<float>& fr)
    {
        const int32_t h = FusedHalf(len), ts = TermSteps(products);
        const bool dw = wantDw_ && dwTerms;
        int32_t a = 0, n = 0;
        HalfPieces(h, len, j, &a, &n);
        const uint32_t un = static_cast<uint32_t>(n);
        if (s < ts) {
            TermStep(s, X, DY, off + a, un, fr, products, xh_);
            return;
        }
        const Terms t = TermsOf(DY, off + a, xh_, products);
        const LocalTensor<float> prod = gg_[Lead(off + a)];  // the second half's products (over g with a weight)
        if (s == ts) {
            if (products) Mul(a < h ? q_[a] : prod, t.g, t.xh, un);
            if (dw) Mul(t.xh, t.dyf, t.xh, un);  // after the products have read xh: the pipe is in order
        } else {
            if (dw) Accumulate(acc_[off + a], t.xh, un, accStart);
            if (products && a >= h) Add(q_[a - h], q_[a - h], prod, un);
        }
    }
    // The tree of a tile's fused half in q_ down to 8 lanes (HalveToLanes), level by level.
    __aicore__ inline int32_t TreeLevelsA(int32_t len) const
    {
        const int32_t h = FusedHalf(len);
        return h < len ? TreeSteps(h) : 0;
    }
    __aicore__ inline void TreeLevelA(int32_t len, int32_t k)
    {
        const int32_t b = FusedHalf(len) >> (k + 1);
        Add(q_, q_, q_[b], b);
    }
    // The pieces of a tile of len elements whose tree's first level is fused at h (FusedHalf): those
    // below h, then those above (no piece straddles h); with j >= 0, piece j's start and length.
    __aicore__ inline int32_t HalfPieces(int32_t h, int32_t len, int32_t j, int32_t* a, int32_t* n) const
    {
        const int32_t S = p_.subTile, lim = h < len ? h : len;
        const int32_t below = (lim + S - 1) / S, above = (len - lim + S - 1) / S;
        if (j >= 0) {
            *a = j < below ? j * S : lim + (j - below) * S;
            const int32_t end = j < below ? lim : len;
            *n = end - *a < S ? end - *a : S;
        }
        return below + above;
    }
    // Windows of `pieces` pieces of `steps` steps, one started every `stagger` windows; the pieces
    // active in window w (oldest j0 to newest j1).
    __aicore__ inline int32_t Staggered(int32_t pieces, int32_t steps, int32_t stagger) const
    {
        return pieces > 0 ? (pieces - 1) * stagger + steps : 0;
    }
    __aicore__ inline void Active(int32_t w, int32_t pieces, int32_t steps, int32_t stagger, int32_t& j0, int32_t& j1) const
    {
        j0 = w < steps ? 0 : (w - steps) / stagger + 1;
        j1 = w / stagger < pieces - 1 ? w / stagger : pieces - 1;
    }
};

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_BWD_BACKWARD_PIECES_H_
