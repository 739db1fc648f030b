// ascend-rmsnorm: the kernels' constants: the contract's, the hardware limits, the launch flags.

#ifndef ASCEND_RMSNORM_COMMON_CONSTANTS_H_
#define ASCEND_RMSNORM_COMMON_CONSTANTS_H_

namespace rmsnorm {

using namespace AscendC;

// ---- the contract's constants (contract.py holds the same values; a test compares) ---------
constexpr int32_t kTile = 4096;
constexpr int32_t kDwChunkRows = 64;   // rows per dw chunk at most
constexpr int64_t kDwMinChunks = 128;  // R = clamp(N / kDwMinChunks, 1, kDwChunkRows)
constexpr uint32_t kRsqrtMagic = 0x5F375A86u;
constexpr int32_t kNewtonSteps = 3;

// ---- limits and the bits the kernels write -------------------------------------------------
constexpr uint64_t kUbBudget = 192 * 1024 - 256 - 8 * 1024;  // dav-2201, usable by a kernel
constexpr int64_t kMaxHidden = 2147483647;                   // H is an int32 inside the kernels
constexpr uint32_t kMaxRepStride = 255;  // 8-bit repeat strides of level-0 instructions (blocks)
constexpr int32_t kMaxRepeat = 255;      // 8-bit repeatTime
constexpr int32_t kMaxRingUnits = 6;     // ring units (slots, or the backward's tiles of its row slots): events each
constexpr int32_t kMaxAccEvents = kMaxRingUnits;  // MTE3_V events for dw partials (one per accumulator and tile), 2 left (a lag plan's two dx buffers)
constexpr int32_t kMaxBursts = 4095;     // blockCount
constexpr uint32_t kNanBits = 0x7FC00000u;   // the canonical quiet NaN (contract.CANONICAL_NAN_BITS)
constexpr uint16_t kNanBitsBf16 = 0x7FC0u;   // ... of bfloat16
constexpr uint16_t kNanBitsHalf = 0x7E00u;   // ... of float16
constexpr uint32_t kInfBits = 0x7F800000u;
constexpr uint32_t kNegZeroBits = 0x80000000u;

// the launch options (bits of `flags`)
constexpr int32_t kFlagLlama = 1;     // forward: the llama formula
constexpr int32_t kFlagResidual = 2;  // forward: the fused residual add; backward: add the residual's gradient to dx
constexpr int32_t kFlagWeight = 4;    // a weight is given
constexpr int32_t kFlagOffset = 8;    // the offset is not 0 (it is added to the widened weight)
constexpr int32_t kFlagDx = 16;       // backward: write dx
constexpr int32_t kFlagDw = 32;       // backward: dw wanted
constexpr int32_t kFlagDwDirect = 64; // backward: this launch finishes dw itself (one chunk)

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_COMMON_CONSTANTS_H_
