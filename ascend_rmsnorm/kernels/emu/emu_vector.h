// Vector instructions of the emulation: element-exact arithmetic, Cast with each RoundMode,
// and the dav-2201 rules on operand types, alignment, overlap and repeat ranges.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "emu_pipe.h"

namespace AscendC {

struct BinaryRepeatParams {
    BinaryRepeatParams() {}
    BinaryRepeatParams(const uint8_t dstBlkStrideIn, const uint8_t src0BlkStrideIn, const uint8_t src1BlkStrideIn,
                       const uint8_t dstRepStrideIn, const uint8_t src0RepStrideIn, const uint8_t src1RepStrideIn)
        : dstBlkStride(dstBlkStrideIn),
          src0BlkStride(src0BlkStrideIn),
          src1BlkStride(src1BlkStrideIn),
          dstRepStride(dstRepStrideIn),
          src0RepStride(src0RepStrideIn),
          src1RepStride(src1RepStrideIn)
    {}
    uint32_t blockNumber = 8;
    uint8_t dstBlkStride = 1;
    uint8_t src0BlkStride = 1;
    uint8_t src1BlkStride = 1;
    uint8_t dstRepStride = 8;
    uint8_t src0RepStride = 8;
    uint8_t src1RepStride = 8;
    bool repeatStrideMode = false;
    bool strideSizeMode = false;
};

struct UnaryRepeatParams {
    UnaryRepeatParams() {}
    UnaryRepeatParams(const uint16_t dstBlkStrideIn, const uint16_t srcBlkStrideIn, const uint8_t dstRepStrideIn,
                      const uint8_t srcRepStrideIn)
        : dstBlkStride(dstBlkStrideIn), srcBlkStride(srcBlkStrideIn), dstRepStride(dstRepStrideIn),
          srcRepStride(srcRepStrideIn)
    {}
    uint32_t blockNumber = 8;
    uint16_t dstBlkStride = 1;
    uint16_t srcBlkStride = 1;
    uint8_t dstRepStride = 8;
    uint8_t srcRepStride = 8;
    bool repeatStrideMode = false;
    bool strideSizeMode = false;
};

enum class RoundMode { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD, CAST_HYBRID };

namespace emu_detail {

template <typename T, typename... Ts>
constexpr bool kOneOf = (std::is_same<T, Ts>::value || ...);

// isSetMask = false runs an instruction under the vector mask as it stands, its mask argument (or the count
// of a count form) a placeholder (asc-devkit impl/basic_api/kernel_utils_base.h AscendCUtils::SetMask:
// `if constexpr (!isSetMask) return;`; dav_c220 kernel_operator_vec_binary_scalar_impl.h, the count forms:
// one repeat under the mask register; 掩码.md, 接口外设置Mask). The emulation does not model which mask
// an instruction leaves behind, so that form would compute over the argument instead: refused.
#define ASCEND_EMU_MASK_SET_INSIDE(isSetMask)                                                              \
    static_assert(isSetMask, "isSetMask = false (the mask as it stands, set outside with SetVectorMask) is " \
                             "not modelled by the emulation: it would compute over the placeholder")

template <typename T>
constexpr bool kArithType = kOneOf<T, int16_t, half, int32_t, float>;

template <typename T>
inline T Narrow(double v)
{
    if constexpr (std::is_same<T, half>::value) {
        return half(static_cast<float>(v));
    } else if constexpr (std::is_integral<T>::value) {
        return static_cast<T>(static_cast<int64_t>(v));
    } else {
        return static_cast<T>(v);
    }
}

// Whether the device runs in the A2/A3 saturation mode (ASCEND_RMSNORM_EMU_SATURATE=1, read once per
// process): inf and overflow become the type's MAX/MIN and NaN becomes 0 in a half result, an int16_t or
// int32_t result clamps to its range instead of wrapping, a cast to half or bfloat16_t saturates (ConvertOne).
// float results are INF/NAN mode either way (asc-devkit 附录/Memory矢量计算接口边界值汇总.md: its overview,
// 表9-18 and 表32).
inline bool Saturating()
{
    static const bool on = ascend_emu::EnvFlag("ASCEND_RMSNORM_EMU_SATURATE");
    return on;
}

// The bits of a NaN that arithmetic makes. The boundary appendix says only that a NaN comes out
// (表1: "nan不区分正负", its sign not told apart); its sign and payload are the device's, so here they
// are poisoned with the pattern a bit trick is likeliest to mistake for something else: the lowest
// signalling NaN, one above +inf (0x7F800001, and 0x7C01 in half). A kernel may test a NaN (x == x,
// a compare) but must not read its bits; one that did gets them wrong here.
constexpr uint32_t kArithNanBits = 0x7F800001u;
constexpr uint16_t kArithNanBitsHalf = 0x7C01u;

// One arithmetic step in the element type: float math for float, one RNE rounding for half
// (the exact float result rounded once), wrap-around for integers; saturation mode as above; a NaN
// result poisoned (above).
template <typename T, typename F>
inline T Apply(T a, T b, F f)
{
    if constexpr (std::is_same<T, float>::value) {
        const float r = f(a, b);
        return r == r ? r : ascend_emu::BitsF32(kArithNanBits);
    } else if constexpr (std::is_same<T, half>::value) {
        const float r = f(static_cast<float>(a), static_cast<float>(b));
        if (r != r && !Saturating()) return half::FromBits(kArithNanBitsHalf);
        return half::FromBits(ascend_emu::NarrowFloat(r, 5, 10, ascend_emu::Rounding::kRint, Saturating()));
    } else {
        int64_t r = f(static_cast<int64_t>(a), static_cast<int64_t>(b));
        if (Saturating()) {
            r = std::min<int64_t>(std::max<int64_t>(r, std::numeric_limits<T>::min()), std::numeric_limits<T>::max());
        }
        return static_cast<T>(r);
    }
}

inline bool Overlap(uint32_t a, uint32_t alen, uint32_t b, uint32_t blen)
{
    return alen != 0 && blen != 0 && a < b + blen && b < a + alen;
}

// Level-2 operands: the destination and each source must be the same range or disjoint.
inline void CheckAlias(uint32_t dst, uint32_t src, uint32_t bytes, const char* api)
{
    if (dst != src && Overlap(dst, bytes, src, bytes)) {
        ascend_emu::Fail("operand overlap",
                         ascend_emu::Fmt("%s: dst (UB byte %u) and a source (UB byte %u) partially overlap over %u "
                                         "bytes; they must coincide exactly or not overlap at all",
                                         api, dst, src, bytes),
                         ascend_emu::doc::kOverlap);
    }
}

// Compare and Compares state no overlap allowance, and an API that states none allows none
// (通用说明和约束.md): the mask they write may not touch a source at all.
inline void CheckCompareDisjoint(uint32_t dst, uint32_t dbytes, uint32_t src, uint32_t sbytes, const char* api,
                                 const char* page)
{
    if (Overlap(dst, dbytes, src, sbytes)) {
        ascend_emu::Fail("operand overlap",
                         ascend_emu::Fmt("%s: dst (UB byte %u, %u bytes) overlaps a source (UB byte %u, %u bytes); "
                                         "this API allows no overlap",
                                         api, dst, dbytes, src, sbytes),
                         page);
    }
}

inline void CheckCount(int64_t count, const char* api)
{
    if (count < 0) {
        ascend_emu::Fail("repeat range", ascend_emu::Fmt("%s with a negative count %lld", api, static_cast<long long>(count)),
                         ascend_emu::doc::kRepeat);
    }
}

inline void CheckRepeat(int32_t repeat, const char* api)
{
    if (repeat < 0 || repeat > 255) {
        ascend_emu::Fail("repeat range",
                         ascend_emu::Fmt("%s with repeatTime %d; the hardware field is 8 bits (0..255), larger "
                                         "values wrap",
                                         api, repeat),
                         ascend_emu::doc::kRepeat);
    }
}

// This thread's last count-form binary instruction: its API and the UB addresses of dst, src0, src1
// (where an instruction's operands lie is not in the results; tests: calibrate.asc's AddApart). A plain
// record: Binary runs for every such instruction the emulation executes.
struct LastOperands {
    const char* api = nullptr;
    uint32_t addr[3] = {0, 0, 0};
};
inline thread_local LastOperands g_last_operands;

template <typename T, typename F>
inline void Binary(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, int64_t count,
                   const char* api, F f)
{
    CheckCount(count, api);
    dst.EmuCheckOperand(count, api, "dst");
    src0.EmuCheckOperand(count, api, "src0");
    src1.EmuCheckOperand(count, api, "src1");
    const uint32_t bytes = static_cast<uint32_t>(count * sizeof(T));
    CheckAlias(dst.EmuAddr(), src0.EmuAddr(), bytes, api);
    CheckAlias(dst.EmuAddr(), src1.EmuAddr(), bytes, api);
    uint32_t op = ascend_emu::BeginOp(ascend_emu::kV);
    ascend_emu::TrackRead(ascend_emu::kV, op, src0.EmuAddr(), bytes, api);
    ascend_emu::TrackRead(ascend_emu::kV, op, src1.EmuAddr(), bytes, api);
    ascend_emu::TrackWrite(ascend_emu::kV, op, dst.EmuAddr(), bytes, api);
    ascend_emu::perf::VectorBytes(api, bytes, static_cast<uint64_t>(count));
    g_last_operands = LastOperands{api, {dst.EmuAddr(), src0.EmuAddr(), src1.EmuAddr()}};
    if (ascend_emu::perf::SkipCompute()) return;
    T* d = dst.EmuData();
    const T* a = src0.EmuData();
    const T* b = src1.EmuData();
    for (int64_t i = 0; i < count; ++i) d[i] = Apply(a[i], b[i], f);
}

// The rules and the record of a count-form instruction with one source: its count, both operands, their
// overlap, the sync tracking and the perf count. False where the model skips the arithmetic.
template <typename T>
inline bool UnaryOperands(const LocalTensor<T>& dst, const LocalTensor<T>& src, int64_t count, const char* api)
{
    CheckCount(count, api);
    dst.EmuCheckOperand(count, api, "dst");
    src.EmuCheckOperand(count, api, "src");
    const uint32_t bytes = static_cast<uint32_t>(count * sizeof(T));
    CheckAlias(dst.EmuAddr(), src.EmuAddr(), bytes, api);
    uint32_t op = ascend_emu::BeginOp(ascend_emu::kV);
    ascend_emu::TrackRead(ascend_emu::kV, op, src.EmuAddr(), bytes, api);
    ascend_emu::TrackWrite(ascend_emu::kV, op, dst.EmuAddr(), bytes, api);
    ascend_emu::perf::VectorBytes(api, bytes, static_cast<uint64_t>(count));
    return !ascend_emu::perf::SkipCompute();
}

template <typename T, typename F>
inline void Scalar(const LocalTensor<T>& dst, const LocalTensor<T>& src, T scalar, int64_t count, const char* api, F f)
{
    if (!UnaryOperands(dst, src, count, api)) return;
    T* d = dst.EmuData();
    const T* a = src.EmuData();
    for (int64_t i = 0; i < count; ++i) d[i] = Apply(a[i], scalar, f);
}

// Level 0: `repeat` repeats of 8 blocks of 32 bytes, strides in blocks, a mask per repeat.
// Repeats run in order, reading then writing, which is what makes the documented
// accumulate idiom (dst == src1 with a zero repeat stride) work. Only blocks holding an
// active (unmasked) element are accessed: those are bounds-checked and sync-tracked.
// Overlap, per the ISA rule (通用地址重叠约束): inside one repeat a source's blocks and dst's
// blocks coincide or are disjoint (the accumulate idiom included); no later repeat may read a block an
// earlier repeat wrote, except src1 in the accumulate idiom.
template <typename T>
struct RepeatGeometry {
    static constexpr uint32_t kPerBlock = ascend_emu::kBlockBytes / sizeof(T);
    static constexpr uint32_t kPerRepeat = 8 * kPerBlock;
    uint64_t lo = 0, hi = 0;
    bool bitwise = false;
    bool Active(uint32_t e) const
    {
        if (!bitwise) return e < std::min<uint64_t>(lo, kPerRepeat);
        return e < 64 ? ((lo >> e) & 1u) != 0 : ((hi >> (e - 64)) & 1u) != 0;
    }
    bool BlockActive(uint32_t k) const
    {
        for (uint32_t j = 0; j < kPerBlock; ++j)
            if (Active(k * kPerBlock + j)) return true;
        return false;
    }
    uint32_t Lanes() const
    {
        uint32_t n = 0;
        for (uint32_t e = 0; e < kPerRepeat; ++e) n += Active(e) ? 1 : 0;
        return n;
    }
};

// The UB byte address of block k of repeat r of an operand at `base` with the given strides.
inline uint32_t BlockAddr(uint32_t base, int32_t r, uint32_t k, uint32_t blk, uint32_t rep)
{
    return base + (static_cast<uint32_t>(r) * rep + k * blk) * ascend_emu::kBlockBytes;
}

// The repeat count, mask and dst block stride of a level-0 op, checked: repeatTime fits its 8 bits, a
// continuous mask is in [1, lanes per repeat], a bitwise one has mask[1] = 0 for 32-bit types, and
// dstBlkStride is not 0; the geometry they give.
template <typename T>
inline RepeatGeometry<T> CheckedGeometry(int32_t repeat, uint64_t mask_lo, uint64_t mask_hi, bool bitwise,
                                         uint32_t dstBlkStride, const char* api)
{
    CheckRepeat(repeat, api);
    using Geo = RepeatGeometry<T>;
    if (dstBlkStride == 0) {
        ascend_emu::Fail("repeat range", ascend_emu::Fmt("%s with dstBlkStride 0", api), ascend_emu::doc::kRepeat);
    }
    if (!bitwise && (mask_lo == 0 || mask_lo > Geo::kPerRepeat)) {
        ascend_emu::Fail("repeat range",
                         ascend_emu::Fmt("%s: continuous mask %llu outside [1, %u]", api,
                                         static_cast<unsigned long long>(mask_lo), Geo::kPerRepeat),
                         ascend_emu::doc::kMask);
    }
    if (bitwise && sizeof(T) == 4 && mask_hi != 0) {
        ascend_emu::Fail("repeat range", ascend_emu::Fmt("%s: bitwise mask[1] must be 0 for 32-bit types", api),
                         ascend_emu::doc::kMask);
    }
    return Geo{mask_lo, mask_hi, bitwise};
}

// Bounds of the active blocks of an operand: the last active block must lie inside the tensor.
template <typename T, typename G>
inline void CheckRepeatOperand(const LocalTensor<T>& t, const G& g, int32_t repeat, uint32_t blk, uint32_t rep,
                               const char* api, const char* role)
{
    uint32_t last = 0;
    for (uint32_t k = 0; k < 8; ++k)
        if (g.BlockActive(k)) last = k;
    const uint64_t end = (static_cast<uint64_t>(repeat - 1) * rep + last * blk + 1) * ascend_emu::kBlockBytes;
    t.EmuCheckOperand(end / sizeof(T), api, role);
}

// The overlap rule between dst and one source (see above).
template <typename G>
inline void CheckRepeatOverlap(uint32_t dst, uint32_t dblk, uint32_t drep, uint32_t src, uint32_t sblk,
                               uint32_t srep, const G& g, int32_t repeat, bool accumulate, const char* api)
{
    std::vector<std::pair<uint32_t, int32_t>> written;  // (dst block address, first repeat writing it)
    if (!accumulate) written.reserve(static_cast<size_t>(repeat) * 8);
    for (int32_t r = 0; r < repeat; ++r) {
        uint32_t d[8], s[8];
        int n = 0;
        for (uint32_t k = 0; k < 8; ++k) {
            if (!g.BlockActive(k)) continue;
            d[n] = BlockAddr(dst, r, k, dblk, drep);
            s[n] = BlockAddr(src, r, k, sblk, srep);
            ++n;
        }
        std::sort(d, d + n);
        std::sort(s, s + n);
        bool same = std::equal(d, d + n, s), meet = false;
        for (int i = 0; i < n && !same && !meet; ++i) meet = std::binary_search(d, d + n, s[i]);
        if (meet) {  // the accumulate idiom lifts the rule between repeats only, not this one
            ascend_emu::Fail("operand overlap",
                             ascend_emu::Fmt("%s: in repeat %d dst and a source share some blocks but not all "
                                             "(they must coincide or be disjoint)",
                                             api, r),
                             ascend_emu::doc::kOverlap);
        }
        if (!accumulate)
            for (int i = 0; i < n; ++i) written.emplace_back(d[i], r);
    }
    if (accumulate) return;
    std::sort(written.begin(), written.end());
    for (int32_t r = 1; r < repeat; ++r) {
        for (uint32_t k = 0; k < 8; ++k) {
            if (!g.BlockActive(k)) continue;
            const uint32_t a = BlockAddr(src, r, k, sblk, srep);
            auto it = std::lower_bound(written.begin(), written.end(), std::make_pair(a, INT32_MIN));
            if (it != written.end() && it->first == a && it->second < r) {
                ascend_emu::Fail("operand overlap",
                                 ascend_emu::Fmt("%s: repeat %d reads UB byte %u that repeat %d wrote (a later "
                                                 "repeat's source overlaps an earlier repeat's dst)",
                                                 api, r, a, it->second),
                                 ascend_emu::doc::kOverlap);
            }
        }
    }
}

inline bool AccumulateApi(const char* api)
{
    static const char* const kApis[] = {"Add", "Sub", "Mul", "Max", "Min", "AddRelu", "SubRelu"};
    for (const char* a : kApis) {
        if (std::strcmp(a, api) == 0) return true;
    }
    return false;
}

template <typename T>
constexpr bool AccumulateType()
{
    return std::is_same<T, half>::value || std::is_same<T, int32_t>::value || std::is_same<T, float>::value;
}

template <typename T, typename F>
inline void BinaryRepeat(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                         const uint64_t mask_lo, const uint64_t mask_hi, bool bitwise, int32_t repeat,
                         const BinaryRepeatParams& p, const char* api, F f)
{
    using Geo = RepeatGeometry<T>;
    constexpr uint32_t per_block = Geo::kPerBlock;
    constexpr uint32_t per_repeat = Geo::kPerRepeat;
    const Geo g = CheckedGeometry<T>(repeat, mask_lo, mask_hi, bitwise, p.dstBlkStride, api);
    if (repeat == 0) return;
    CheckRepeatOperand(dst, g, repeat, p.dstBlkStride, p.dstRepStride, api, "dst");
    CheckRepeatOperand(src0, g, repeat, p.src0BlkStride, p.src0RepStride, api, "src0");
    CheckRepeatOperand(src1, g, repeat, p.src1BlkStride, p.src1RepStride, api, "src1");
    // The one documented exception to "no later repeat reads an earlier repeat's dst" (通用说明和约束):
    // Add/Sub/Mul/Max/Min/AddRelu/SubRelu on half/int32/float with dst == src1 and src1RepStride or
    // dstRepStride 0 (the accumulate idiom: each repeat adds into what the one before wrote).
    const bool accumulate = AccumulateApi(api) && AccumulateType<T>() && dst.EmuAddr() == src1.EmuAddr() &&
                            (p.src1RepStride == 0 || p.dstRepStride == 0);
    CheckRepeatOverlap(dst.EmuAddr(), p.dstBlkStride, p.dstRepStride, src0.EmuAddr(), p.src0BlkStride,
                       p.src0RepStride, g, repeat, false, api);
    CheckRepeatOverlap(dst.EmuAddr(), p.dstBlkStride, p.dstRepStride, src1.EmuAddr(), p.src1BlkStride,
                       p.src1RepStride, g, repeat, accumulate, api);
    uint32_t op = ascend_emu::BeginOp(ascend_emu::kV);
    if (ascend_emu::perf::On()) {
        ascend_emu::perf::Vector(api, static_cast<uint64_t>(repeat), static_cast<uint64_t>(repeat) * g.Lanes());
    }
    const bool compute = !ascend_emu::perf::SkipCompute();
    uint8_t* ub = ascend_emu::State().ub;
    for (int32_t r = 0; r < repeat; ++r) {
        T a[per_repeat], b[per_repeat];
        for (uint32_t k = 0; k < 8; ++k) {
            if (!g.BlockActive(k)) continue;
            uint32_t s0 = BlockAddr(src0.EmuAddr(), r, k, p.src0BlkStride, p.src0RepStride);
            uint32_t s1 = BlockAddr(src1.EmuAddr(), r, k, p.src1BlkStride, p.src1RepStride);
            ascend_emu::TrackRead(ascend_emu::kV, op, s0, 32, api);
            ascend_emu::TrackRead(ascend_emu::kV, op, s1, 32, api);
            if (!compute) continue;
            std::memcpy(a + k * per_block, ub + s0, 32);
            std::memcpy(b + k * per_block, ub + s1, 32);
        }
        for (uint32_t k = 0; k < 8; ++k) {
            if (!g.BlockActive(k)) continue;
            uint32_t d = BlockAddr(dst.EmuAddr(), r, k, p.dstBlkStride, p.dstRepStride);
            ascend_emu::TrackWrite(ascend_emu::kV, op, d, 32, api);
            if (!compute) continue;
            T* out = reinterpret_cast<T*>(ub + d);
            for (uint32_t j = 0; j < per_block; ++j) {
                uint32_t e = k * per_block + j;
                if (g.Active(e)) out[j] = Apply(a[e], b[e], f);
            }
        }
    }
}

// Max/Min (and Maxs/Mins) of two elements as Apply passes them (float, or int64_t for the integer types), by
// asc-devkit 附录/Memory矢量计算接口边界值汇总.md 表13, 表14, 表17, 表18: a NaN operand, either one, gives a NaN
// (not the other operand, as a plain a > b ? a : b would for a NaN src0), and the zeros are ordered:
// max(+0, -0) = +0, min(+0, -0) = -0 (IEEE 754-2019 maximum/minimum, which those tables follow).
template <typename V>
inline V MaxOf(V a, V b)
{
    if constexpr (std::is_floating_point<V>::value) {
        if (std::isnan(a)) return a;
        if (std::isnan(b)) return b;
        if (a == b) return std::signbit(a) ? b : a;
    }
    return a > b ? a : b;
}
template <typename V>
inline V MinOf(V a, V b)
{
    if constexpr (std::is_floating_point<V>::value) {
        if (std::isnan(a)) return a;
        if (std::isnan(b)) return b;
        if (a == b) return std::signbit(a) ? a : b;
    }
    return a < b ? a : b;
}

} // namespace emu_detail

// clang-format off
#define ASCEND_EMU_BINARY(NAME, EXPR, TYPE_OK, TYPE_MSG)                                                   \
    template <typename T>                                                                                  \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,   \
                     const int32_t& count)                                                                 \
    {                                                                                                      \
        static_assert(TYPE_OK, #NAME ": " TYPE_MSG " (see asc-devkit Memory矢量计算 " #NAME ".md)");       \
        emu_detail::Binary(dst, src0, src1, count, #NAME, [](auto a, auto b) { return EXPR; });            \
    }                                                                                                      \
    template <typename T, bool isSetMask = true>                                                           \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,   \
                     uint64_t mask, const int32_t repeatTime, const BinaryRepeatParams& repeatParams)      \
    {                                                                                                      \
        static_assert(TYPE_OK, #NAME ": " TYPE_MSG);                                                       \
        ASCEND_EMU_MASK_SET_INSIDE(isSetMask);                                                             \
        emu_detail::BinaryRepeat(dst, src0, src1, mask, 0, false, repeatTime, repeatParams, #NAME,         \
                                 [](auto a, auto b) { return EXPR; });                                     \
    }                                                                                                      \
    template <typename T, bool isSetMask = true>                                                           \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,   \
                     uint64_t mask[], const int32_t repeatTime, const BinaryRepeatParams& repeatParams)    \
    {                                                                                                      \
        static_assert(TYPE_OK, #NAME ": " TYPE_MSG);                                                       \
        ASCEND_EMU_MASK_SET_INSIDE(isSetMask);                                                             \
        emu_detail::BinaryRepeat(dst, src0, src1, mask[0], mask[1], true, repeatTime, repeatParams, #NAME, \
                                 [](auto a, auto b) { return EXPR; });                                     \
    }
// clang-format on

ASCEND_EMU_BINARY(Add, a + b, emu_detail::kArithType<T>, "dav-2201 supports int16_t, half, int32_t, float (no bfloat16_t arithmetic)")
ASCEND_EMU_BINARY(Sub, a - b, emu_detail::kArithType<T>, "dav-2201 supports int16_t, half, int32_t, float (no bfloat16_t arithmetic)")
ASCEND_EMU_BINARY(Mul, a * b, emu_detail::kArithType<T>, "dav-2201 supports int16_t, half, int32_t, float (no bfloat16_t arithmetic)")
ASCEND_EMU_BINARY(Max, emu_detail::MaxOf(a, b), emu_detail::kArithType<T>, "dav-2201 supports int16_t, half, int32_t, float")
ASCEND_EMU_BINARY(Min, emu_detail::MinOf(a, b), emu_detail::kArithType<T>, "dav-2201 supports int16_t, half, int32_t, float")
ASCEND_EMU_BINARY(Div, a / b, (emu_detail::kOneOf<T, half, float>), "dav-2201 supports half and float")
#undef ASCEND_EMU_BINARY

template <typename T>
inline void Adds(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count)
{
    static_assert(emu_detail::kArithType<T>, "Adds: dav-2201 supports int16_t, half, int32_t, float");
    emu_detail::Scalar(dst, src, scalarValue, count, "Adds", [](auto a, auto b) { return a + b; });
}

namespace emu_detail {
// Level 0 of an op with a scalar (Adds): `repeat` repeats under a continuous or bitwise mask, strides
// from UnaryRepeatParams; the same operand, overlap and sync rules as BinaryRepeat.
template <typename T, typename F>
inline void ScalarRepeat(const LocalTensor<T>& dst, const LocalTensor<T>& src, T scalar, uint64_t mask_lo,
                         uint64_t mask_hi, bool bitwise, int32_t repeat, const UnaryRepeatParams& p, const char* api, F f)
{
    using Geo = RepeatGeometry<T>;
    const Geo g = CheckedGeometry<T>(repeat, mask_lo, mask_hi, bitwise, p.dstBlkStride, api);
    if (repeat == 0) return;
    CheckRepeatOperand(dst, g, repeat, p.dstBlkStride, p.dstRepStride, api, "dst");
    CheckRepeatOperand(src, g, repeat, p.srcBlkStride, p.srcRepStride, api, "src");
    CheckRepeatOverlap(dst.EmuAddr(), p.dstBlkStride, p.dstRepStride, src.EmuAddr(), p.srcBlkStride, p.srcRepStride, g,
                       repeat, false, api);
    uint32_t op = ascend_emu::BeginOp(ascend_emu::kV);
    if (ascend_emu::perf::On()) {
        ascend_emu::perf::Vector(api, static_cast<uint64_t>(repeat), static_cast<uint64_t>(repeat) * g.Lanes());
    }
    const bool compute = !ascend_emu::perf::SkipCompute();
    uint8_t* ub = ascend_emu::State().ub;
    for (int32_t r = 0; r < repeat; ++r) {
        T a[Geo::kPerRepeat];
        for (uint32_t k = 0; k < 8; ++k) {
            if (!g.BlockActive(k)) continue;
            const uint32_t s0 = BlockAddr(src.EmuAddr(), r, k, p.srcBlkStride, p.srcRepStride);
            ascend_emu::TrackRead(ascend_emu::kV, op, s0, 32, api);
            if (compute) std::memcpy(a + k * Geo::kPerBlock, ub + s0, 32);
        }
        for (uint32_t k = 0; k < 8; ++k) {
            if (!g.BlockActive(k)) continue;
            const uint32_t d = BlockAddr(dst.EmuAddr(), r, k, p.dstBlkStride, p.dstRepStride);
            ascend_emu::TrackWrite(ascend_emu::kV, op, d, 32, api);
            if (!compute) continue;
            T* out = reinterpret_cast<T*>(ub + d);
            for (uint32_t j = 0; j < Geo::kPerBlock; ++j) {
                const uint32_t e = k * Geo::kPerBlock + j;
                if (g.Active(e)) out[j] = Apply(a[e], scalar, f);
            }
        }
    }
}
}  // namespace emu_detail

// repeatTime is an int32_t here, not the API's uint8_t, as in the level-0 binary forms: an int count above 255
// that a kernel passes without a cast would wrap silently on the NPU; here CheckRepeat sees it.
template <typename T, bool isSetMask = true>
inline void Adds(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, uint64_t mask,
                 const int32_t repeatTime, const UnaryRepeatParams& repeatParams)
{
    static_assert(emu_detail::kArithType<T>, "Adds: dav-2201 supports int16_t, half, int32_t, float");
    ASCEND_EMU_MASK_SET_INSIDE(isSetMask);
    emu_detail::ScalarRepeat(dst, src, scalarValue, mask, 0, false, repeatTime, repeatParams, "Adds",
                             [](auto a, auto b) { return a + b; });
}

template <typename T, bool isSetMask = true>
inline void Adds(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, uint64_t mask[],
                 const int32_t repeatTime, const UnaryRepeatParams& repeatParams)
{
    static_assert(emu_detail::kArithType<T>, "Adds: dav-2201 supports int16_t, half, int32_t, float");
    ASCEND_EMU_MASK_SET_INSIDE(isSetMask);
    emu_detail::ScalarRepeat(dst, src, scalarValue, mask[0], mask[1], true, repeatTime, repeatParams, "Adds",
                             [](auto a, auto b) { return a + b; });
}

template <typename T>
inline void Muls(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count)
{
    static_assert(emu_detail::kArithType<T>, "Muls: dav-2201 supports int16_t, half, int32_t, float");
    emu_detail::Scalar(dst, src, scalarValue, count, "Muls", [](auto a, auto b) { return a * b; });
}

template <typename T>
inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count)
{
    static_assert(emu_detail::kOneOf<T, int16_t, uint16_t, half, bfloat16_t, int32_t, uint32_t, float>,
                  "Duplicate: dav-2201 supports int16_t, uint16_t, half, bfloat16_t, int32_t, uint32_t, float");
    emu_detail::CheckCount(count, "Duplicate");
    dst.EmuCheckOperand(count, "Duplicate", "dst");
    uint32_t op = ascend_emu::BeginOp(ascend_emu::kV);
    ascend_emu::TrackWrite(ascend_emu::kV, op, dst.EmuAddr(), static_cast<uint32_t>(count * sizeof(T)), "Duplicate");
    ascend_emu::perf::VectorBytes("Duplicate", static_cast<uint64_t>(count) * sizeof(T), static_cast<uint64_t>(count));
    if (ascend_emu::perf::SkipCompute()) return;
    T* d = dst.EmuData();
    for (int32_t i = 0; i < count; ++i) d[i] = scalarValue;
}

namespace emu_detail {

inline ascend_emu::Rounding ToRounding(RoundMode m)
{
    switch (m) {
        case RoundMode::CAST_FLOOR: return ascend_emu::Rounding::kFloor;
        case RoundMode::CAST_CEIL: return ascend_emu::Rounding::kCeil;
        case RoundMode::CAST_ROUND: return ascend_emu::Rounding::kRound;
        case RoundMode::CAST_TRUNC: return ascend_emu::Rounding::kTrunc;
        case RoundMode::CAST_ODD: return ascend_emu::Rounding::kOdd;
        default: return ascend_emu::Rounding::kRint;
    }
}

inline const char* ModeName(RoundMode m)
{
    static const char* names[] = {"CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL",
                                  "CAST_ROUND", "CAST_TRUNC", "CAST_ODD", "CAST_HYBRID"};
    return names[static_cast<int>(m)];
}

// A2/A3 legal (dst, src, mode) combinations of the vector Cast (Cast.md, the Atlas A2 table).
template <typename D, typename S>
inline void CheckCastMode(RoundMode m)
{
    bool ok;
    const char* rule;
    if constexpr (std::is_same<D, float>::value && (kOneOf<S, half, bfloat16_t>)) {
        ok = m == RoundMode::CAST_NONE;
        rule = "a widening cast to float takes CAST_NONE only";
    } else if constexpr (std::is_same<D, bfloat16_t>::value && std::is_same<S, float>::value) {
        ok = m != RoundMode::CAST_NONE && m != RoundMode::CAST_ODD && m != RoundMode::CAST_HYBRID;
        rule = "float->bfloat16_t takes RINT/FLOOR/CEIL/ROUND/TRUNC; with CAST_NONE or CAST_ODD a release build "
               "writes nothing at all";
    } else if constexpr (std::is_same<D, half>::value && std::is_same<S, float>::value) {
        ok = m != RoundMode::CAST_HYBRID;
        rule = "float->half takes NONE/RINT/FLOOR/CEIL/ROUND/TRUNC/ODD";
    } else if constexpr (std::is_same<D, float>::value && std::is_same<S, int32_t>::value) {
        ok = m != RoundMode::CAST_ODD && m != RoundMode::CAST_HYBRID;
        rule = "int32_t->float takes NONE/RINT/FLOOR/CEIL/ROUND/TRUNC";
    } else if constexpr (std::is_same<D, int32_t>::value && std::is_same<S, float>::value) {
        ok = m != RoundMode::CAST_NONE && m != RoundMode::CAST_ODD && m != RoundMode::CAST_HYBRID;
        rule = "float->int32_t takes RINT/FLOOR/CEIL/ROUND/TRUNC";
    } else {
        static_assert(sizeof(D) == 0,
                      "Cast: this (dst, src) pair is not supported on dav-2201 (no direct bf16<->fp16; see Cast.md)");
    }
    if (!ok) {
        ascend_emu::Fail("cast mode", ascend_emu::Fmt("Cast with %s: %s", ModeName(m), rule), ascend_emu::doc::kCast);
    }
}

// What the vector unit writes for a NaN it narrows to 16 bits outside saturation mode: neither
// asc-devkit's Cast docs nor its dav_c220 implementation (vconv_f322f16r, vconv_f322bf16r) say, so the
// emulation writes a NaN no kernel may pass on: the sign set and every payload bit, never the canonical
// one. A 16-bit output's canonical NaN is selected after its cast (common/numerics.h CanonCast).
constexpr uint16_t kNarrowedNanBits = 0xFFFFu;

template <typename D, typename S>
inline D ConvertOne(S v, RoundMode m, bool saturate)
{
    if constexpr (kOneOf<D, half, bfloat16_t> && std::is_same<S, float>::value) {
        if (!saturate && std::isnan(v)) return D::FromBits(kNarrowedNanBits);
    }
    if constexpr (std::is_same<D, float>::value && !std::is_same<S, int32_t>::value) {
        // exact widening; a NaN is only "nan" in 表32 (附录/Memory矢量计算接口边界值汇总.md, half and
        // bfloat16_t to float, either mode), its bits the device's: poisoned as arithmetic's are (Apply)
        const float w = static_cast<float>(v);
        return w == w ? w : ascend_emu::BitsF32(kArithNanBits);
    } else if constexpr (std::is_same<D, half>::value) {
        return half::FromBits(ascend_emu::NarrowFloat(v, 5, 10, ToRounding(m), saturate));
    } else if constexpr (std::is_same<D, bfloat16_t>::value) {
        return bfloat16_t::FromBits(ascend_emu::NarrowFloat(v, 8, 7, ToRounding(m), saturate));
    } else if constexpr (std::is_same<D, float>::value) {  // int32 -> float
        const double d = static_cast<double>(v);
        const float nearest = static_cast<float>(d);  // RNE, as the C conversion does
        if (static_cast<double>(nearest) == d || m == RoundMode::CAST_NONE || m == RoundMode::CAST_RINT) {
            return nearest;
        }
        const float down = static_cast<double>(nearest) > d ? std::nextafter(nearest, -INFINITY) : nearest;
        const float up = std::nextafter(down, INFINITY);
        const double to_down = d - down, to_up = up - d;
        switch (m) {
            case RoundMode::CAST_FLOOR: return down;
            case RoundMode::CAST_CEIL: return up;
            case RoundMode::CAST_TRUNC: return d > 0 ? down : up;
            default:  // CAST_ROUND: nearest, ties away from zero
                return to_down < to_up ? down : (to_up < to_down ? up : (d > 0 ? up : down));
        }
    } else {  // float -> int32
        double d = static_cast<double>(v);
        double r;
        switch (m) {
            case RoundMode::CAST_FLOOR: r = std::floor(d); break;
            case RoundMode::CAST_CEIL: r = std::ceil(d); break;
            case RoundMode::CAST_TRUNC: r = std::trunc(d); break;
            case RoundMode::CAST_ROUND: r = std::round(d); break;
            default: r = std::nearbyint(d); break;
        }
        if (std::isnan(r)) return 0;
        r = std::min(std::max(r, -2147483648.0), 2147483647.0);
        return static_cast<int32_t>(r);
    }
}

} // namespace emu_detail

template <typename T, typename U>
inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& roundMode, const uint32_t count)
{
    emu_detail::CheckCastMode<T, U>(roundMode);
    dst.EmuCheckOperand(count, "Cast", "dst");
    src.EmuCheckOperand(count, "Cast", "src");
    const uint32_t dbytes = count * sizeof(T), sbytes = count * sizeof(U);
    if (sizeof(T) > sizeof(U) && emu_detail::Overlap(dst.EmuAddr(), dbytes, src.EmuAddr(), sbytes)) {
        ascend_emu::Fail("operand overlap", "Cast: a widening cast must not write over its source (not in place)",
                         ascend_emu::doc::kCast);
    }
    if (sizeof(T) < sizeof(U) && emu_detail::Overlap(dst.EmuAddr(), dbytes, src.EmuAddr(), sbytes)) {
        // a repeat reads 256 bytes of src and writes fewer of dst: in place, they overlap in part
        ascend_emu::Fail("operand overlap", "Cast: a narrowing cast must not write over its source (not in place)",
                         ascend_emu::doc::kOverlap);
    }
    if (sizeof(T) == sizeof(U) && dst.EmuAddr() != src.EmuAddr() &&
        emu_detail::Overlap(dst.EmuAddr(), dbytes, src.EmuAddr(), sbytes)) {
        ascend_emu::Fail("operand overlap", "Cast: dst and src partially overlap", ascend_emu::doc::kOverlap);
    }
    const bool saturate = emu_detail::Saturating();
    uint32_t op = ascend_emu::BeginOp(ascend_emu::kV);
    ascend_emu::TrackRead(ascend_emu::kV, op, src.EmuAddr(), sbytes, "Cast");
    ascend_emu::TrackWrite(ascend_emu::kV, op, dst.EmuAddr(), dbytes, "Cast");
    // A cast runs at the width of its wider type (64 fp32 elements per repeat for bf16 <-> fp32).
    ascend_emu::perf::VectorBytes("Cast", dbytes > sbytes ? dbytes : sbytes, count);
    if (ascend_emu::perf::SkipCompute()) return;
    const U* s = src.EmuData();
    T* d = dst.EmuData();
    for (uint32_t i = 0; i < count; ++i) d[i] = emu_detail::ConvertOne<T, U>(s[i], roundMode, saturate);
}

// =============================================================================================
// Compare / Compares / Select: NaN canonicalisation and the rstd = +0 rule of the kernels.
// A comparison writes one bit per element (element i -> bit i%8 of byte i/8); Select reads the
// same layout. The count form compares only whole 256-byte repeats (Compare.md, Compares.md:
// "count个元素所占空间256字节对齐"), so here a count that is not a multiple is a fatal error.
// =============================================================================================
enum class CMPMODE : uint8_t { LT = 0, GT, EQ, LE, GE, NE };
enum class SELMODE : uint8_t { VSEL_CMPMASK_SPR = 0, VSEL_TENSOR_SCALAR_MODE, VSEL_TENSOR_TENSOR_MODE };

namespace emu_detail {

// A comparison with a NaN operand gives 0 in every mode, NE included: A2/A3's boundary-value tables
// (asc-devkit docs/zh/api/附录/Memory矢量计算接口边界值汇总.md, 表30 Compare and 表31 Compares, and the
// notes below them) give 0 for NE with a NaN on either side, half and float, where IEEE's unordered
// "not equal" gives 1. The kernels' NaN tests (x == x) rest on EQ's 0; the rstd chain finds +inf with
// EQ and Not (kernels/common/numerics.h RstdStep), since NE on a would turn a NaN row's rstd into +0.
template <typename T>
inline bool CompareOne(T a, T b, CMPMODE m)
{
    const float x = static_cast<float>(a), y = static_cast<float>(b);  // exact for half and float
    if constexpr (std::is_same<T, int32_t>::value) {
        return a == b;  // int32 supports EQ only (checked by the caller)
    } else {
        switch (m) {
            case CMPMODE::LT: return x < y;
            case CMPMODE::GT: return x > y;
            case CMPMODE::EQ: return x == y;
            case CMPMODE::LE: return x <= y;
            case CMPMODE::GE: return x >= y;
            default: return x == x && y == y && x != y;  // NE: 0 with a NaN operand, not IEEE's 1 (above)
        }
    }
}

inline std::string Fmt2(const char* fmt, const char* api) { return ascend_emu::Fmt(fmt, api); }

template <typename T, typename U>
inline void CheckCompare(const LocalTensor<U>& dst, CMPMODE mode, uint32_t count, const char* api, const char* page)
{
    static_assert(kOneOf<T, half, float, int32_t>, "Compare/Compares: dav-2201 supports half, float, int32_t");
    static_assert(kOneOf<U, uint8_t, int8_t>, "Compare/Compares: the result tensor is uint8_t or int8_t");
    if (std::is_same<T, int32_t>::value && mode != CMPMODE::EQ) {
        ascend_emu::Fail("operand type", Fmt2("%s: int32_t compares with CMPMODE::EQ only", api), page);
    }
    if ((static_cast<uint64_t>(count) * sizeof(T)) % ascend_emu::kRepeatBytes != 0) {
        ascend_emu::Fail("repeat range",
                         ascend_emu::Fmt("%s: count %u elements = %llu bytes, not a multiple of 256; the hardware "
                                         "compares whole repeats only and leaves the rest of dst unwritten",
                                         api, count, static_cast<unsigned long long>(count) * sizeof(T)),
                         page);
    }
    dst.EmuCheckOperand((count + 8 * sizeof(U) - 1) / (8 * sizeof(U)), api, "dst");
}

// dav-c220 issues a count-form Compare/Compares as one vcmpv(s) per 252 repeats and one more of the rest,
// issued even when the rest is empty (asc-devkit impl/basic_api/dav_c220/kernel_operator_vec_cmp_impl.h,
// CompareCompute): so many instructions for the perf model, the caller's BeginOp the first of them.
// count is whole repeats (CheckCompare).
inline void RecordCompare(const char* api, uint32_t bytes, uint32_t count)
{
    constexpr uint32_t kRepeatsPerInstr = 252;
    const uint32_t repeats = bytes / ascend_emu::kRepeatBytes, per = repeats ? count / repeats : 0;
    for (uint32_t left = repeats; left >= kRepeatsPerInstr; left -= kRepeatsPerInstr) {
        ascend_emu::perf::VectorBytes(api, kRepeatsPerInstr * ascend_emu::kRepeatBytes, kRepeatsPerInstr * per);
        ascend_emu::BeginOp(ascend_emu::kV);  // the next instruction of the same call
    }
    const uint32_t rest = repeats % kRepeatsPerInstr;
    ascend_emu::perf::VectorBytes(api, rest * ascend_emu::kRepeatBytes, rest * per);
}

template <typename U>
inline void WriteBits(const LocalTensor<U>& dst, uint32_t count, const std::vector<uint8_t>& bits)
{
    uint8_t* d = reinterpret_cast<uint8_t*>(dst.EmuData());
    for (uint32_t i = 0; i < (count + 7) / 8; ++i) d[i] = 0;
    for (uint32_t i = 0; i < count; ++i)
        if (bits[i]) d[i / 8] = static_cast<uint8_t>(d[i / 8] | (1u << (i % 8)));
}

// A Compare or Compares of source elements nothing of this kernel wrote compares whatever the UB held (on
// an NPU, an earlier kernel's bytes): the bits it writes for them are indeterminate, where the poison fill,
// a NaN, would compare to a definite 0. The emulation's marks are per byte, so a mask byte is marked when
// all eight of its elements read such bytes; a Select over it poisons them (Vsel). A byte whose bits are
// only partly indeterminate stays defined: marking it would poison its compared elements too. src1:
// Compare's second tensor, or nullptr (Compares' scalar).
template <typename T, typename U>
inline void MarkUndefinedBits(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const LocalTensor<T>* src1,
                              uint32_t count)
{
    const uint32_t bytes = count * static_cast<uint32_t>(sizeof(T));
    if (!ascend_emu::AnyUndefined(src0.EmuAddr(), bytes) &&
        (src1 == nullptr || !ascend_emu::AnyUndefined(src1->EmuAddr(), bytes))) {
        return;
    }
    auto undefined = [&](uint32_t i) {
        const uint32_t at = i * static_cast<uint32_t>(sizeof(T));
        return ascend_emu::AnyUndefined(src0.EmuAddr() + at, sizeof(T)) ||
               (src1 != nullptr && ascend_emu::AnyUndefined(src1->EmuAddr() + at, sizeof(T)));
    };
    for (uint32_t j = 0; j < count / 8; ++j) {
        bool all = true;
        for (uint32_t k = 0; k < 8 && all; ++k) all = undefined(8 * j + k);
        if (all) ascend_emu::MarkDefined(dst.EmuAddr() + j, 1, false);
    }
}

} // namespace emu_detail

// Compare and Compares compare every element of every repeat whatever vector mask a level-0
// instruction left: on A2/A3 their mask is a reserved parameter that has no effect (Compare.md and
// Compares.md, "mask/mask[]参数说明"; 附录/Mask接口汇总.md: the count form 接口不支持Mask), which is why
// dav_c220's CompareCompute issues vcmpv with MASK_PLACEHOLDER and sets no mask.
template <typename T, typename U>
inline void Compare(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, CMPMODE cmpMode,
                    uint32_t count)
{
    const char* api = "Compare";
    emu_detail::CheckCompare<T, U>(dst, cmpMode, count, api, ascend_emu::doc::kCompare);
    src0.EmuCheckOperand(count, api, "src0");
    src1.EmuCheckOperand(count, api, "src1");
    const uint32_t bytes = count * sizeof(T), mbytes = count / 8;
    emu_detail::CheckCompareDisjoint(dst.EmuAddr(), mbytes, src0.EmuAddr(), bytes, api, ascend_emu::doc::kCompare);
    emu_detail::CheckCompareDisjoint(dst.EmuAddr(), mbytes, src1.EmuAddr(), bytes, api, ascend_emu::doc::kCompare);
    uint32_t op = ascend_emu::BeginOp(ascend_emu::kV);
    ascend_emu::TrackRead(ascend_emu::kV, op, src0.EmuAddr(), bytes, api);
    ascend_emu::TrackRead(ascend_emu::kV, op, src1.EmuAddr(), bytes, api);
    ascend_emu::TrackWrite(ascend_emu::kV, op, dst.EmuAddr(), mbytes, api);
    emu_detail::RecordCompare("Compare", bytes, count);
    if (ascend_emu::perf::SkipCompute()) return;
    std::vector<uint8_t> bits(count);
    const T* a = src0.EmuData();
    const T* b = src1.EmuData();
    for (uint32_t i = 0; i < count; ++i) bits[i] = emu_detail::CompareOne(a[i], b[i], cmpMode);
    emu_detail::WriteBits(dst, count, bits);
    emu_detail::MarkUndefinedBits(dst, src0, &src1, count);
}

template <typename T, typename U>
inline void Compares(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const T src1Scalar, CMPMODE cmpMode,
                     uint32_t count)
{
    static_assert(std::is_same<U, uint8_t>::value, "Compares: dav-2201 takes a uint8_t result (CheckVcmpvsDtype)");
    const char* api = "Compares";
    emu_detail::CheckCompare<T, U>(dst, cmpMode, count, api, ascend_emu::doc::kCompares);
    src0.EmuCheckOperand(count, api, "src0");
    const uint32_t bytes = count * sizeof(T), mbytes = count / 8;
    emu_detail::CheckCompareDisjoint(dst.EmuAddr(), mbytes, src0.EmuAddr(), bytes, api, ascend_emu::doc::kCompares);
    uint32_t op = ascend_emu::BeginOp(ascend_emu::kV);
    ascend_emu::TrackRead(ascend_emu::kV, op, src0.EmuAddr(), bytes, api);
    ascend_emu::TrackWrite(ascend_emu::kV, op, dst.EmuAddr(), mbytes, api);
    emu_detail::RecordCompare("Compares", bytes, count);
    if (ascend_emu::perf::SkipCompute()) return;
    std::vector<uint8_t> bits(count);
    const T* a = src0.EmuData();
    for (uint32_t i = 0; i < count; ++i) bits[i] = emu_detail::CompareOne(a[i], src1Scalar, cmpMode);
    emu_detail::WriteBits(dst, count, bits);
    emu_detail::MarkUndefinedBits(dst, src0, static_cast<const LocalTensor<T>*>(nullptr), count);
}

// The deprecated name (CANN 8.0-8.3 know only this one): the same instruction.
template <typename T, typename U>
inline void CompareScalar(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const T src1Scalar, CMPMODE cmpMode,
                          uint32_t count)
{
    Compares(dst, src0, src1Scalar, cmpMode, count);
}

namespace emu_detail {
// The operand rules of a vsel over count elements (src1: the tensor of mode 2, else nullptr).
template <typename T, typename U>
inline void CheckVselOperands(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
                              const LocalTensor<T>* src1, uint32_t count)
{
    const char* api = "Select";
    static_assert(kOneOf<T, half, float>, "Select: dav-2201 supports half and float");
    static_assert(kOneOf<U, uint8_t, uint16_t, uint32_t, uint64_t>, "Select: selMask is uint8/16/32/64_t");
    dst.EmuCheckOperand(count, api, "dst");
    src0.EmuCheckOperand(count, api, "src0");
    if (src1 != nullptr) src1->EmuCheckOperand(count, api, "src1");
    const uint32_t mbytes = (count + 7) / 8, bytes = count * sizeof(T);
    selMask.EmuCheckOperand((mbytes + sizeof(U) - 1) / sizeof(U), api, "selMask");
    CheckAlias(dst.EmuAddr(), src0.EmuAddr(), bytes, api);
    if (src1 != nullptr) CheckAlias(dst.EmuAddr(), src1->EmuAddr(), bytes, api);
    if (Overlap(dst.EmuAddr(), bytes, selMask.EmuAddr(), mbytes)) {
        ascend_emu::Fail("operand overlap", "Select: dst overlaps selMask", ascend_emu::doc::kOverlap);
    }
}

// The vsel itself, V op `op`, reading the compare-mask register: dst[i] is src0[i] where bit i of
// selMask is 1, else src1[i] (mode 2) or `scalar`.
template <typename T, typename U>
inline void Vsel(uint32_t op, const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
                 const LocalTensor<T>* src1, T scalar, uint32_t count)
{
    const char* api = "Select";
    const uint32_t mbytes = (count + 7) / 8, bytes = count * sizeof(T);
    ascend_emu::TrackRead(ascend_emu::kV, op, selMask.EmuAddr(), mbytes, api);
    ascend_emu::TrackRead(ascend_emu::kV, op, src0.EmuAddr(), bytes, api);
    if (src1 != nullptr) ascend_emu::TrackRead(ascend_emu::kV, op, src1->EmuAddr(), bytes, api);
    ascend_emu::TrackWrite(ascend_emu::kV, op, dst.EmuAddr(), bytes, api);
    ascend_emu::perf::VectorBytes("Select", bytes, count);
    ascend_emu::State().cmpmask_read_seq = op;
    if (ascend_emu::perf::SkipCompute()) return;
    const uint8_t* m = reinterpret_cast<const uint8_t*>(selMask.EmuData());
    const T* a = src0.EmuData();
    const T* b = src1 != nullptr ? src1->EmuData() : nullptr;
    T* d = dst.EmuData();
    for (uint32_t i = 0; i < count; ++i) d[i] = ((m[i / 8] >> (i % 8)) & 1u) ? a[i] : (b != nullptr ? b[i] : scalar);
    // a mask byte nothing of this kernel wrote holds what the UB held before (on an NPU, an earlier
    // kernel's bytes): its elements are indeterminate, poisoned (the fill, all ones, would keep src0), and
    // marked so, as the bytes nothing wrote are: a Compare of them is indeterminate too (MarkUndefinedBits)
    for (uint32_t i = 0; i < count; ++i) {
        if (!ascend_emu::Undefined(selMask.EmuAddr() + i / 8)) continue;
        std::memset(&d[i], 0xFF, sizeof(T));
        ascend_emu::MarkDefined(dst.EmuAddr() + i * static_cast<uint32_t>(sizeof(T)), sizeof(T), false);
    }
}

template <typename T, typename U>
inline void SelectCommon(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
                         const LocalTensor<T>* src1, T scalar, SELMODE selMode, uint32_t count)
{
    if (selMode == SELMODE::VSEL_CMPMASK_SPR) {
        ascend_emu::Fail("select mode",
                         "Select with VSEL_CMPMASK_SPR reuses the first 256/sizeof(T) mask bits for every repeat; the "
                         "kernels use modes 1 and 2 only (the emulation does not model mode 0)",
                         ascend_emu::doc::kSelect);
    }
    if ((src1 == nullptr) != (selMode == SELMODE::VSEL_TENSOR_SCALAR_MODE)) {
        ascend_emu::Fail("select mode", "Select: a scalar src1 needs VSEL_TENSOR_SCALAR_MODE, a tensor src1 mode 2",
                         ascend_emu::doc::kSelect);
    }
    CheckVselOperands(dst, selMask, src0, src1, count);
    // Modes 1 and 2 first put a 32-byte block at TMP_UB_OFFSET (the scalar, or the mask's address) with
    // a vector Duplicate and load the compare-mask register from it (asc-devkit
    // impl/basic_api/dav_c220/kernel_operator_vec_cmpsel_impl.h VselImpl): that block is Ascend C's
    // reserved UB, which no buffer of the TPipe may reach (the UB budget leaves it out).
    if (ascend_emu::State().ub_peak > ascend_emu::kTmpUbOffset) {
        ascend_emu::Fail("Select temp",
                         ascend_emu::Fmt("Select (mode %d) writes a 32-byte temp at UB byte %u (TMP_UB_OFFSET), "
                                         "inside the %u bytes this kernel's TPipe reserved",
                                         static_cast<int>(selMode), ascend_emu::kTmpUbOffset, ascend_emu::State().ub_peak),
                         ascend_emu::doc::kSelect);
    }
    // The count form on dav-c220 (VselImpl, as above) is five steps on the vector pipe, modelled one
    // for one: the Duplicate into the temp block, PipeBarrier<PIPE_V>, set_cmpmask from it,
    // PipeBarrier<PIPE_V>, vsel; mode 2 ends with one more PipeBarrier<PIPE_V>. Its barriers order the
    // vsel after every vector instruction issued before the Select, as they do on the device.
    const uint32_t dup = ascend_emu::BeginOp(ascend_emu::kV);
    const uint32_t temp = ascend_emu::kBlockBytes * sizeof(T);  // ONE_BLK_SIZE (32) elements
    ascend_emu::TrackWrite(ascend_emu::kV, dup, ascend_emu::kTmpUbOffset, temp, "Select temp");
    ascend_emu::perf::VectorBytes("Duplicate", temp, ascend_emu::kBlockBytes);
    PipeBarrier<PIPE_V>();
    const uint32_t cmpmask = ascend_emu::BeginOp(ascend_emu::kV);
    ascend_emu::TrackRead(ascend_emu::kV, cmpmask, ascend_emu::kTmpUbOffset, ascend_emu::kBlockBytes, "Select temp");
    ascend_emu::perf::VectorBytes("set_cmpmask", ascend_emu::kBlockBytes, ascend_emu::kBlockBytes / 4);
    uint8_t held[16] = {};  // the register now holds the scalar (mode 2: an address)
    std::memcpy(held, &scalar, sizeof(T));
    ascend_emu::LoadCmpMask(cmpmask, selMode == SELMODE::VSEL_TENSOR_SCALAR_MODE ? held : nullptr);
    PipeBarrier<PIPE_V>();
    Vsel(ascend_emu::BeginOp(ascend_emu::kV), dst, selMask, src0, src1, scalar, count);
    if (selMode == SELMODE::VSEL_TENSOR_TENSOR_MODE) PipeBarrier<PIPE_V>();
}
} // namespace emu_detail

// Select needs Ascend C's reserved UB (its temp above): with the reserved 8 KB given to the kernel
// (--cce-disable-asc-reserved-ubuf, ASCEND_RMSNORM_EMU_NO_RESERVED_UB here) asc-devkit refuses to
// compile it (__ASC_USE_RESERVED_UBUF__(2201, ...) in include/basic_api/kernel_operator_vec_cmpsel_intf.h).
#if defined(ASCEND_RMSNORM_EMU_NO_RESERVED_UB)
#define ASCEND_EMU_SELECT_ALLOWED(T) \
    static_assert(sizeof(T) == 0, "Select is forbidden when compile option --cce-disable-asc-reserved-ubuf is enabled")
#else
#define ASCEND_EMU_SELECT_ALLOWED(T)
#endif

// Mode 1: bit 1 takes src0[i], bit 0 the scalar.
template <typename T, typename U>
inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0, T src1,
                   SELMODE selMode, uint32_t count)
{
    ASCEND_EMU_SELECT_ALLOWED(T);
    emu_detail::SelectCommon(dst, selMask, src0, static_cast<const LocalTensor<T>*>(nullptr), src1, selMode, count);
}

// Mode 2: bit 1 takes src0[i], bit 0 src1[i].
template <typename T, typename U>
inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
                   const LocalTensor<T>& src1, SELMODE selMode, uint32_t count)
{
    ASCEND_EMU_SELECT_ALLOWED(T);
    emu_detail::SelectCommon(dst, selMask, src0, &src1, T(), selMode, count);
}

// ---- the register form: SetCmpMask once, then Select without a scalar --------------------------
// Mode 1 of Select may take its scalar from the compare-mask register as it stands: SetCmpMask loads it
// from UB (16-byte aligned), and the Select without a scalar or mask issues the vsel alone under the
// vector mask as it stands (asc-devkit impl/basic_api/dav_c220/kernel_operator_vec_cmpsel_impl.h
// SelectCal; docs SetCmpMask(ISASI).md). The kernels run it as the count form runs its own vsel: counter
// mode, SetVectorMask<T, MaskMode::COUNTER>(0, count), repeatTime 1, the default strides, then back to
// normal mode. The emulation models that use and aborts on any other: a register never loaded or
// holding an address, no PipeBarrier<PIPE_V> between SetCmpMask and a Select that reads the register or
// between such a Select and the next SetCmpMask, no count set since the last vector instruction.
constexpr const char* kSetCmpMaskDoc = "docs/zh/api/SIMD-API/基础API/Memory矢量计算/比较与选择/SetCmpMask(ISASI).md";

enum class MaskMode : uint8_t { NORMAL = 0, COUNTER };

inline void SetMaskCount() { ascend_emu::State().vmask_counter = true; }
inline void SetMaskNorm() { ascend_emu::State().vmask_counter = false; }
// ResetMask sets every bit of the mask register (asc-devkit impl/basic_api/kernel_reg.h ResetMaskImpl:
// set_vector_mask(FULL_MASK, FULL_MASK)). In normal mode that is every lane, which no API of the emulation
// reads; in counter mode the low 64 bits are the element count (掩码.md, Counter模式), so a register-form
// Select after it, before a SetVectorMask, would run over 2^64 - 1 elements: it sees that count.
inline void ResetMask()
{
    ascend_emu::BlockState& s = ascend_emu::State();
    s.vmask_count = ~0ull;
    s.vmask_count_set = true;
}

template <typename T, MaskMode mode = MaskMode::NORMAL>
inline void SetVectorMask(const uint64_t maskHigh, const uint64_t maskLow)
{
    static_assert(mode == MaskMode::COUNTER, "SetVectorMask: the emulation models the counter mode only");
    ascend_emu::BlockState& s = ascend_emu::State();
    if (!s.vmask_counter || maskHigh != 0) {
        ascend_emu::Fail("vector mask",
                         !s.vmask_counter ? "SetVectorMask<T, MaskMode::COUNTER> outside counter mode: SetMaskCount() first"
                                          : "SetVectorMask in counter mode: the count goes in maskLow, maskHigh 0",
                         ascend_emu::doc::kMask);
    }
    s.vmask_count = maskLow;
    s.vmask_count_set = true;
}

template <typename T>
inline void SetCmpMask(const LocalTensor<T>& src)
{
    static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "SetCmpMask: b8/b16/b32/b64");
    ascend_emu::BlockState& s = ascend_emu::State();
    if (src.EmuAddr() % 16 != 0) {
        ascend_emu::Fail("UB alignment", ascend_emu::Fmt("SetCmpMask: src at UB byte %u is not 16-byte aligned", src.EmuAddr()),
                         kSetCmpMaskDoc);
    }
    if (static_cast<uint64_t>(src.GetSize()) * sizeof(T) < 16) {
        ascend_emu::Fail("LocalTensor bounds", "SetCmpMask: src holds fewer than the register's 16 bytes", kSetCmpMaskDoc);
    }
    if (s.cmpmask_read_seq > s.clock[ascend_emu::kV][ascend_emu::kV] && !s.autosync) {
        ascend_emu::Fail("pipe sync (V->V)",
                         "SetCmpMask loads the compare-mask register while a Select issued before it may still read "
                         "it: PipeBarrier<PIPE_V>() in between",
                         ascend_emu::doc::kPipeBarrier);
    }
    const uint32_t op = ascend_emu::VectorOpKeepingMask();  // set_cmpmask sets no vector mask
    ascend_emu::TrackRead(ascend_emu::kV, op, src.EmuAddr(), 16, "SetCmpMask");
    ascend_emu::perf::VectorBytes("set_cmpmask", ascend_emu::kBlockBytes, ascend_emu::kBlockBytes / 4);
    ascend_emu::LoadCmpMask(op, s.ub + src.EmuAddr());
}

// Mode 1 from the register, in counter mode: element i < count (SetVectorMask's) is src0[i] where bit i
// of selMask is 1, else the register's first T. repeatTime is an int32_t here, not the API's uint8_t (as
// Adds' level-0 form): a count of 257 would wrap to 1 on the NPU and pass the check below.
template <typename T, typename U>
inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0, int32_t repeatTime,
                   const BinaryRepeatParams& repeatParams)
{
    ASCEND_EMU_SELECT_ALLOWED(T);
    ascend_emu::BlockState& s = ascend_emu::State();
    const BinaryRepeatParams& p = repeatParams;
    if (p.dstBlkStride != 1 || p.src0BlkStride != 1 || p.src1BlkStride != 1 || p.dstRepStride != 8 ||
        p.src0RepStride != 8 || p.src1RepStride != 8 || repeatTime != 1) {
        ascend_emu::Fail("repeat range",
                         "Select (register form): the emulation models counter mode with repeatTime 1 and the default "
                         "strides (1 and 8), as the count form issues its vsel",
                         ascend_emu::doc::kSelect);
    }
    if (!s.vmask_counter || !s.vmask_count_set) {
        ascend_emu::Fail("vector mask",
                         "Select (register form) runs under the vector mask as it stands: SetMaskCount() and "
                         "SetVectorMask<T, MaskMode::COUNTER>(0, count) after the last vector instruction before it",
                         ascend_emu::doc::kMask);
    }
    if (!s.cmpmask_value) {
        ascend_emu::Fail("compare mask",
                         s.cmpmask_seq == 0 ? "Select (register form) reads the compare-mask register before any "
                                              "SetCmpMask: it holds whatever the core left there"
                                            : "Select (register form) reads the compare-mask register after a mode-2 "
                                              "Select left an address in it",
                         kSetCmpMaskDoc);
    }
    if (s.clock[ascend_emu::kV][ascend_emu::kV] < s.cmpmask_seq && !s.autosync) {
        ascend_emu::Fail("pipe sync (V->V)",
                         "Select (register form) reads the compare-mask register that SetCmpMask loads with no "
                         "PipeBarrier<PIPE_V>() in between",
                         ascend_emu::doc::kPipeBarrier);
    }
    if (s.vmask_count == 0 || s.vmask_count > 0xFFFFFFFFull) {
        ascend_emu::Fail("repeat range", "Select (register form): a counter-mode count of 0 or above 32 bits",
                         ascend_emu::doc::kMask);
    }
    const uint32_t count = static_cast<uint32_t>(s.vmask_count);
    emu_detail::CheckVselOperands(dst, selMask, src0, static_cast<const LocalTensor<T>*>(nullptr), count);
    T scalar;
    std::memcpy(&scalar, s.cmpmask, sizeof(T));
    // the vsel alone: it sets no vector mask
    emu_detail::Vsel(ascend_emu::VectorOpKeepingMask(), dst, selMask, src0, static_cast<const LocalTensor<T>*>(nullptr),
                     scalar, count);
}

// =============================================================================================
// Gather: dst[i] = *(src + srcBaseAddr + srcOffset[i]) with byte offsets (Gather.md). The
// offsets must be element-aligned and stay inside src; src and dst may not share memory.
// Its throughput is 5 elements per cycle on A2/A3 (附录/Vector指令理论性能汇总.md 表15), so it
// reports that occupancy to the performance model, not 256-byte repeats.
// =============================================================================================
template <typename T>
inline void Gather(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint32_t>& srcOffset,
                   const uint32_t srcBaseAddr, const uint32_t count)
{
    const char* api = "Gather";
    static_assert(emu_detail::kOneOf<T, int16_t, uint16_t, half, bfloat16_t, int32_t, uint32_t, float>,
                  "Gather: dav-2201 supports int16_t, uint16_t, half, bfloat16_t, int32_t, uint32_t, float");
    dst.EmuCheckOperand(count, api, "dst");
    src.EmuCheckOperand(0, api, "src");  // aligned like every operand (CheckVectorTensor); offsets below
    srcOffset.EmuCheckOperand(count, api, "srcOffset");
    const uint32_t bytes = count * sizeof(T);
    if (emu_detail::Overlap(dst.EmuAddr(), bytes, src.EmuAddr(), src.GetLength()) ||
        emu_detail::Overlap(dst.EmuAddr(), bytes, srcOffset.EmuAddr(), count * 4u)) {
        ascend_emu::Fail("operand overlap", "Gather: dst shares memory with src or srcOffset", ascend_emu::doc::kGather);
    }
    // Level 2 on dav-2201 is one level-0 Gather of count / (256 / sizeof(T)) repeats, packed into a
    // uint8_t repeatTime, and one for the tail (asc-devkit impl/basic_api/kernel_operator_vec_gather_intf_impl.h):
    // from 256 repeats on the count wraps and the elements in between are never gathered.
    constexpr uint32_t per_repeat = ascend_emu::kRepeatBytes / sizeof(T);
    if (count / per_repeat > 255) {
        ascend_emu::Fail("repeat range",
                         ascend_emu::Fmt("Gather: count %u is %u repeats of %u elements; the level-2 form packs them "
                                         "into a uint8_t repeatTime (%u after the wrap): elements [%u, %u) would "
                                         "never be gathered",
                                         count, count / per_repeat, per_repeat, (count / per_repeat) % 256,
                                         (count / per_repeat) % 256 * per_repeat, count / per_repeat * per_repeat),
                         ascend_emu::doc::kGather);
    }
    if (srcBaseAddr % sizeof(T) != 0) {
        ascend_emu::Fail("UB alignment", ascend_emu::Fmt("Gather: srcBaseAddr %u is not element-aligned", srcBaseAddr),
                         ascend_emu::doc::kGather);
    }
    uint32_t op = ascend_emu::BeginOp(ascend_emu::kV);
    ascend_emu::TrackRead(ascend_emu::kV, op, srcOffset.EmuAddr(), count * 4u, api);
    // The offsets are data, and fast mode computes no data (they may be vector results): there the
    // bounds and the reads of src go unchecked; full mode checks them (the counts are the same).
    const uint32_t* off = srcOffset.EmuData();
    for (uint32_t i = 0; i < count && !ascend_emu::perf::SkipCompute(); ++i) {
        const uint64_t at = static_cast<uint64_t>(srcBaseAddr) + off[i];
        if (at % sizeof(T) != 0 || at + sizeof(T) > src.GetLength()) {
            ascend_emu::Fail("LocalTensor bounds",
                             ascend_emu::Fmt("Gather: element %u reads byte offset %llu of a %u-byte src (offsets must "
                                             "be element-aligned and inside src)",
                                             i, static_cast<unsigned long long>(at), src.GetLength()),
                             ascend_emu::doc::kGather);
        }
        ascend_emu::TrackRead(ascend_emu::kV, op, src.EmuAddr() + static_cast<uint32_t>(at), sizeof(T), api);
    }
    ascend_emu::TrackWrite(ascend_emu::kV, op, dst.EmuAddr(), bytes, api);
    ascend_emu::perf::Vector("Gather", (count + 4) / 5, count);
    if (ascend_emu::perf::SkipCompute()) return;
    std::vector<T> tmp(count);
    const uint8_t* base = reinterpret_cast<const uint8_t*>(src.EmuData());
    for (uint32_t i = 0; i < count; ++i) std::memcpy(&tmp[i], base + srcBaseAddr + off[i], sizeof(T));
    std::memcpy(dst.EmuData(), tmp.data(), bytes);
}

// =============================================================================================
// Brcb: each of 8*repeatTime source elements fills one 32-byte block of dst (Brcb.md).
// =============================================================================================
struct BrcbRepeatParams {
    BrcbRepeatParams() {}
    BrcbRepeatParams(const uint16_t dstBlkStrideIn, const uint16_t dstRepStrideIn)
        : dstRepStride(dstRepStrideIn), dstBlkStride(dstBlkStrideIn)
    {}
    uint32_t blockNumber = 8;
    uint16_t dstRepStride = 8;
    uint16_t dstBlkStride = 1;
};

// repeatTime is an int32_t here, not the API's uint8_t (as Adds' level-0 form above): checked, not wrapped.
template <typename T>
inline void Brcb(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t repeatTime,
                 const BrcbRepeatParams& repeatParams)
{
    const char* api = "Brcb";
    static_assert(emu_detail::kOneOf<T, int16_t, uint16_t, half, bfloat16_t, int32_t, uint32_t, float>,
                  "Brcb: dav-2201 supports int16_t, uint16_t, half, bfloat16_t, int32_t, uint32_t, float");
    emu_detail::CheckRepeat(repeatTime, api);  // Brcb.md: repeatTime ∈ [0, 255], an 8-bit field
    const uint32_t reps = static_cast<uint32_t>(repeatTime);
    if (repeatParams.dstBlkStride == 0) {
        ascend_emu::Fail("repeat range", "Brcb with dstBlkStride 0 (undefined)", ascend_emu::doc::kBrcb);
    }
    if (reps == 0) return;
    const uint32_t n = 8u * reps, per_block = ascend_emu::kBlockBytes / sizeof(T);
    src.EmuCheckOperand(n, api, "src");
    const uint64_t span =
        (static_cast<uint64_t>(reps - 1) * repeatParams.dstRepStride + 7u * repeatParams.dstBlkStride + 1) * 32u;
    dst.EmuCheckOperand(span / sizeof(T), api, "dst");
    if (emu_detail::Overlap(dst.EmuAddr(), static_cast<uint32_t>(span), src.EmuAddr(), n * sizeof(T))) {
        ascend_emu::Fail("operand overlap", "Brcb: src and dst share memory", ascend_emu::doc::kBrcb);
    }
    uint32_t op = ascend_emu::BeginOp(ascend_emu::kV);
    ascend_emu::TrackRead(ascend_emu::kV, op, src.EmuAddr(), n * sizeof(T), api);
    for (uint32_t i = 0; i < reps; ++i)
        for (uint32_t j = 0; j < 8; ++j)
            ascend_emu::TrackWrite(ascend_emu::kV, op,
                                   emu_detail::BlockAddr(dst.EmuAddr(), i, j, repeatParams.dstBlkStride,
                                                         repeatParams.dstRepStride),
                                   32, api);
    ascend_emu::perf::Vector("Brcb", reps, n * per_block);
    if (ascend_emu::perf::SkipCompute()) return;
    const T* s = src.EmuData();
    uint8_t* ub = ascend_emu::State().ub;
    for (uint32_t i = 0; i < reps; ++i) {
        for (uint32_t j = 0; j < 8; ++j) {
            T* d = reinterpret_cast<T*>(
                ub + emu_detail::BlockAddr(dst.EmuAddr(), i, j, repeatParams.dstBlkStride, repeatParams.dstRepStride));
            for (uint32_t e = 0; e < per_block; ++e) d[e] = s[i * 8 + j];
        }
    }
}

// Not, the count form (asc-devkit 逻辑计算/Not.md: dst_i = ~src_i, int16_t and uint16_t on A2/A3):
// the rstd chain flips its "+inf" mask with it, one bit per row, as 16-bit words.
template <typename T>
inline void Not(const LocalTensor<T>& dst, const LocalTensor<T>& src, const int32_t& count)
{
    static_assert(emu_detail::kOneOf<T, int16_t, uint16_t>, "Not: dav-2201 supports int16_t, uint16_t");
    // src's undefined marks before the write marks dst defined (in place they are the same bytes): the Not
    // of a mask byte nothing wrote is as indeterminate as it, not the 0 the poison fill flips to
    const std::vector<uint8_t> undefined =
        ascend_emu::UndefinedMarks(src.EmuAddr(), count > 0 ? static_cast<uint32_t>(count * sizeof(T)) : 0u);
    if (!emu_detail::UnaryOperands(dst, src, count, "Not")) return;
    T* d = dst.EmuData();
    const T* a = src.EmuData();
    for (int32_t i = 0; i < count; ++i) d[i] = static_cast<T>(~a[i]);
    ascend_emu::CarryUndefined(dst.EmuAddr(), undefined);
}

// =============================================================================================
// Integer helpers of the vector rstd: ShiftRight (logical for unsigned types, arithmetic for
// signed), CreateVecIndex, and the scalar Mins/Maxs.
// =============================================================================================
template <typename T, bool isSetMask = true>
inline void ShiftRight(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count)
{
    ASCEND_EMU_MASK_SET_INSIDE(isSetMask);
    static_assert(emu_detail::kOneOf<T, int16_t, uint16_t, int32_t, uint32_t>,
                  "ShiftRight: dav-2201 supports int16_t, uint16_t, int32_t, uint32_t");
    const int64_t bits = 8 * sizeof(T);
    if (static_cast<int64_t>(scalarValue) < 0 || static_cast<int64_t>(scalarValue) > bits) {
        ascend_emu::Fail("repeat range",
                         ascend_emu::Fmt("ShiftRight by %lld bits of a %lld-bit type", static_cast<long long>(scalarValue),
                                         static_cast<long long>(bits)),
                         ascend_emu::doc::kShift);
    }
    emu_detail::Scalar(dst, src, scalarValue, count, "ShiftRight", [](auto a, auto b) {
        using V = decltype(a);
        return static_cast<V>(static_cast<int64_t>(b) >= static_cast<int64_t>(8 * sizeof(V)) ? (a < 0 ? -1 : 0)
                                                                                              : (a >> b));
    });
}

// CreateVecIndex(dst, first, count), as dav-2201 implements it (asc-devkit
// impl/basic_api/dav_c220/kernel_operator_vec_createvecindex_impl.h, CreateVecIndexCalc): the first
// 32-byte block by scalar SetValue on PIPE_S, then its own S->V sync (FetchEventID(S_V), SetFlag,
// WaitFlag), then level-0 Adds block by block to the end of the first repeat and repeat by repeat
// after it, each but the last followed by PipeBarrier<PIPE_V>. So the scalar writes need whatever
// any earlier vector use of that block needs before a scalar write (V->S), and a TPipe must exist.
template <typename T>
inline void CreateVecIndex(LocalTensor<T> dst, const T& firstValue, uint32_t count)
{
    static_assert(emu_detail::kOneOf<T, int16_t, half, int32_t, float>,
                  "CreateVecIndex: dav-2201 supports int16_t, half, int32_t, float");
    emu_detail::CheckCount(count, "CreateVecIndex");
    dst.EmuCheckOperand(count, "CreateVecIndex", "dst");
    if (count == 0) return;
    if (GetTPipePtr() == nullptr) {
        ascend_emu::Fail("TPipe", "CreateVecIndex syncs S->V through GetTPipePtr()->FetchEventID: it needs a TPipe",
                         ascend_emu::doc::kVecIndex);
    }
    auto value = [&](uint32_t i) {
        if constexpr (std::is_integral<T>::value) {
            return static_cast<T>(static_cast<int64_t>(firstValue) + static_cast<int64_t>(i));
        } else {
            return static_cast<T>(static_cast<float>(firstValue) + static_cast<float>(i));
        }
    };
    constexpr uint32_t blk = ascend_emu::kBlockBytes / sizeof(T), rep = ascend_emu::kRepeatBytes / sizeof(T);
    const uint32_t first = count < blk ? count : blk;
    for (uint32_t i = 0; i < first; ++i) dst.SetValue(i, value(i));
    const event_t sv = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::S_V));
    SetFlag<HardEvent::S_V>(sv);
    WaitFlag<HardEvent::S_V>(sv);
    if (count <= blk) return;
    UnaryRepeatParams p;
    const uint32_t blocks = count >= rep ? 8 : count / blk;
    for (uint32_t i = 1; i < blocks; ++i) {
        Adds(dst[i * blk], dst[(i - 1) * blk], static_cast<T>(blk), blk, 1, p);
        PipeBarrier<PIPE_V>();
    }
    if (count < rep && count % blk != 0) {
        const uint32_t at = count / blk * blk;
        Adds(dst[at], dst[at - blk], static_cast<T>(blk), count % blk, 1, p);
        PipeBarrier<PIPE_V>();
    }
    if (count <= rep) return;
    for (uint32_t i = 1; i < count / rep; ++i) {
        Adds(dst[i * rep], dst[(i - 1) * rep], static_cast<T>(rep), rep, 1, p);
        PipeBarrier<PIPE_V>();
    }
    if (count % rep != 0) {
        const uint32_t at = count / rep * rep;
        Adds(dst[at], dst[at - rep], static_cast<T>(rep), count % rep, 1, p);
    }
}

template <typename T, bool isSetMask = true>
inline void Mins(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count)
{
    ASCEND_EMU_MASK_SET_INSIDE(isSetMask);
    static_assert(emu_detail::kArithType<T>, "Mins: dav-2201 supports int16_t, half, int32_t, float");
    emu_detail::Scalar(dst, src, scalarValue, count, "Mins", [](auto a, auto b) { return emu_detail::MinOf(a, b); });
}

template <typename T, bool isSetMask = true>
inline void Maxs(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count)
{
    ASCEND_EMU_MASK_SET_INSIDE(isSetMask);
    static_assert(emu_detail::kArithType<T>, "Maxs: dav-2201 supports int16_t, half, int32_t, float");
    emu_detail::Scalar(dst, src, scalarValue, count, "Maxs", [](auto a, auto b) { return emu_detail::MaxOf(a, b); });
}

} // namespace AscendC
