// LocalTensor (a typed view of UB bytes) and GlobalTensor (a typed view of GM) for the emulation.
#pragma once

#include <type_traits>

#include "emu_base.h"
#include "emu_perf.h"
#include "emu_types.h"

namespace AscendC {

enum class TPosition : uint8_t {
    GM,
    A1,
    A2,
    B1,
    B2,
    C1,
    C2,
    CO1,
    CO2,
    VECIN,
    VECOUT,
    VECCALC,
    LCM = VECCALC,
    SPM,
    SHM = SPM,
    TSCM,
    C2PIPE2GM,
    C2PIPE2LOCAL,
    MAX,
};
using QuePosition = TPosition;

inline int64_t GetBlockIdx() { return ascend_emu::g_launch.block_idx; }
inline int64_t GetBlockNum() { return ascend_emu::g_launch.block_num; }
inline void InitSocState() {}

namespace emu_detail {
// A tensor that was never bound to memory. On the NPU `LocalTensor(){}` is user-provided and empty
// and TBuffAddr (dataLen, bufferAddr, ...) has no initialisers (include/basic_api/kernel_tensor.h,
// impl/basic_api/kernel_tensor_base.h), and `GlobalTensor()` leaves address_ and bufferSize_ unset
// (impl/basic_api/kernel_tensor_impl.h): its size and address are whatever the stack held, and `{}`
// changes nothing. Copying one is harmless; reading its size or address, or using it, is not.
[[noreturn]] inline void Unbound(const char* kind, const char* api, const char* page)
{
    ascend_emu::Fail("default-constructed tensor",
                     ascend_emu::Fmt("%s on a %s that was never bound to a buffer: a default-constructed tensor's "
                                     "address and size are indeterminate (its constructor initialises nothing)",
                                     api, kind),
                     page);
}
}  // namespace emu_detail

template <typename T>
class LocalTensor {
public:
    using PrimType = T;
    LocalTensor() = default;

    // Emulator-side constructor (used by TQue/TBuf): `bytes` visible from UB byte `addr`.
    LocalTensor(uint32_t addr, uint32_t bytes, TPosition pos, const void* owner, int buffer)
        : addr_(addr), bytes_(bytes), pos_(pos), owner_(owner), buffer_(buffer), bound_(true)
    {}

    LocalTensor operator[](const uint32_t offset) const
    {
        Bound("LocalTensor::operator[]");
        if (static_cast<uint64_t>(offset) * sizeof(T) > bytes_) {
            ascend_emu::Fail("LocalTensor bounds",
                             ascend_emu::Fmt("operator[](%u) on a LocalTensor of %u elements", offset, GetSize()),
                             ascend_emu::doc::kLocalTensor);
        }
        LocalTensor t = *this;
        t.addr_ = addr_ + offset * static_cast<uint32_t>(sizeof(T));
        t.bytes_ = bytes_ - offset * static_cast<uint32_t>(sizeof(T));
        return t;
    }

    T GetValue(const uint32_t index) const
    {
        Bound("LocalTensor::GetValue");
        CheckIndex(index, "GetValue");
        uint32_t op = ascend_emu::BeginOp(ascend_emu::kS);
        ascend_emu::TrackRead(ascend_emu::kS, op, addr_ + index * sizeof(T), sizeof(T), "LocalTensor::GetValue");
        ascend_emu::perf::ScalarUb(false);
        T v;
        std::memcpy(&v, ascend_emu::State().ub + addr_ + index * sizeof(T), sizeof(T));
        return v;
    }

    template <typename S>
    void SetValue(const uint32_t index, const S value) const
    {
        Bound("LocalTensor::SetValue");
        CheckIndex(index, "SetValue");
        uint32_t op = ascend_emu::BeginOp(ascend_emu::kS);
        ascend_emu::TrackWrite(ascend_emu::kS, op, addr_ + index * sizeof(T), sizeof(T), "LocalTensor::SetValue");
        ascend_emu::perf::ScalarUb(true);
        T v = static_cast<T>(value);
        std::memcpy(ascend_emu::State().ub + addr_ + index * sizeof(T), &v, sizeof(T));
    }

    uint32_t GetSize() const { return Bound("LocalTensor::GetSize"), bytes_ / static_cast<uint32_t>(sizeof(T)); }
    uint32_t GetLength() const { return Bound("LocalTensor::GetLength"), bytes_; }
    uint64_t GetPhyAddr() const { return Bound("LocalTensor::GetPhyAddr"), addr_; }
    uint64_t GetPhyAddr(const uint32_t offset) const
    {
        return Bound("LocalTensor::GetPhyAddr"), addr_ + offset * sizeof(T);
    }
    TPosition GetPosition() const { return Bound("LocalTensor::GetPosition"), pos_; }

    template <typename U>
    LocalTensor<U> ReinterpretCast() const
    {
        Bound("LocalTensor::ReinterpretCast");
        return LocalTensor<U>(addr_, bytes_, pos_, owner_, buffer_);
    }

    // ---- emulator internals -----------------------------------------------------------------
    uint32_t EmuAddr() const { return Bound("a vector or DMA operand"), addr_; }
    const void* EmuOwner() const { return owner_; }
    int EmuBuffer() const { return buffer_; }
    T* EmuData() const { return Bound("a vector or DMA operand"), reinterpret_cast<T*>(ascend_emu::State().ub + addr_); }

    // An operand of `count` elements for `api`: bound to a buffer, 32-byte aligned and inside the tensor.
    void EmuCheckOperand(uint64_t count, const char* api, const char* role) const
    {
        if (!bound_) {
            emu_detail::Unbound("LocalTensor", ascend_emu::Fmt("%s (as %s)", api, role).c_str(),
                                ascend_emu::doc::kLocalTensor);
        }
        // VECIN, VECOUT and VECCALC are the TPositions in Unified Buffer on dav-2201 (通用说明和约束.md 表1; C1 is
        // L1, CO2 and SPM GM there); a vector API's CheckVectorTensor asks for UB, as a DMA's UB side does.
        // Stricter on purpose for C2PIPE2LOCAL, which the table leaves out and GetPhyType maps to UB (design.md §9).
        if (!InUb()) {
            ascend_emu::Fail("data path",
                             ascend_emu::Fmt("%s: %s is a LocalTensor at a TPosition outside Unified Buffer (UB operands "
                                             "are VECIN/VECCALC/VECOUT)",
                                             api, role),
                             ascend_emu::doc::kPosition);
        }
        if (addr_ % ascend_emu::kBlockBytes != 0) {
            ascend_emu::Fail("UB alignment",
                             ascend_emu::Fmt("%s: %s starts at UB byte %u, not a multiple of 32", api, role, addr_),
                             ascend_emu::doc::kAlign);
        }
        if (count * sizeof(T) > bytes_) {
            ascend_emu::Fail("LocalTensor bounds",
                             ascend_emu::Fmt("%s: %s needs %llu elements but the LocalTensor holds %u", api, role,
                                             static_cast<unsigned long long>(count), GetSize()),
                             ascend_emu::doc::kLocalTensor);
        }
    }

private:
    // Every use of the tensor's address or size: never of a default-constructed one.
    void Bound(const char* api) const
    {
        if (!bound_) emu_detail::Unbound("LocalTensor", api, ascend_emu::doc::kLocalTensor);
    }
    // VECIN, VECOUT and VECCALC: the positions in Unified Buffer on dav-2201 (vector and DMA operands, scalar access)
    bool InUb() const { return pos_ == TPosition::VECIN || pos_ == TPosition::VECOUT || pos_ == TPosition::VECCALC; }
    void CheckIndex(uint32_t index, const char* api) const
    {
        if (owner_ == nullptr || (static_cast<uint64_t>(index) + 1) * sizeof(T) > bytes_) {
            ascend_emu::Fail("LocalTensor bounds",
                             ascend_emu::Fmt("%s(%u) on a LocalTensor of %u elements", api, index, GetSize()),
                             ascend_emu::doc::kLocalTensor);
        }
        if (!InUb()) {
            ascend_emu::Fail("LocalTensor scalar access", "GetValue/SetValue work only on VECIN/VECOUT/VECCALC",
                             ascend_emu::doc::kLocalTensor);
        }
    }

    uint32_t addr_ = 0;
    uint32_t bytes_ = 0;
    TPosition pos_ = TPosition::VECCALC;
    const void* owner_ = nullptr;
    int buffer_ = -1;
    bool bound_ = false;  // made by a TQue/TBuf (or a view of one), not default-constructed
};

template <typename T>
class GlobalTensor {
public:
    using PrimType = T;
    void SetGlobalBuffer(__gm__ T* buffer, uint64_t bufferSize)
    {
        set_ = true;
        ptr_ = buffer;
        size_ = bufferSize;
        sized_ = true;
        base_ = buffer;
        region_bytes_ = bufferSize * sizeof(T);
    }
    void SetGlobalBuffer(__gm__ T* buffer)
    {
        set_ = true;
        ptr_ = buffer;
        size_ = 0;
        sized_ = false;
        base_ = buffer;
        region_bytes_ = 0;
    }
    GlobalTensor operator[](const uint64_t offset) const
    {
        Bound("GlobalTensor::operator[]");
        if (sized_ && offset > size_) {
            ascend_emu::Fail("GlobalTensor bounds",
                             ascend_emu::Fmt("operator[](%llu) on a GlobalTensor of %llu elements",
                                             static_cast<unsigned long long>(offset),
                                             static_cast<unsigned long long>(size_)),
                             ascend_emu::doc::kGlobalTensor);
        }
        GlobalTensor t = *this;
        t.ptr_ = ptr_ + offset;
        t.size_ = sized_ ? size_ - offset : 0;
        return t;
    }
    T GetValue(const uint64_t offset) const
    {
        Bound("GlobalTensor::GetValue");
        EmuCheckRange(offset, 1, "GlobalTensor::GetValue");
        ascend_emu::GmScalarAccess(false, reinterpret_cast<uintptr_t>(ptr_ + offset), sizeof(T));
        EmuPerfScalar(false);
        return ptr_[offset];
    }
    void SetValue(const uint64_t offset, T value)
    {
        Bound("GlobalTensor::SetValue");
        EmuCheckRange(offset, 1, "GlobalTensor::SetValue");
        ascend_emu::GmScalarAccess(true, reinterpret_cast<uintptr_t>(ptr_ + offset), sizeof(T));
        EmuPerfScalar(true);
        ptr_[offset] = value;
    }
    uint64_t GetSize() const { return Bound("GlobalTensor::GetSize"), size_; }
    __gm__ T* GetPhyAddr() const { return Bound("GlobalTensor::GetPhyAddr"), ptr_; }

    // ---- emulator internals -----------------------------------------------------------------
    T* EmuPtr() const { return Bound("a DMA operand"), ptr_; }
    // The performance counters attribute GM traffic to the region SetGlobalBuffer set up.
    void EmuPerfDma(int pipe, uint64_t bytes, uint32_t bursts) const
    {
        ascend_emu::perf::Dma(pipe, reinterpret_cast<uintptr_t>(base_), region_bytes_,
                              reinterpret_cast<uintptr_t>(ptr_), bytes, bursts);
    }
    void EmuPerfScalar(bool write) const
    {
        ascend_emu::perf::GmScalar(reinterpret_cast<uintptr_t>(base_), region_bytes_, sizeof(T), write);
    }
    // Elements [offset, offset + count) must lie inside the buffer given to SetGlobalBuffer.
    void EmuCheckRange(uint64_t offset, uint64_t count, const char* api) const
    {
        Bound(api);
        if (ptr_ == nullptr) {
            ascend_emu::Fail("GlobalTensor bounds", ascend_emu::Fmt("%s on a GlobalTensor with no buffer", api),
                             ascend_emu::doc::kGlobalTensor);
        }
        if (sized_ && offset + count > size_) {
            ascend_emu::Fail("GlobalTensor bounds",
                             ascend_emu::Fmt("%s touches elements [%llu, %llu) of a GlobalTensor of %llu", api,
                                             static_cast<unsigned long long>(offset),
                                             static_cast<unsigned long long>(offset + count),
                                             static_cast<unsigned long long>(size_)),
                             ascend_emu::doc::kGlobalTensor);
        }
    }
    // Bytes [offset, offset + count) in the same sense, for byte-addressed copies.
    void EmuCheckBytes(uint64_t offset, uint64_t count, const char* api) const
    {
        if (count == 0) return;
        Bound(api);
        if (ptr_ == nullptr) {
            ascend_emu::Fail("GlobalTensor bounds", ascend_emu::Fmt("%s on a GlobalTensor with no buffer", api),
                             ascend_emu::doc::kGlobalTensor);
        }
        if (sized_ && offset + count > size_ * sizeof(T)) {
            ascend_emu::Fail("GlobalTensor bounds",
                             ascend_emu::Fmt("%s touches bytes [%llu, %llu) of a GlobalTensor of %llu bytes", api,
                                             static_cast<unsigned long long>(offset),
                                             static_cast<unsigned long long>(offset + count),
                                             static_cast<unsigned long long>(size_ * sizeof(T))),
                             ascend_emu::doc::kGlobalTensor);
        }
    }

private:
    void Bound(const char* api) const
    {
        if (!set_) emu_detail::Unbound("GlobalTensor", api, ascend_emu::doc::kGlobalTensor);
    }

    bool set_ = false;  // SetGlobalBuffer was called (on this tensor or the one it is a view of)
    T* ptr_ = nullptr;
    uint64_t size_ = 0;
    bool sized_ = false;
    T* base_ = nullptr;          // what SetGlobalBuffer was given (operator[] keeps it)
    uint64_t region_bytes_ = 0;  // its size in bytes, 0 if not given
};

} // namespace AscendC
