// ascend-rmsnorm: the extern "C" ABI the package loads with ctypes: the plan query and the launchers.
// Included by rmsnorm.asc after the kernels it launches.

#ifndef ASCEND_RMSNORM_HOST_ABI_H_
#define ASCEND_RMSNORM_HOST_ABI_H_

#include "launch_check.h"
#include "tiling.h"

#define RMSNORM_EXPORT extern "C" __attribute__((visibility("default")))

RMSNORM_EXPORT int32_t ascend_rmsnorm_abi_version() { return rmsnorm_host::kAbiVersion; }

RMSNORM_EXPORT int64_t ascend_rmsnorm_max_hidden() { return rmsnorm::kMaxHidden; }

RMSNORM_EXPORT int64_t ascend_rmsnorm_dw_chunk_rows(int64_t rows) { return rmsnorm_host::DwChunkRows(rows); }

// fp32 partials of every dw chunk (zero when one chunk: the backward kernel finishes dw itself).
RMSNORM_EXPORT int64_t ascend_rmsnorm_bwd_workspace_bytes(int64_t rows, int64_t hidden)
{
    const int64_t chunks = rmsnorm_host::PlanCeilDiv(rows, rmsnorm_host::DwChunkRows(rows));
    return chunks > 1 ? chunks * hidden * static_cast<int64_t>(sizeof(float)) : 0;
}

namespace {

// Checks shared by the launchers and the plan queries.
int32_t CheckCommon(uint32_t blockDim, int32_t dtype, int64_t rows, int64_t hidden)
{
    using namespace rmsnorm_host;
    if (rows < 0 || hidden < 1) return ST_BAD_SHAPE;
    if (hidden > rmsnorm::kMaxHidden) return ST_TOO_LARGE;
    if (!KnownDtype(dtype)) return ST_BAD_DTYPE;
    if (blockDim < 1 || blockDim > 65535) return ST_BAD_BLOCK_DIM;
    return ST_OK;
}

rmsnorm_host::PlanShape FwdShape(int32_t dtype, int32_t wDtype, int32_t oDtype, int64_t hidden, bool weight, bool residual)
{
    using namespace rmsnorm_host;
    return PlanShape{hidden, DtypeSize(dtype), weight ? DtypeSize(wDtype) : DtypeSize(dtype), DtypeSize(oDtype), weight,
                     residual, false};
}

rmsnorm_host::PlanShape BwdShape(int32_t dtype, int32_t wDtype, int32_t dyDtype, int64_t hidden, bool weight, bool dw,
                                 bool gro)
{
    using namespace rmsnorm_host;
    return PlanShape{hidden, DtypeSize(dtype), weight ? DtypeSize(wDtype) : DtypeSize(dtype), DtypeSize(dyDtype), weight,
                     gro, dw};
}

int32_t PathCode(int32_t direction, int32_t layout)
{
    using namespace rmsnorm_host;
    if (direction == 0) return layout == LAYOUT_GROUP ? PATH_FWD_GROUP : layout == LAYOUT_TILED ? PATH_FWD_TILED : PATH_FWD_STREAM;
    return layout == LAYOUT_GROUP ? PATH_BWD_GROUP : layout == LAYOUT_TILED ? PATH_BWD_TILED : PATH_BWD_STREAM;
}

}  // namespace

// The plan of a shape, for tests and the `bench --model` command. direction 0 forward, 1 backward,
// 2 dw reduce; flags as the kernels' (residual: forward the fused add, backward the residual's gradient
// added to dx; weight, dx, dw). out[0..11]: path code, G (dw: slice), ring slots (dw: the stacked
// form's tree leaves per load, 0 when a slice's partials fit at once), sub-tile elements, fp32 weight
// held, blocks, UB bytes per block, rows per dw chunk, dy slots (backward; forward: the ring slots),
// dw chunks, how the backward's steps after a group's tree lag a group (PlanLag: 0 not, 1 with a widened
// dy per group, 2 with one for both; bwd/backward_group.h), the backward's dw accumulators (0 without dw).
RMSNORM_EXPORT int32_t ascend_rmsnorm_plan2(int32_t direction, int32_t dtype, int32_t wDtype, int32_t oDtype,
                                            int32_t flags, int64_t rows, int64_t hidden, uint32_t blockDim,
                                            int64_t* out)
{
    using namespace rmsnorm_host;
    const int32_t st = CheckCommon(blockDim, dtype, rows, hidden);
    if (st != ST_OK) return st;
    const bool weight = (flags & rmsnorm::kFlagWeight) != 0;
    if (weight && wDtype != dtype && wDtype != kDtF32) return ST_BAD_DTYPE;
    if (!KnownDtype(oDtype) || !OutAllowed(dtype, wDtype, weight, oDtype)) return ST_BAD_DTYPE;
    const int64_t chunkRows = DwChunkRows(rows);
    const int64_t chunks = PlanCeilDiv(rows, chunkRows);
    for (int i = 0; i < 12; ++i) out[i] = 0;
    out[7] = chunkRows;
    out[9] = chunks;
    if (direction == 0) {
        const Plan p = FwdChoose(FwdShape(dtype, wDtype, oDtype, hidden, weight, (flags & rmsnorm::kFlagResidual) != 0));
        out[0] = PathCode(0, p.layout);
        out[1] = p.G;
        out[2] = p.ringSlots;
        out[3] = p.subTile;
        out[4] = p.wWide;
        out[5] = rows < blockDim ? rows : blockDim;
        out[6] = static_cast<int64_t>(p.total);
        out[8] = p.ringSlots;  // y is written over x: no separate slots
    } else if (direction == 1) {
        const bool dx = (flags & rmsnorm::kFlagDx) != 0;
        const bool gro = dx && (flags & rmsnorm::kFlagResidual) != 0;
        const Plan p = BwdChoose(BwdShape(dtype, wDtype, oDtype, hidden, weight, (flags & rmsnorm::kFlagDw) != 0, gro), chunkRows);
        out[0] = PathCode(1, p.layout);
        out[1] = p.G;
        out[2] = p.ringSlots;
        out[3] = p.subTile;
        out[4] = p.wWide;
        out[5] = chunks < blockDim ? chunks : blockDim;
        out[6] = static_cast<int64_t>(p.total);
        out[8] = p.dySlots;
        out[10] = p.lag;
        out[11] = p.acc ? p.accs : 0;
    } else {
        const DwPlan d = DwChoose(chunks < 1 ? 1 : chunks, hidden, DtypeSize(wDtype), blockDim);
        out[0] = -1;
        out[1] = d.slice;
        out[2] = d.stack;
        out[5] = d.blocks;
        out[6] = static_cast<int64_t>(d.bytes);
    }
    return ST_OK;
}

static int32_t LaunchForward(void* stream, uint32_t blockDim, int32_t dtype, int32_t wDtype, int32_t yDtype, void* x,
                       void* residual, void* w, void* y, void* rstd, void* residualOut, int64_t rows, int64_t hidden,
                       float eps, float invH, float offset, int32_t formula, bool fused)
{
    using namespace rmsnorm_host;
    const int32_t st = CheckCommon(blockDim, dtype, rows, hidden);
    if (st != ST_OK) return st;
    const bool weight = w != nullptr;
    if (formula != kFormulaFp32 && formula != kFormulaLlama) return ST_BAD_ARGUMENT;
    if (weight && wDtype != dtype && wDtype != kDtF32) return ST_BAD_DTYPE;
    if (!KnownDtype(yDtype) || !OutAllowed(dtype, wDtype, weight, yDtype)) return ST_BAD_DTYPE;
    if (rows == 0) return ST_OK;
    if (x == nullptr || y == nullptr || rstd == nullptr) return ST_NULL_POINTER;
    if (fused && (residual == nullptr || residualOut == nullptr)) return ST_NULL_POINTER;
    const bool res = fused;
    const Plan p = FwdChoose(FwdShape(dtype, wDtype, yDtype, hidden, weight, res));
    if (p.total > kUbBudget) return ST_TOO_LARGE;
    int32_t flags = 0;
    if (formula == kFormulaLlama) flags |= rmsnorm::kFlagLlama;
    if (res) flags |= rmsnorm::kFlagResidual;
    if (weight) flags |= rmsnorm::kFlagWeight;
    if (weight && offset != 0.0f) flags |= rmsnorm::kFlagOffset;
    const uint32_t blocks = static_cast<uint32_t>(rows < blockDim ? rows : blockDim);
    const int32_t H = static_cast<int32_t>(hidden);
    // One declaration per line: GM_ADDR is a macro for a pointer type.
    GM_ADDR px = static_cast<uint8_t*>(x);
    GM_ADDR pres = static_cast<uint8_t*>(residual);
    GM_ADDR pw = static_cast<uint8_t*>(w);
    GM_ADDR py = static_cast<uint8_t*>(y);
    GM_ADDR pr = static_cast<uint8_t*>(rstd);
    GM_ADDR pro = static_cast<uint8_t*>(residualOut);
    const int32_t wide = p.wWide ? 1 : 0;
    const int32_t wd = KernelW(dtype, wDtype, weight, yDtype);
#define RMSNORM_FWD_ARGS px, pres, pw, py, pr, pro, rows, H, eps, invH, offset, flags, p.layout, p.G, p.ringSlots, p.subTile, wide
    if (dtype == kDtF32) {
        if (wd != kDtF32) return ST_BAD_DTYPE;
        RMSNORM_LAUNCH(rmsnorm_fwd_f32_f32_f32, blocks, stream, RMSNORM_FWD_ARGS);
    } else if (dtype == kDtF16) {
        if (wd == kDtF16) {
            RMSNORM_LAUNCH(rmsnorm_fwd_f16_f16_f16, blocks, stream, RMSNORM_FWD_ARGS);
        } else if (yDtype == kDtF32) {
            RMSNORM_LAUNCH(rmsnorm_fwd_f16_f32_f32, blocks, stream, RMSNORM_FWD_ARGS);
        } else {
            RMSNORM_LAUNCH(rmsnorm_fwd_f16_f32_f16, blocks, stream, RMSNORM_FWD_ARGS);
        }
    } else {
        if (wd == kDtBf16) {
            RMSNORM_LAUNCH(rmsnorm_fwd_bf16_bf16_bf16, blocks, stream, RMSNORM_FWD_ARGS);
        } else if (yDtype == kDtF32) {
            RMSNORM_LAUNCH(rmsnorm_fwd_bf16_f32_f32, blocks, stream, RMSNORM_FWD_ARGS);
        } else {
            RMSNORM_LAUNCH(rmsnorm_fwd_bf16_f32_bf16, blocks, stream, RMSNORM_FWD_ARGS);
        }
    }
#undef RMSNORM_FWD_ARGS
    return ST_OK;
}

// Forward: y and rstd of every row. w may be null (no weight: w = 1); yDtype x's dtype, or fp32 when
// the weight is fp32 (llama's promotion) or absent. formula 0 "fp32", 1 "llama"; offset is added to
// the widened weight when it is not 0.
RMSNORM_EXPORT int32_t ascend_rmsnorm_fwd(void* stream, uint32_t blockDim, int32_t dtype, int32_t wDtype,
                                          int32_t yDtype, void* x, void* w, void* y, void* rstd, int64_t rows,
                                          int64_t hidden, float eps, float invH, float offset, int32_t formula)
{
    return LaunchForward(stream, blockDim, dtype, wDtype, yDtype, x, nullptr, w, y, rstd, nullptr, rows, hidden, eps, invH,
                   offset, formula, false);
}

// The fused residual add (docs/design.md §3 item 3b): residual_out = cast_x(x + residual), then y and rstd of
// residual_out, in the same kernel as the forward (x and residual read once, residual_out and y
// written once).
RMSNORM_EXPORT int32_t ascend_rmsnorm_add_fwd(void* stream, uint32_t blockDim, int32_t dtype, int32_t wDtype,
                                              int32_t yDtype, void* x, void* residual, void* w, void* y, void* rstd,
                                              void* residualOut, int64_t rows, int64_t hidden, float eps, float invH,
                                              float offset, int32_t formula)
{
    return LaunchForward(stream, blockDim, dtype, wDtype, yDtype, x, residual, w, y, rstd, residualOut, rows, hidden, eps,
                   invH, offset, formula, true);
}

// Backward: dx (when dx != null) and dw (when dw != null and a weight is given). gro (may be null) is
// add_rms_norm's gradient of residual_out, x's dtype and shape: dx = cast_x(float(dx) + float(gro)),
// the gradient of x and of the residual (one fp32 add, one rounding; canonical NaN). With more than one
// dw chunk the fp32 partials go to `workspace` (ascend_rmsnorm_bwd_workspace_bytes) and a second
// kernel, queued after the first on the stream, reduces them; with one chunk the backward kernel
// writes dw itself. dyDtype is y's dtype (x's, or fp32).
RMSNORM_EXPORT int32_t ascend_rmsnorm_bwd(void* stream, uint32_t blockDim, int32_t dtype, int32_t wDtype,
                                          int32_t dyDtype, void* dy, void* x, void* w, void* rstd, void* gro, void* dx,
                                          void* dw, void* workspace, int64_t rows, int64_t hidden, float invH,
                                          float offset)
{
    using namespace rmsnorm_host;
    const int32_t st = CheckCommon(blockDim, dtype, rows, hidden);
    if (st != ST_OK) return st;
    const bool weight = w != nullptr;
    if (weight && wDtype != dtype && wDtype != kDtF32) return ST_BAD_DTYPE;
    if (!KnownDtype(dyDtype) || !OutAllowed(dtype, wDtype, weight, dyDtype)) return ST_BAD_DTYPE;
    const bool wantDw = dw != nullptr && weight;
    const bool wantDx = dx != nullptr;
    const bool withGro = wantDx && gro != nullptr;
    if (rows == 0 || (!wantDw && !wantDx)) return ST_OK;
    if (dy == nullptr || x == nullptr || rstd == nullptr) return ST_NULL_POINTER;
    const int64_t chunkRows = DwChunkRows(rows);
    const int64_t chunks = PlanCeilDiv(rows, chunkRows);
    const bool direct = wantDw && chunks == 1;
    if (wantDw && !direct && workspace == nullptr) return ST_NULL_POINTER;
    const Plan p = BwdChoose(BwdShape(dtype, wDtype, dyDtype, hidden, weight, wantDw, withGro), chunkRows);
    if (p.total > kUbBudget) return ST_TOO_LARGE;
    DwPlan d{};
    if (wantDw && !direct) {
        d = DwChoose(chunks, hidden, DtypeSize(wDtype), blockDim);
        if (d.bytes > kUbBudget) return ST_TOO_LARGE;
    }
    int32_t flags = 0;
    if (weight) flags |= rmsnorm::kFlagWeight;
    if (weight && offset != 0.0f) flags |= rmsnorm::kFlagOffset;
    if (wantDx) flags |= rmsnorm::kFlagDx;
    if (wantDw) flags |= rmsnorm::kFlagDw;
    if (direct) flags |= rmsnorm::kFlagDwDirect;
    if (withGro) flags |= rmsnorm::kFlagResidual;
    const uint32_t blocks = static_cast<uint32_t>(chunks < blockDim ? chunks : blockDim);
    const int32_t H = static_cast<int32_t>(hidden);
    const int32_t chunkRowsArg = static_cast<int32_t>(chunkRows);
    GM_ADDR pdy = static_cast<uint8_t*>(dy);
    GM_ADDR px = static_cast<uint8_t*>(x);
    GM_ADDR pw = static_cast<uint8_t*>(w);
    GM_ADDR pr = static_cast<uint8_t*>(rstd);
    GM_ADDR pgro = static_cast<uint8_t*>(gro);
    GM_ADDR pdx = static_cast<uint8_t*>(dx);
    GM_ADDR pdw = static_cast<uint8_t*>(dw);
    GM_ADDR pws = static_cast<uint8_t*>(workspace);
    const int32_t wide = p.wWide ? 1 : 0;
    const int32_t wd = KernelW(dtype, wDtype, weight, dyDtype);
#define RMSNORM_BWD_ARGS pdy, px, pw, pr, pgro, pdx, pdw, pws, rows, H, invH, offset, flags, p.layout, p.G, p.ringSlots, p.subTile, wide, \
    chunkRowsArg, p.accs, p.dySlots, p.lag, d.slice
    if (dtype == kDtF32) {
        RMSNORM_LAUNCH(rmsnorm_bwd_f32_f32_f32, blocks, stream, RMSNORM_BWD_ARGS);
    } else if (dtype == kDtF16) {
        if (wd == kDtF16) {
            RMSNORM_LAUNCH(rmsnorm_bwd_f16_f16_f16, blocks, stream, RMSNORM_BWD_ARGS);
        } else if (dyDtype == kDtF32) {
            RMSNORM_LAUNCH(rmsnorm_bwd_f16_f32_f32, blocks, stream, RMSNORM_BWD_ARGS);
        } else {
            RMSNORM_LAUNCH(rmsnorm_bwd_f16_f32_f16, blocks, stream, RMSNORM_BWD_ARGS);
        }
    } else {
        if (wd == kDtBf16) {
            RMSNORM_LAUNCH(rmsnorm_bwd_bf16_bf16_bf16, blocks, stream, RMSNORM_BWD_ARGS);
        } else if (dyDtype == kDtF32) {
            RMSNORM_LAUNCH(rmsnorm_bwd_bf16_f32_f32, blocks, stream, RMSNORM_BWD_ARGS);
        } else {
            RMSNORM_LAUNCH(rmsnorm_bwd_bf16_f32_bf16, blocks, stream, RMSNORM_BWD_ARGS);
        }
    }
#undef RMSNORM_BWD_ARGS
    if (!wantDw || direct) return ST_OK;
    const uint32_t nr = static_cast<uint32_t>(d.blocks);
    if (wDtype == kDtF32) {
        RMSNORM_LAUNCH(rmsnorm_dw_f32, nr, stream, pws, pdw, chunks, H, d.slice, d.stack);
    } else if (wDtype == kDtBf16) {
        RMSNORM_LAUNCH(rmsnorm_dw_bf16, nr, stream, pws, pdw, chunks, H, d.slice, d.stack);
    } else {
        RMSNORM_LAUNCH(rmsnorm_dw_f16, nr, stream, pws, pdw, chunks, H, d.slice, d.stack);
    }
    return ST_OK;
}

#endif  // ASCEND_RMSNORM_HOST_ABI_H_
