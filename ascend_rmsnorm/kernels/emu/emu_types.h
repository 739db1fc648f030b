// half and bfloat16_t for the CPU emulation: 16-bit storage, exact widening, and narrowing with
// each Ascend C RoundMode implemented bit by bit (RNE matches PyTorch's casts).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ascend_emu {

inline uint32_t F32Bits(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float BitsF32(uint32_t u)
{
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

enum class Rounding { kRint, kRound, kTrunc, kFloor, kCeil, kOdd };

// Round a magnitude: `kept` whole units plus a discarded fraction `rest` out of `2*half`.
inline uint32_t RoundMantissa(uint32_t kept, uint64_t rest, uint64_t half, bool negative, Rounding r)
{
    if (rest == 0) return kept;
    switch (r) {
        case Rounding::kRint:
            return (rest > half || (rest == half && (kept & 1u))) ? kept + 1 : kept;
        case Rounding::kRound:
            return rest >= half ? kept + 1 : kept;
        case Rounding::kTrunc:
            return kept;
        case Rounding::kFloor:
            return negative ? kept + 1 : kept;
        case Rounding::kCeil:
            return negative ? kept : kept + 1;
        case Rounding::kOdd:
            return kept | 1u;
    }
    return kept;
}

// Narrow a float to a 16-bit IEEE-style format with `exp_bits` exponent and `man_bits` mantissa
// bits (fp16: 5/10, bf16: 8/7): subnormals, overflow and NaN included. With `saturate`, the
// A2/A3 saturation mode: inf and overflow go to +-max finite and NaN goes to 0.
inline uint16_t NarrowFloat(float f, int exp_bits, int man_bits, Rounding r, bool saturate = false)
{
    const uint32_t u = F32Bits(f);
    const bool negative = (u >> 31) != 0;
    const uint16_t sign = static_cast<uint16_t>(negative ? 1u << (exp_bits + man_bits) : 0u);
    const uint32_t exp_all = ((1u << exp_bits) - 1) << man_bits;
    const uint32_t max_finite = exp_all - 1;
    const int32_t bias = (1 << (exp_bits - 1)) - 1;
    int32_t f_exp = static_cast<int32_t>((u >> 23) & 0xFF);
    uint32_t f_man = u & 0x7FFFFF;
    if (f_exp == 0xFF) {
        if (saturate) return f_man ? 0 : static_cast<uint16_t>(sign | max_finite);
        if (f_man == 0) return static_cast<uint16_t>(sign | exp_all);
        return static_cast<uint16_t>(sign | exp_all | (1u << (man_bits - 1))); // canonical quiet NaN
    }
    if (f_exp == 0 && f_man == 0) return sign;
    // value = sig * 2^(e - 23) with sig normalised into [2^23, 2^24)
    uint64_t sig = f_exp == 0 ? f_man : (f_man | 0x800000u);
    int32_t e = f_exp == 0 ? -126 : f_exp - 127;
    while (sig < (1u << 23)) {
        sig <<= 1;
        --e;
    }
    int32_t shift = 23 - man_bits;      // bits of sig below the kept mantissa
    const bool normal = e >= 1 - bias;  // normal in the narrow format?
    if (!normal) shift += (1 - bias) - e;
    uint32_t kept;
    uint64_t rest, half;
    if (shift > 40) {  // far below the smallest subnormal: nothing kept, inexact, below half
        kept = 0;
        rest = 1;
        half = 2;
    } else {
        kept = static_cast<uint32_t>(sig >> shift);
        rest = sig & ((uint64_t(1) << shift) - 1);
        half = uint64_t(1) << (shift - 1);
    }
    const uint32_t rounded = RoundMantissa(kept, rest, half, negative, r);
    // A carry out of the mantissa moves into the exponent field by itself in both encodings.
    const uint32_t bits = normal ? (static_cast<uint32_t>(e + bias) << man_bits) + (rounded - (1u << man_bits))
                                 : rounded;
    if (bits >= exp_all) {
        const bool to_inf = !saturate && (r == Rounding::kRint || r == Rounding::kRound ||
                                          (r == Rounding::kFloor && negative) || (r == Rounding::kCeil && !negative));
        return static_cast<uint16_t>(sign | (to_inf ? exp_all : max_finite));
    }
    return static_cast<uint16_t>(sign | bits);
}

inline float WidenHalf(uint16_t h)
{
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1F;
    uint32_t man = h & 0x3FF;
    if (exp == 0x1F) return BitsF32(sign | 0x7F800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return BitsF32(sign);
        int e = -1;
        do {
            ++e;
            man <<= 1;
        } while ((man & 0x400) == 0);
        return BitsF32(sign | static_cast<uint32_t>(127 - 15 - e) << 23 | ((man & 0x3FF) << 13));
    }
    return BitsF32(sign | (exp + 127 - 15) << 23 | (man << 13));
}

inline float WidenBf16(uint16_t b) { return BitsF32(static_cast<uint32_t>(b) << 16); }

} // namespace ascend_emu

// Ascend C's builtin 16-bit float types. Arithmetic on them goes through float (exact for
// widening; one rounding back), which is what a correctly rounded half unit would produce.
struct half {
    uint16_t bits = 0;
    half() = default;
    half(float f) : bits(ascend_emu::NarrowFloat(f, 5, 10, ascend_emu::Rounding::kRint)) {}
    half(double d) : half(static_cast<float>(d)) {}
    half(int i) : half(static_cast<float>(i)) {}
    operator float() const { return ascend_emu::WidenHalf(bits); }
    static half FromBits(uint16_t b)
    {
        half h;
        h.bits = b;
        return h;
    }
};

struct bfloat16_t {
    uint16_t bits = 0;
    bfloat16_t() = default;
    // No implicit construction from immediates: Ascend C cannot initialise bfloat16_t that way
    // (docs/zh/api/SIMD-API/基础API/数据结构/内置数据类型.md); use AscendC::Cast or FromFloat.
    explicit bfloat16_t(float f) : bits(ascend_emu::NarrowFloat(f, 8, 7, ascend_emu::Rounding::kRint)) {}
    operator float() const { return ascend_emu::WidenBf16(bits); }
    static bfloat16_t FromBits(uint16_t b)
    {
        bfloat16_t h;
        h.bits = b;
        return h;
    }
};
