// DataCopy / DataCopyPad between GM and UB (and UB to UB) for the emulation, with the units,
// ranges and 32-byte rules of dav-2201 enforced rather than silently truncated.
#pragma once

#include "emu_pipe.h"

namespace AscendC {

struct DataCopyParams {
    DataCopyParams() {}
    DataCopyParams(const uint16_t count, const uint16_t len, const uint16_t srcStrideIn, const uint16_t dstStrideIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn)
    {}
    uint16_t blockCount = 1;
    uint16_t blockLen = 0;
    union {
        uint16_t srcGap = 0;
        uint16_t srcStride;
    };
    union {
        uint16_t dstGap = 0;
        uint16_t dstStride;
    };
};

struct DataCopyExtParams {
    DataCopyExtParams() {}
    DataCopyExtParams(const uint16_t count, const uint32_t len, const uint32_t srcStrideIn,
                      const uint32_t dstStrideIn, const uint32_t rsvIn)
        : blockCount(count), blockLen(len), srcStride(srcStrideIn), dstStride(dstStrideIn), rsv(rsvIn)
    {}
    uint16_t blockCount = 1;
    uint32_t blockLen = 0;
    uint32_t srcStride = 0;
    uint32_t dstStride = 0;
    uint32_t rsv = 0;
};

template <typename T>
struct DataCopyPadExtParams {
    DataCopyPadExtParams()
    {
        static_assert(!std::is_same<T, bfloat16_t>::value,
                      "DataCopyPadExtParams<bfloat16_t>() sets paddingValue from an int 0, which the .asc host pass "
                      "of bisheng rejects; construct it as (false, 0, 0, bfloat16_t())");
    }
    DataCopyPadExtParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue, T padValue)
        : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue)
    {}
    bool isPad = false;
    uint8_t leftPadding = 0;
    uint8_t rightPadding = 0;
    T paddingValue{};
};

struct DataCopyPadParams {
    DataCopyPadParams() {}
    DataCopyPadParams(const bool isPadValue, const uint8_t leftPadValue, const uint8_t rightPadValue,
                      const uint64_t padValue)
        : isPad(isPadValue), leftPadding(leftPadValue), rightPadding(rightPadValue), paddingValue(padValue)
    {}
    bool isPad = false;
    uint8_t leftPadding = 0;
    uint8_t rightPadding = 0;
    uint64_t paddingValue = 0;
};

namespace emu_detail {

inline void CheckBurstCount(uint32_t count, const char* api, const char* doc_page)
{
    if (count > 4095) {
        ascend_emu::Fail("repeat range", ascend_emu::Fmt("%s: blockCount %u is outside [0, 4095]", api, count),
                         doc_page);
    }
}

// A DataCopy (not DataCopyPad) of no blocks or of empty blocks. Stricter than the newest asc-devkit
// on purpose, which documents 0 as a no-op: the legacy build's release, CANN 8.1, takes blockCount and
// blockLen from 1 (its dav_c220 data-copy implementation, CheckDataCopyParams), so a kernel that issued
// one would abort under that release's CPU debugging. Skipping an empty copy is the kernel's job.
inline void CheckNonEmptyCopy(uint32_t blockCount, uint32_t blockLen, const char* api, const char* doc_page)
{
    if (blockCount == 0 || blockLen == 0) {
        ascend_emu::Fail("DataCopy length",
                         ascend_emu::Fmt("%s: blockCount %u, blockLen %u: an empty copy (CANN 8.1 takes both from 1; "
                                         "skip it in the kernel)",
                                         api, blockCount, blockLen),
                         doc_page);
    }
}

template <typename T>
void CheckContiguousLength(uint32_t count, const char* api)
{
    uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
    if (bytes % ascend_emu::kBlockBytes != 0) {
        ascend_emu::Fail("DataCopy length",
                         ascend_emu::Fmt("%s of %u elements = %llu bytes, not a multiple of 32: the hardware copies "
                                         "only %llu bytes (and a UB->GM copy writes whole 32-byte blocks). Use "
                                         "DataCopyPad for unaligned lengths",
                                         api, count, static_cast<unsigned long long>(bytes),
                                         static_cast<unsigned long long>(bytes / 32 * 32)),
                         ascend_emu::doc::kDataCopy);
    }
    if (bytes / ascend_emu::kBlockBytes > 0xFFFF) {
        ascend_emu::Fail("DataCopy length",
                         ascend_emu::Fmt("%s of %u elements = %llu bytes: more than 65535 32-byte blocks, which the "
                                         "burst length (uint16_t) cannot hold; the hardware would copy a wrapped length",
                                         api, count, static_cast<unsigned long long>(bytes)),
                         ascend_emu::doc::kDataCopy);
    }
}

// Both DataCopy forms (the contiguous one is a single burst of the DataCopyParams one, which checks this)
// ask for a GM address aligned to the element size; DataCopyPad asks for 1 byte.
template <typename T>
void CheckGmAlignment(const GlobalTensor<T>& g, const char* api, const char* doc_page)
{
    if (reinterpret_cast<uintptr_t>(g.EmuPtr()) % sizeof(T) != 0) {
        ascend_emu::Fail("GM alignment", ascend_emu::Fmt("%s: GM address not aligned to the element size", api),
                         doc_page);
    }
}

// DataCopyPad's burst count and byte length (both directions).
template <typename T>
void CheckPadLength(const DataCopyExtParams& p, const char* api, const char* doc_page)
{
    CheckBurstCount(p.blockCount, api, doc_page);
    if (p.blockLen > 2097151 || p.blockLen % sizeof(T) != 0) {
        ascend_emu::Fail("DataCopy length",
                         ascend_emu::Fmt("%s: blockLen %u bytes must be in [0, 2097151] and a multiple of sizeof(T)=%zu",
                                         api, p.blockLen, sizeof(T)),
                         doc_page);
    }
}

// The UB side of a GM<->UB copy must sit at a position the documented data paths name
// (dav-2201): DataCopy GM -> VECIN and VECOUT -> GM; DataCopyPad GM -> VECIN/VECOUT and VECIN/VECOUT -> GM.
// VECCALC (TBuf's default) is not among them.
template <typename T>
void CheckUbPosition(const LocalTensor<T>& t, bool pad, bool toUb, const char* api, const char* doc_page)
{
    const TPosition pos = t.GetPosition();
    const bool ok = pad ? (pos == TPosition::VECIN || pos == TPosition::VECOUT)
                        : (toUb ? pos == TPosition::VECIN : pos == TPosition::VECOUT);
    if (!ok) {
        ascend_emu::Fail("data path",
                         ascend_emu::Fmt("%s: the UB tensor's position is not one of the documented paths (%s)", api,
                                         pad ? "GM <-> VECIN/VECOUT" : (toUb ? "GM -> VECIN" : "VECOUT -> GM")),
                         doc_page);
    }
}

// After a DMA has moved its data: the destination bytes it shares with an earlier copy of its pipe,
// unordered by a PipeBarrier of that pipe (CheckOrdered, GmAccess), hold either copy's data; poison them.
inline void PoisonUnorderedCopies()
{
    ascend_emu::BlockState& s = ascend_emu::State();
    if (!ascend_emu::perf::SkipCompute()) {
        for (uint32_t b : s.unordered_ub) ascend_emu::PoisonUb(b * ascend_emu::kBlockBytes, ascend_emu::kBlockBytes);
        for (const auto& r : s.unordered_gm) std::memset(reinterpret_cast<void*>(r.first), 0xFF, r.second - r.first);
    }
    s.unordered_ub.clear();
    s.unordered_gm.clear();
}

} // namespace emu_detail

// ---- DataCopy, contiguous: one burst of the strided form below -------------------------------
template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p);
template <typename T>
inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p);

template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const uint32_t count)
{
    emu_detail::CheckContiguousLength<T>(count, "DataCopy(GM->UB)");
    DataCopy(dst, src, DataCopyParams(1, static_cast<uint16_t>(count * sizeof(T) / 32), 0, 0));
}

template <typename T>
inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count)
{
    emu_detail::CheckContiguousLength<T>(count, "DataCopy(UB->GM)");
    DataCopy(dst, src, DataCopyParams(1, static_cast<uint16_t>(count * sizeof(T) / 32), 0, 0));
}

template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t count)
{
    emu_detail::CheckContiguousLength<T>(count, "DataCopy(UB->UB)");
    emu_detail::CheckNonEmptyCopy(1, count, "DataCopy(UB->UB)", ascend_emu::doc::kDataCopy);
    dst.EmuCheckOperand(count, "DataCopy(UB->UB)", "dst");
    src.EmuCheckOperand(count, "DataCopy(UB->UB)", "src");
    uint32_t bytes = count * sizeof(T);
    if (dst.EmuAddr() < src.EmuAddr() + bytes && src.EmuAddr() < dst.EmuAddr() + bytes && dst.EmuAddr() != src.EmuAddr()) {
        ascend_emu::Fail("operand overlap", "DataCopy(UB->UB) with partially overlapping src and dst",
                         ascend_emu::doc::kOverlap);
    }
    uint32_t op = ascend_emu::BeginOp(ascend_emu::kV);
    ascend_emu::TrackRead(ascend_emu::kV, op, src.EmuAddr(), bytes, "DataCopy(UB->UB) src");
    const std::vector<uint8_t> undefined = ascend_emu::UndefinedMarks(src.EmuAddr(), bytes);
    ascend_emu::TrackWrite(ascend_emu::kV, op, dst.EmuAddr(), bytes, "DataCopy(UB->UB) dst");
    ascend_emu::perf::VectorBytes("DataCopy(UB->UB)", bytes, count);
    if (ascend_emu::perf::SkipCompute()) return;
    std::memmove(dst.EmuData(), src.EmuData(), bytes);
    ascend_emu::CarryUndefined(dst.EmuAddr(), undefined);  // a copy of bytes nothing wrote is no more defined
}

// ---- DataCopy with DataCopyParams (all lengths and gaps in 32-byte blocks) ----------------------
template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p)
{
    const char* api = "DataCopy(GM->UB, DataCopyParams)";
    emu_detail::CheckUbPosition(dst, false, true, api, ascend_emu::doc::kDataCopy);
    emu_detail::CheckBurstCount(p.blockCount, api, ascend_emu::doc::kDataCopyStrided);
    emu_detail::CheckNonEmptyCopy(p.blockCount, p.blockLen, api, ascend_emu::doc::kDataCopyStrided);
    emu_detail::CheckGmAlignment(src, api, ascend_emu::doc::kDataCopyStrided);
    uint64_t src_span = (static_cast<uint64_t>(p.blockCount - 1) * (p.blockLen + p.srcGap) + p.blockLen) * 32;
    uint64_t dst_span = (static_cast<uint64_t>(p.blockCount - 1) * (p.blockLen + p.dstGap) + p.blockLen) * 32;
    dst.EmuCheckOperand(dst_span / sizeof(T), api, "dst");
    src.EmuCheckBytes(0, src_span, api);
    uint32_t op = ascend_emu::BeginOp(ascend_emu::kMte2);
    src.EmuPerfDma(ascend_emu::kMte2, static_cast<uint64_t>(p.blockCount) * p.blockLen * 32u, p.blockCount);
    const bool move = !ascend_emu::perf::SkipCompute();
    for (uint32_t i = 0; i < p.blockCount; ++i) {
        uint64_t so = static_cast<uint64_t>(i) * (p.blockLen + p.srcGap) * 32;
        uint32_t d = dst.EmuAddr() + i * (p.blockLen + p.dstGap) * 32;
        ascend_emu::TrackWrite(ascend_emu::kMte2, op, d, p.blockLen * 32u, "DataCopy dst");
        ascend_emu::GmAccess(ascend_emu::kMte2, op, reinterpret_cast<uintptr_t>(src.EmuPtr()) + so, p.blockLen * 32u);
        if (move) {
            std::memcpy(ascend_emu::State().ub + d, reinterpret_cast<const uint8_t*>(src.EmuPtr()) + so,
                        p.blockLen * 32u);
        }
    }
    emu_detail::PoisonUnorderedCopies();
}

template <typename T>
inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p)
{
    const char* api = "DataCopy(UB->GM, DataCopyParams)";
    emu_detail::CheckUbPosition(src, false, false, api, ascend_emu::doc::kDataCopy);
    emu_detail::CheckBurstCount(p.blockCount, api, ascend_emu::doc::kDataCopyStrided);
    emu_detail::CheckNonEmptyCopy(p.blockCount, p.blockLen, api, ascend_emu::doc::kDataCopyStrided);
    emu_detail::CheckGmAlignment(dst, api, ascend_emu::doc::kDataCopyStrided);
    uint64_t src_span = (static_cast<uint64_t>(p.blockCount - 1) * (p.blockLen + p.srcGap) + p.blockLen) * 32;
    uint64_t dst_span = (static_cast<uint64_t>(p.blockCount - 1) * (p.blockLen + p.dstGap) + p.blockLen) * 32;
    src.EmuCheckOperand(src_span / sizeof(T), api, "src");
    dst.EmuCheckBytes(0, dst_span, api);
    uint32_t op = ascend_emu::BeginOp(ascend_emu::kMte3);
    dst.EmuPerfDma(ascend_emu::kMte3, static_cast<uint64_t>(p.blockCount) * p.blockLen * 32u, p.blockCount);
    const bool move = !ascend_emu::perf::SkipCompute();
    for (uint32_t i = 0; i < p.blockCount; ++i) {
        uint32_t s = src.EmuAddr() + i * (p.blockLen + p.srcGap) * 32;
        uint64_t d = static_cast<uint64_t>(i) * (p.blockLen + p.dstGap) * 32;
        ascend_emu::TrackRead(ascend_emu::kMte3, op, s, p.blockLen * 32u, "DataCopy src");
        ascend_emu::GmAccess(ascend_emu::kMte3, op, reinterpret_cast<uintptr_t>(dst.EmuPtr()) + d, p.blockLen * 32u);
        if (move) std::memcpy(reinterpret_cast<uint8_t*>(dst.EmuPtr()) + d, ascend_emu::State().ub + s, p.blockLen * 32u);
    }
    emu_detail::PoisonUnorderedCopies();
}

// ---- DataCopyPad: byte-exact rows; GM strides in bytes, UB strides in 32-byte blocks ----------
template <typename T>
inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& p,
                        const DataCopyPadExtParams<T>& pad)
{
    const char* api = "DataCopyPad(GM->UB)";
    const char* doc_page = ascend_emu::doc::kDataCopyPadIn;
    emu_detail::CheckUbPosition(dst, true, true, api, doc_page);
    emu_detail::CheckPadLength<T>(p, api, doc_page);
    const uint32_t left = pad.leftPadding * sizeof(T), right = pad.rightPadding * sizeof(T);
    if (left > 32 || right > 32) {
        ascend_emu::Fail("DataCopy length", ascend_emu::Fmt("%s: left/right padding above 32 bytes", api), doc_page);
    }
    if constexpr (sizeof(T) == 8) {  // the page's 约束说明; kernel_operator_data_copy_check.h asserts it (CheckIsZero)
        uint64_t bits = 0;
        std::memcpy(&bits, &pad.paddingValue, sizeof(bits));
        if (bits != 0) {
            ascend_emu::Fail("DataCopyPad padding",
                             ascend_emu::Fmt("%s: paddingValue of a 64-bit type must be 0", api), doc_page);
        }
    }
    if (p.blockCount == 0 || p.blockLen == 0) return;
    const uint32_t row_bytes = (left + p.blockLen + right + 31) / 32 * 32;
    const uint64_t pitch = row_bytes + static_cast<uint64_t>(p.dstStride) * 32;
    const uint64_t ub_span = (p.blockCount - 1) * pitch + row_bytes;
    const uint64_t gm_pitch = static_cast<uint64_t>(p.blockLen) + p.srcStride;  // 64-bit, as the GM address
    const uint64_t gm_span = static_cast<uint64_t>(p.blockCount - 1) * gm_pitch + p.blockLen;
    dst.EmuCheckOperand(ub_span / sizeof(T), api, "dst");
    src.EmuCheckBytes(0, gm_span, api);
    uint32_t op = ascend_emu::BeginOp(ascend_emu::kMte2);
    src.EmuPerfDma(ascend_emu::kMte2, static_cast<uint64_t>(p.blockCount) * p.blockLen, p.blockCount);
    const bool move = !ascend_emu::perf::SkipCompute();
    uint8_t* ub = ascend_emu::State().ub;
    for (uint32_t i = 0; i < p.blockCount; ++i) {
        const uint32_t row = dst.EmuAddr() + static_cast<uint32_t>(i * pitch);
        ascend_emu::TrackWrite(ascend_emu::kMte2, op, row, row_bytes, "DataCopyPad dst");
        ascend_emu::GmAccess(ascend_emu::kMte2, op,
                             reinterpret_cast<uintptr_t>(src.EmuPtr()) + i * gm_pitch, p.blockLen);
        if (!move) continue;
        // pads and the dummy tail: the padding value with isPad and some padding, else undefined (poison
        // here). With no left or right padding the dummy is not the padding value even with isPad (the page's
        // examples: "若leftPadding、rightPadding都为0：dummy会默认填充待搬运数据块的第一个元素值").
        if (pad.isPad && (left != 0 || right != 0)) {
            for (uint32_t b = 0; b < row_bytes; b += sizeof(T)) std::memcpy(ub + row + b, &pad.paddingValue, sizeof(T));
        } else {
            ascend_emu::PoisonUb(row, row_bytes);
            ascend_emu::MarkDefined(row + left, p.blockLen, true);  // the data, copied in below
        }
        std::memcpy(ub + row + left, reinterpret_cast<const uint8_t*>(src.EmuPtr()) + i * gm_pitch,
                    p.blockLen);
    }
    emu_detail::PoisonUnorderedCopies();
}

template <typename T>
inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p)
{
    const char* api = "DataCopyPad(UB->GM)";
    const char* doc_page = ascend_emu::doc::kDataCopyPadOut;
    emu_detail::CheckUbPosition(src, true, false, api, doc_page);
    emu_detail::CheckPadLength<T>(p, api, doc_page);
    if (p.blockCount == 0 || p.blockLen == 0) return;
    const uint32_t row_bytes = (p.blockLen + 31) / 32 * 32;
    const uint64_t pitch = row_bytes + static_cast<uint64_t>(p.srcStride) * 32;
    const uint64_t ub_span = (p.blockCount - 1) * pitch + p.blockLen;
    const uint64_t gm_pitch = static_cast<uint64_t>(p.blockLen) + p.dstStride;
    const uint64_t gm_span = static_cast<uint64_t>(p.blockCount - 1) * gm_pitch + p.blockLen;
    src.EmuCheckOperand((ub_span + sizeof(T) - 1) / sizeof(T), api, "src");
    dst.EmuCheckBytes(0, gm_span, api);
    uint32_t op = ascend_emu::BeginOp(ascend_emu::kMte3);
    dst.EmuPerfDma(ascend_emu::kMte3, static_cast<uint64_t>(p.blockCount) * p.blockLen, p.blockCount);
    const bool move = !ascend_emu::perf::SkipCompute();
    for (uint32_t i = 0; i < p.blockCount; ++i) {
        const uint32_t row = src.EmuAddr() + static_cast<uint32_t>(i * pitch);
        ascend_emu::TrackRead(ascend_emu::kMte3, op, row, p.blockLen, "DataCopyPad src");
        ascend_emu::GmAccess(ascend_emu::kMte3, op,
                             reinterpret_cast<uintptr_t>(dst.EmuPtr()) + i * gm_pitch, p.blockLen);
        if (move) std::memcpy(reinterpret_cast<uint8_t*>(dst.EmuPtr()) + i * gm_pitch,
                    ascend_emu::State().ub + row, p.blockLen);
    }
    emu_detail::PoisonUnorderedCopies();
}

// Legacy overloads: DataCopyParams whose blockLen and GM-side stride are in BYTES here.
template <typename T>
inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p,
                        const DataCopyPadParams& pad)
{
    if (pad.paddingValue != 0) {  // kernel_operator_data_copy_check.h asserts it
        ascend_emu::Fail("DataCopyPad padding",
                         "DataCopyPad: DataCopyPadParams.paddingValue only supports 0 (use DataCopyPadExtParams for "
                         "another value)",
                         ascend_emu::doc::kDataCopyPadIn);
    }
    T value{};
    std::memcpy(&value, &pad.paddingValue, sizeof(T));
    DataCopyPad(dst, src, DataCopyExtParams(p.blockCount, p.blockLen, p.srcStride, p.dstStride, 0),
                DataCopyPadExtParams<T>(pad.isPad, pad.leftPadding, pad.rightPadding, value));
}

template <typename T>
inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p)
{
    DataCopyPad(dst, src, DataCopyExtParams(p.blockCount, p.blockLen, p.srcStride, p.dstStride, 0));
}

} // namespace AscendC
