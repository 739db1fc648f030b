// Vector instructions of the emulation: element-exact arithmetic, Cast with each RoundMode,
// and the dav-2201 rules on operand types, alignment, overlap and repeat ranges.
#pragma once

#include <cmath>

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

// One arithmetic step in the element type: float math for float, one RNE rounding for half
// (the exact float result rounded once), wrap-around for integers.
template <typename T, typename F>
inline T Apply(T a, T b, F f)
{
    if constexpr (std::is_same<T, float>::value) {
        return f(a, b);
    } else if constexpr (std::is_same<T, half>::value) {
        return half(f(static_cast<float>(a), static_cast<float>(b)));
    } else {
        return static_cast<T>(f(static_cast<int64_t>(a), static_cast<int64_t>(b)));
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
    if (ascend_emu::perf::SkipCompute()) return;
    T* d = dst.EmuData();
    const T* a = src0.EmuData();
    const T* b = src1.EmuData();
    for (int64_t i = 0; i < count; ++i) d[i] = Apply(a[i], b[i], f);
}

template <typename T, typename F>
inline void Scalar(const LocalTensor<T>& dst, const LocalTensor<T>& src, T scalar, int64_t count, const char* api, F f)
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
    if (ascend_emu::perf::SkipCompute()) return;
    T* d = dst.EmuData();
    const T* a = src.EmuData();
    for (int64_t i = 0; i < count; ++i) d[i] = Apply(a[i], scalar, f);
}

// Level 0: `repeat` repeats of 8 blocks of 32 bytes, strides in blocks, a mask per repeat.
// Repeats run in order, reading then writing, which is what makes the documented
// accumulate idiom (dst == src1 with a zero repeat stride) work.
template <typename T, typename F>
inline void BinaryRepeat(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,
                         const uint64_t mask_lo, const uint64_t mask_hi, bool bitwise, int32_t repeat,
                         const BinaryRepeatParams& p, const char* api, F f)
{
    CheckRepeat(repeat, api);
    constexpr uint32_t per_block = ascend_emu::kBlockBytes / sizeof(T);
    constexpr uint32_t per_repeat = 8 * per_block;
    if (p.dstBlkStride == 0) {
        ascend_emu::Fail("repeat range", ascend_emu::Fmt("%s with dstBlkStride 0", api), ascend_emu::doc::kRepeat);
    }
    auto active = [&](uint32_t e) {
        if (!bitwise) return e < std::min<uint64_t>(mask_lo, per_repeat);
        return e < 64 ? ((mask_lo >> e) & 1u) != 0 : ((mask_hi >> (e - 64)) & 1u) != 0;
    };
    auto span = [&](uint8_t blk, uint8_t rep) {
        return static_cast<uint64_t>(repeat == 0 ? 0 : (repeat - 1) * rep + 7 * blk + 1) * ascend_emu::kBlockBytes;
    };
    if (repeat == 0) return;
    dst.EmuCheckOperand(span(p.dstBlkStride, p.dstRepStride) / sizeof(T), api, "dst");
    src0.EmuCheckOperand(span(p.src0BlkStride, p.src0RepStride) / sizeof(T), api, "src0");
    src1.EmuCheckOperand(span(p.src1BlkStride, p.src1RepStride) / sizeof(T), api, "src1");
    const bool accumulate = dst.EmuAddr() == src1.EmuAddr() && (p.src1RepStride == 0 || p.dstRepStride == 0);
    auto footprint_overlap = [&](const LocalTensor<T>& s, uint8_t sb, uint8_t sr) {
        return Overlap(dst.EmuAddr(), static_cast<uint32_t>(span(p.dstBlkStride, p.dstRepStride)), s.EmuAddr(),
                       static_cast<uint32_t>(span(sb, sr)));
    };
    const bool same0 = dst.EmuAddr() == src0.EmuAddr() && p.dstBlkStride == p.src0BlkStride && p.dstRepStride == p.src0RepStride;
    const bool same1 = dst.EmuAddr() == src1.EmuAddr() && p.dstBlkStride == p.src1BlkStride && p.dstRepStride == p.src1RepStride;
    if ((!same0 && footprint_overlap(src0, p.src0BlkStride, p.src0RepStride)) ||
        (!same1 && !accumulate && footprint_overlap(src1, p.src1BlkStride, p.src1RepStride))) {
        ascend_emu::Fail("operand overlap",
                         ascend_emu::Fmt("%s: dst overlaps a source in a way the ISA does not define (only exact "
                                         "aliasing, or dst == src1 with a zero repeat stride, is allowed)",
                                         api),
                         ascend_emu::doc::kOverlap);
    }
    uint32_t op = ascend_emu::BeginOp(ascend_emu::kV);
    if (ascend_emu::perf::On()) {
        uint32_t lanes = 0;
        for (uint32_t e = 0; e < per_repeat; ++e) lanes += active(e) ? 1 : 0;
        ascend_emu::perf::Vector(api, static_cast<uint64_t>(repeat), static_cast<uint64_t>(repeat) * lanes);
    }
    const bool compute = !ascend_emu::perf::SkipCompute();
    uint8_t* ub = ascend_emu::State().ub;
    for (int32_t r = 0; r < repeat; ++r) {
        T a[per_repeat], b[per_repeat];
        for (uint32_t k = 0; k < 8; ++k) {
            uint32_t s0 = src0.EmuAddr() + (r * p.src0RepStride + k * p.src0BlkStride) * 32;
            uint32_t s1 = src1.EmuAddr() + (r * p.src1RepStride + k * p.src1BlkStride) * 32;
            ascend_emu::TrackRead(ascend_emu::kV, op, s0, 32, api);
            ascend_emu::TrackRead(ascend_emu::kV, op, s1, 32, api);
            if (!compute) continue;
            std::memcpy(a + k * per_block, ub + s0, 32);
            std::memcpy(b + k * per_block, ub + s1, 32);
        }
        for (uint32_t k = 0; k < 8; ++k) {
            uint32_t d = dst.EmuAddr() + (r * p.dstRepStride + k * p.dstBlkStride) * 32;
            ascend_emu::TrackWrite(ascend_emu::kV, op, d, 32, api);
            if (!compute) continue;
            T* out = reinterpret_cast<T*>(ub + d);
            for (uint32_t j = 0; j < per_block; ++j) {
                uint32_t e = k * per_block + j;
                if (active(e)) out[j] = Apply(a[e], b[e], f);
            }
        }
    }
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
        emu_detail::BinaryRepeat(dst, src0, src1, mask, 0, false, repeatTime, repeatParams, #NAME,         \
                                 [](auto a, auto b) { return EXPR; });                                     \
    }                                                                                                      \
    template <typename T, bool isSetMask = true>                                                           \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,   \
                     uint64_t mask[], const int32_t repeatTime, const BinaryRepeatParams& repeatParams)    \
    {                                                                                                      \
        static_assert(TYPE_OK, #NAME ": " TYPE_MSG);                                                       \
        emu_detail::BinaryRepeat(dst, src0, src1, mask[0], mask[1], true, repeatTime, repeatParams, #NAME, \
                                 [](auto a, auto b) { return EXPR; });                                     \
    }
// clang-format on

ASCEND_EMU_BINARY(Add, a + b, emu_detail::kArithType<T>, "dav-2201 supports int16_t, half, int32_t, float (no bfloat16_t arithmetic)")
ASCEND_EMU_BINARY(Sub, a - b, emu_detail::kArithType<T>, "dav-2201 supports int16_t, half, int32_t, float (no bfloat16_t arithmetic)")
ASCEND_EMU_BINARY(Mul, a * b, emu_detail::kArithType<T>, "dav-2201 supports int16_t, half, int32_t, float (no bfloat16_t arithmetic)")
ASCEND_EMU_BINARY(Max, (a > b ? a : b), emu_detail::kArithType<T>, "dav-2201 supports int16_t, half, int32_t, float")
ASCEND_EMU_BINARY(Min, (a < b ? a : b), emu_detail::kArithType<T>, "dav-2201 supports int16_t, half, int32_t, float")
ASCEND_EMU_BINARY(Div, a / b, (emu_detail::kOneOf<T, half, float>), "dav-2201 supports half and float")
#undef ASCEND_EMU_BINARY

template <typename T>
inline void Adds(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, const int32_t& count)
{
    static_assert(emu_detail::kArithType<T>, "Adds: dav-2201 supports int16_t, half, int32_t, float");
    emu_detail::Scalar(dst, src, scalarValue, count, "Adds", [](auto a, auto b) { return a + b; });
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

template <typename D, typename S>
inline D ConvertOne(S v, RoundMode m, bool saturate)
{
    if constexpr (std::is_same<D, float>::value && !std::is_same<S, int32_t>::value) {
        return static_cast<float>(v);  // exact widening
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
    if (sizeof(T) <= sizeof(U) && dst.EmuAddr() != src.EmuAddr() &&
        emu_detail::Overlap(dst.EmuAddr(), dbytes, src.EmuAddr(), sbytes)) {
        ascend_emu::Fail("operand overlap", "Cast: dst and src partially overlap", ascend_emu::doc::kOverlap);
    }
    static const bool saturate = ascend_emu::EnvFlag("ASCEND_RMSNORM_EMU_SATURATE");
    uint32_t op = ascend_emu::BeginOp(ascend_emu::kV);
    ascend_emu::TrackRead(ascend_emu::kV, op, src.EmuAddr(), sbytes, "Cast");
    ascend_emu::TrackWrite(ascend_emu::kV, op, dst.EmuAddr(), dbytes, "Cast");
    // A cast runs at the width of its wider type (64 fp32 elements per repeat for bf16 <-> fp32).
    ascend_emu::perf::VectorBytes("Cast", dbytes > sbytes ? dbytes : sbytes, count);
    if (ascend_emu::perf::SkipCompute()) return;
    const U* s = src.EmuData();
    T* d = dst.EmuData();
    // In place (narrowing only), a forward walk never overwrites a source element before reading it.
    for (uint32_t i = 0; i < count; ++i) d[i] = emu_detail::ConvertOne<T, U>(s[i], roundMode, saturate);
}

} // namespace AscendC
