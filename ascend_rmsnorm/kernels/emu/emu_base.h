// Core of the CPU emulation of Ascend C (dav-2201): per-block state, the UB, pipes and the
// synchronisation checker. Everything a kernel does is checked against the rules the hardware
// enforces (or silently breaks on); a violation aborts with the rule and the asc-devkit doc page.
//
// Sync model: each pipe (S, V, MTE2, MTE3) counts the operations it has issued and keeps a
// vector clock of what it is guaranteed to see completed on every pipe. SetFlag<SRC_DST>
// snapshots SRC's clock, WaitFlag joins it into DST's; TQue EnQue/DeQue/FreeTensor/AllocTensor
// do the same for the pipe pairs the queue covers; PipeBarrier<PIPE_V> orders V after itself.
// Each 32-byte UB block remembers its last writer and its readers since, so every cross-pipe
// read-after-write, write-after-read and write-after-write needs a matching flag in between.
// Without --cce-auto-sync (the default here; ASCEND_RMSNORM_EMU_AUTOSYNC=1 relaxes S<->X and
// V->V the way the compiler does) every such dependency must be written in the kernel.
#pragma once

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#ifndef __NPU_ARCH__
#define __NPU_ARCH__ 2201
#endif

// Ascend C function-space and address-space qualifiers mean nothing on the CPU.
#define __global__
#define __aicore__
#define __vector__
#define __gm__
#define __ubuf__
#define GM_ADDR uint8_t*
#define KERNEL_TASK_TYPE_DEFAULT(type)
#define likely(x) (x)
#define unlikely(x) (x)

enum KernelMetaType : uint8_t {
    KERNEL_TYPE_AIV_ONLY,
    KERNEL_TYPE_AIC_ONLY,
    KERNEL_TYPE_MIX_AIV_1_0,
    KERNEL_TYPE_MIX_AIC_1_0,
    KERNEL_TYPE_MIX_AIC_1_1,
    KERNEL_TYPE_MIX_AIC_1_2,
};

// Builtin pipe and event-id names of the bisheng compiler.
enum pipe_t : int32_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_FIX };
enum event_t : int32_t {
    EVENT_ID0 = 0,
    EVENT_ID1,
    EVENT_ID2,
    EVENT_ID3,
    EVENT_ID4,
    EVENT_ID5,
    EVENT_ID6,
    EVENT_ID7,
};

namespace ascend_emu {

// ---------------------------------------------------------------------------------------------
// Arch limits (docs/zh/guide/.../硬件实现/架构规格/NPU架构版本2201.md; 静态Tensor编程.md 表5)
constexpr uint32_t kBlockBytes = 32;      // UB alignment unit ("DataBlock")
constexpr uint32_t kRepeatBytes = 256;    // one vector repeat = 8 DataBlocks
constexpr uint32_t kUbTotal = 192 * 1024; // physical UB per vector core on dav-2201
// Ascend C's reserved UB starts here (TMP_UB_OFFSET = TOTAL_VEC_LOCAL_SIZE, asc-devkit
// impl/basic_api/utils/kernel_utils_constants.h): Select's temp (emu_vector.h) lives in it.
constexpr uint32_t kTmpUbOffset = 184 * 1024;
// Usable by a kernel: 192 KB minus 256 B (cube/vector fusion) minus the 8 KB reserved by Ascend C
// from TMP_UB_OFFSET on; with ASCEND_RMSNORM_EMU_NO_RESERVED_UB (bisheng's
// --cce-disable-asc-reserved-ubuf) the 8 KB is the kernel's and the APIs that use it do not compile.
#if defined(ASCEND_RMSNORM_EMU_NO_RESERVED_UB)
constexpr uint32_t kUbUsable = kUbTotal - 256;
#else
constexpr uint32_t kUbUsable = kUbTotal - 256 - 8 * 1024;
#endif
constexpr int kMaxBufferHandles = 64;  // QBUF_MAX_LEN
constexpr int kMaxLivePerPosition = 8; // event-id pool per TPosition
constexpr int kEventIds = 8;           // QUE_MAX_EVENT on dav-2201
constexpr uint32_t kMaxBlockDim = 65535;

namespace doc {
constexpr const char* kInitBuffer = "docs/zh/api/SIMD-API/基础API/资源管理/TPipe/InitBuffer.md";
constexpr const char* kUbLimits = "docs/zh/guide/编程指南/高级编程/硬件实现/架构规格/NPU架构版本2201.md";
constexpr const char* kAlign = "docs/zh/api/SIMD-API/通用说明和约束.md (表2: Unified Buffer 32Byte对齐)";
constexpr const char* kPosition = "docs/zh/api/SIMD-API/通用说明和约束.md (表1: TPosition与物理内存映射关系)";
constexpr const char* kOverlap = "docs/zh/api/SIMD-API/通用说明和约束.md (通用地址重叠约束)";
constexpr const char* kDataCopy = "docs/zh/api/SIMD-API/基础API/Memory矢量计算/数据搬运/DataCopy（GM与UB连续数据搬运）.md";
constexpr const char* kDataCopyStrided =
    "docs/zh/api/SIMD-API/基础API/Memory矢量计算/数据搬运/DataCopy（GM与UB高维切分数据搬运）.md";
constexpr const char* kDataCopyPadIn =
    "docs/zh/api/SIMD-API/基础API/Memory矢量计算/数据搬运/DataCopyPad（GMToUB非对齐数据搬运）.md";
constexpr const char* kDataCopyPadOut =
    "docs/zh/api/SIMD-API/基础API/Memory矢量计算/数据搬运/DataCopyPad（UBToGM非对齐数据搬运）.md";
constexpr const char* kRepeat = "docs/zh/api/SIMD-API/基础API/Memory矢量计算/SIMD计算说明/高维切分.md";
constexpr const char* kMask = "docs/zh/api/SIMD-API/基础API/Memory矢量计算/SIMD计算说明/掩码.md";
constexpr const char* kCompare = "docs/zh/api/SIMD-API/基础API/Memory矢量计算/比较与选择/Compare.md";
constexpr const char* kCompares = "docs/zh/api/SIMD-API/基础API/Memory矢量计算/比较与选择/Compares.md";
constexpr const char* kSelect = "docs/zh/api/SIMD-API/基础API/Memory矢量计算/比较与选择/Select.md";
constexpr const char* kGather = "docs/zh/api/SIMD-API/基础API/Memory矢量计算/离散与聚合/Gather.md";
constexpr const char* kBrcb = "docs/zh/api/SIMD-API/基础API/Memory矢量计算/数据填充/Brcb.md";
constexpr const char* kShift = "docs/zh/api/SIMD-API/基础API/Memory矢量计算/逻辑计算/ShiftRight.md";
constexpr const char* kVecIndex = "docs/zh/api/SIMD-API/基础API/Memory矢量计算/数据填充/CreateVecIndex.md";
constexpr const char* kLocalTensor = "docs/zh/api/SIMD-API/基础API/数据结构/LocalTensor/LocalTensor简介.md";
constexpr const char* kGlobalTensor = "docs/zh/api/SIMD-API/基础API/数据结构/GlobalTensor/GlobalTensor简介.md";
constexpr const char* kAllocTensor = "docs/zh/api/SIMD-API/基础API/资源管理/TQue/AllocTensor.md";
constexpr const char* kEnQue = "docs/zh/api/SIMD-API/基础API/资源管理/TQue/EnQue.md";
constexpr const char* kDeQue = "docs/zh/api/SIMD-API/基础API/资源管理/TQue/DeQue.md";
constexpr const char* kFreeTensor = "docs/zh/api/SIMD-API/基础API/资源管理/TQue/FreeTensor.md";
constexpr const char* kTBufGet = "docs/zh/api/SIMD-API/基础API/资源管理/TBuf/Get.md";
constexpr const char* kTPipe = "docs/zh/api/SIMD-API/基础API/资源管理/TPipe/TPipe简介.md";
constexpr const char* kReleaseEventID = "docs/zh/api/SIMD-API/基础API/资源管理/TPipe/ReleaseEventID.md";
constexpr const char* kSetFlag = "docs/zh/api/SIMD-API/基础API/同步控制/核内同步/SetFlag-WaitFlag(ISASI).md";
constexpr const char* kPipeBarrier = "docs/zh/api/SIMD-API/基础API/同步控制/核内同步/PipeBarrier(ISASI).md";
constexpr const char* kSync = "docs/zh/api/SIMD-API/基础API/同步控制/核内同步/关键特性说明.md";
constexpr const char* kCast = "docs/zh/api/SIMD-API/基础API/Memory矢量计算/类型转换/Cast.md";
constexpr const char* kDtype = "docs/zh/api/SIMD-API/基础API/Memory矢量计算 (each API's 数据类型 section)";
constexpr const char* kKernel = "docs/zh/guide/编程指南/编程模型/AI-Core-SIMD编程/核函数.md";
constexpr const char* kGmOrder = "docs/zh/api/SIMD-API/基础API/数据搬运导览/概览/总体约束说明.md";
} // namespace doc

// ---------------------------------------------------------------------------------------------
// Failure: print the rule, what happened, where, and the doc page; then abort like a core would.
struct LaunchInfo {
    const char* kernel = "?";
    int64_t block_idx = -1;
    int64_t block_num = 0;
};
inline thread_local LaunchInfo g_launch;

[[noreturn]] inline void Fail(const char* rule, const std::string& detail, const char* doc_page)
{
    std::fprintf(stderr,
                 "\nascend-rmsnorm emu: rule violated: %s\n  %s\n  kernel %s, block %lld of %lld\n"
                 "  on an NPU this %s\n  see asc-devkit %s\n",
                 rule, detail.c_str(), g_launch.kernel, static_cast<long long>(g_launch.block_idx),
                 static_cast<long long>(g_launch.block_num),
                 "is undefined behaviour: a wrong result, a hang or an AI Core exception", doc_page);
    std::fflush(stderr);
    std::abort();
}

template <typename... Args>
inline std::string Fmt(const char* fmt, Args... args)
{
    char buf[512];
    std::snprintf(buf, sizeof(buf), fmt, args...);
    return std::string(buf);
}

// A switch: 1/true/yes/on (any case, surrounding blanks allowed) is on; anything else is off, as
// ascend_rmsnorm/_env.py parses it (it warns about values that are neither on nor off).
inline bool EnvFlag(const char* name)
{
    const char* v = std::getenv(name);
    std::string s = v == nullptr ? "" : v;
    const size_t first = s.find_first_not_of(" \t\r\n\v\f");
    s = first == std::string::npos ? "" : s.substr(first, s.find_last_not_of(" \t\r\n\v\f") - first + 1);
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s == "1" || s == "true" || s == "yes" || s == "on";
}

// ---------------------------------------------------------------------------------------------
// Pipes and the per-block state.
enum Pipe : int { kS = 0, kV = 1, kMte2 = 2, kMte3 = 3, kPipes = 4 };
inline const char* PipeName(int p)
{
    static const char* names[] = {"S (scalar)", "V (vector)", "MTE2 (GM->UB)", "MTE3 (UB->GM)"};
    return names[p];
}
using Clock = std::array<uint32_t, kPipes>;

inline void Join(Clock& into, const Clock& from)
{
    for (int i = 0; i < kPipes; ++i) into[i] = std::max(into[i], from[i]);
}

struct UbBlock {
    int8_t writer = -1;      // pipe of the last write, -1 if none tracked
    uint32_t write_seq = 0;  // that pipe's op number
    Clock read_seq{};        // per pipe: op number of the last read since that write
    uint32_t v_read_before = 0;  // the vector read before read_seq[kV]'s op (TrackWrite's overwrites)
};

struct FlagState {
    bool set = false;
    Clock snapshot{};
};

constexpr int kNumHardEvents = 16;

struct BlockState {
    alignas(64) uint8_t ub[kUbTotal];
    UbBlock blocks[kUbTotal / kBlockBytes];
    uint32_t seq[kPipes];
    Clock clock[kPipes]; // clock[P][Q]: Q's ops that P is guaranteed to see completed
    FlagState flags[kNumHardEvents][kEventIds];
    bool reserved_ids[kNumHardEvents][kEventIds];
    bool alloc_ids[kNumHardEvents][kEventIds];  // the reserved ids AllocEventID handed out (the rest: queues')
    bool autosync = false;
    void* pipe = nullptr; // the live TPipe, one per kernel
    uint32_t ub_peak = 0;
    // Bytes from UB offset 0 that may differ from the poison (and UbBlocks that may be tracked): a
    // block only touches UB inside buffers its TPipe reserved, all below its ub_peak, so a reset
    // needs to clear only that far. The whole UB counts as dirty before the first reset.
    uint32_t dirty_ub = kUbTotal;
    uint32_t tracked_ub = kUbTotal;
    // The compare-mask register (SetCmpMask; the count form of Select loads it too): what it holds,
    // whether that is a value at all (mode 2 leaves an address), the V op that loaded it and the last
    // register-form Select that read it. And the vector mask as far as the emulation knows it: counter
    // mode (SetMaskCount until SetMaskNorm) and the count SetVectorMask set since the last vector
    // instruction (the emulation does not model which mask each API leaves behind).
    uint8_t cmpmask[16] = {};
    bool cmpmask_value = false;
    uint32_t cmpmask_seq = 0, cmpmask_read_seq = 0;
    bool vmask_counter = false, vmask_count_set = false;
    uint64_t vmask_count = 0;
    // Destination bytes of the DMA in progress that an earlier copy of the same pipe also writes with no
    // PipeBarrier of that pipe in between: which copy lands last is not defined, so once the DMA has
    // moved its data they are made indeterminate (PoisonUnorderedCopies, emu_datacopy.h).
    std::vector<uint32_t> unordered_ub;                          // 32-byte UB blocks
    std::vector<std::pair<uintptr_t, uintptr_t>> unordered_gm;  // GM byte ranges
    // One bit per UB byte: set while nothing of this kernel has written the byte (or a queue buffer it lies in
    // was allocated again, its contents undefined). The poison fill is a NaN to arithmetic but an all-ones
    // mask to Select, which would keep src0 where it reads such bytes: Vsel poisons those elements instead.
    uint8_t undefined[kUbTotal / 8];

    void Reset(bool auto_sync, bool poison = true)
    {
        const uint32_t touched = (ub_peak + kBlockBytes - 1) / kBlockBytes * kBlockBytes;
        dirty_ub = std::min(kUbTotal, std::max(dirty_ub, touched));
        tracked_ub = std::min(kUbTotal, std::max(tracked_ub, touched));
        if (poison) { // poison: 0xFFFF... is a NaN in every float format
            std::memset(ub, 0xFF, dirty_ub);
            dirty_ub = 0;
        }
        std::fill(blocks, blocks + tracked_ub / kBlockBytes, UbBlock{});
        std::memset(undefined, 0xFF, sizeof(undefined));
        blocks[kTmpUbOffset / kBlockBytes] = UbBlock{};  // Select's temp, above every buffer
        tracked_ub = 0;
        std::memset(seq, 0, sizeof(seq));
        for (auto& c : clock) c.fill(0);
        for (auto& row : flags)
            for (auto& f : row) f = FlagState{};
        std::memset(reserved_ids, 0, sizeof(reserved_ids));
        std::memset(alloc_ids, 0, sizeof(alloc_ids));
        unordered_ub.clear();
        unordered_gm.clear();
        autosync = auto_sync;
        pipe = nullptr;
        ub_peak = 0;
        std::memset(cmpmask, 0xFF, sizeof(cmpmask));
        cmpmask_value = false;
        cmpmask_seq = cmpmask_read_seq = 0;
        vmask_counter = vmask_count_set = false;
        vmask_count = 0;
    }
};

inline thread_local std::unique_ptr<BlockState> g_state_owner;
inline thread_local BlockState* g_state = nullptr;

inline BlockState& State()
{
    if (g_state == nullptr) {
        Fail("kernel launch", "an Ascend C API was called outside a kernel launched through the emulator",
             doc::kKernel);
    }
    return *g_state;
}

namespace perf {
// The performance model's note of a vector op that writes UB bytes an earlier vector op of the same
// barrier window read or wrote (emu_perf.h; the `war_barriers` what-if).
inline void SameWindowOverwrite(uint32_t op);
// Whether this run only counts (emu_perf.h): no data is computed, nor any byte's mark read.
inline bool SkipCompute();
}  // namespace perf

// ---------------------------------------------------------------------------------------------
// Hazard tracking. An "op" is one API call on one pipe; all its operands share its number.
// A vector instruction may leave any mask behind (the emulation does not model which), so the count a
// register-form Select runs under is known only from a SetVectorMask after the last one. Counter mode is
// for that Select alone: any other vector instruction in it aborts (the kernels call SetMaskNorm right
// after; the register-form Select and SetCmpMask number their ops with VectorOpKeepingMask).
inline uint32_t BeginOp(int pipe)
{
    BlockState& s = State();
    if (pipe == kV) {
        if (s.vmask_counter) {
            Fail("vector mask",
                 "a vector instruction in counter mode (SetMaskCount) other than the register form of Select: "
                 "SetMaskNorm() first",
                 doc::kMask);
        }
        s.vmask_count_set = false;
    }
    return ++s.seq[pipe];
}
inline uint32_t VectorOpKeepingMask() { return ++State().seq[kV]; }

// V op `op` loads the compare-mask register: from `bytes` (16 of them), or, with nullptr, an address
// (a mode-2 Select's), which is no value a register-form Select may read.
inline void LoadCmpMask(uint32_t op, const void* bytes)
{
    BlockState& s = State();
    std::memset(s.cmpmask, 0xFF, sizeof(s.cmpmask));
    if (bytes != nullptr) std::memcpy(s.cmpmask, bytes, sizeof(s.cmpmask));
    s.cmpmask_value = bytes != nullptr;
    s.cmpmask_seq = op;
}

inline bool AutoSynced(const BlockState& s, int from, int to)
{
    return s.autosync && (from == kS || to == kS || (from == kV && to == kV));
}

inline void CheckOrdered(BlockState& s, int earlier_pipe, uint32_t earlier_seq, int pipe, const char* kind,
                         uint32_t addr, const char* what)
{
    if (earlier_seq == 0 || AutoSynced(s, earlier_pipe, pipe)) return;
    if (earlier_pipe == pipe) {
        // Pipes issue their own queue in order, but without PipeBarrier<PIPE_MTE2> (UB) or <PIPE_MTE3>
        // (GM, GmAccess) between them two copies into overlapping destination bytes may leave either's
        // data there (数据搬运导览/概览/总体约束说明.md 多指令同步: the barrier keeps them in order,
        // "防止出现异常数据"): not a fault, indeterminate bytes, which the emulation poisons.
        if (pipe == kMte2 && std::strcmp(kind, "write-after-write") == 0) {
            if (s.clock[kMte2][kMte2] < earlier_seq) s.unordered_ub.push_back(addr / kBlockBytes);
            return;
        }
        // The vector unit needs PipeBarrier<PIPE_V> before an instruction reads what an earlier one wrote.
        if (pipe != kV || std::strcmp(kind, "read-after-write") != 0) return;
        if (s.clock[kV][kV] >= earlier_seq) return;
        Fail("pipe sync (V->V)",
             Fmt("%s of UB byte %u reads data written by an earlier vector instruction with no "
                 "PipeBarrier<PIPE_V>() in between",
                 what, addr),
             doc::kPipeBarrier);
    }
    if (s.clock[pipe][earlier_pipe] >= earlier_seq) return;
    Fail("pipe sync",
         Fmt("%s: %s on pipe %s touches UB byte %u, last used by pipe %s (op %u), with no SetFlag/WaitFlag "
             "(or TQue EnQue/DeQue, FreeTensor/AllocTensor) from %s to %s in between",
             kind, what, PipeName(pipe), addr, PipeName(earlier_pipe), earlier_seq, PipeName(earlier_pipe),
             PipeName(pipe)),
         doc::kSync);
}

// UB bytes [addr, addr + bytes) are (defined) or are not (!defined) what this kernel wrote there.
inline void MarkDefined(uint32_t addr, uint32_t bytes, bool defined)
{
    uint8_t* bits = State().undefined;
    const uint32_t end = std::min(addr + bytes, kUbTotal);
    auto one = [&](uint32_t i) {
        const uint8_t b = static_cast<uint8_t>(1u << (i % 8));
        bits[i / 8] = static_cast<uint8_t>(defined ? bits[i / 8] & ~b : bits[i / 8] | b);
    };
    uint32_t i = addr;
    for (; i < end && i % 8 != 0; ++i) one(i);
    const uint32_t whole = (end - std::min(i, end)) / 8;
    std::memset(bits + i / 8, defined ? 0x00 : 0xFF, whole);
    for (i += whole * 8; i < end; ++i) one(i);
}
inline bool Undefined(uint32_t addr) { return ((State().undefined[addr / 8] >> (addr % 8)) & 1u) != 0; }
// Whether any of UB bytes [addr, addr + bytes) is one nothing of this kernel wrote (whole map bytes at a time).
inline bool AnyUndefined(uint32_t addr, uint32_t bytes)
{
    const uint8_t* bits = State().undefined;
    const uint32_t end = std::min(addr + bytes, kUbTotal);
    uint32_t i = addr;
    for (; i < end && i % 8 != 0; ++i)
        if (Undefined(i)) return true;
    for (; i + 8 <= end; i += 8)
        if (bits[i / 8] != 0) return true;
    for (; i < end; ++i)
        if (Undefined(i)) return true;
    return false;
}
// An instruction that makes each destination byte from the same source byte alone (a UB->UB copy, Not)
// makes an undefined one from an undefined one: on an NPU it moves or flips whatever the UB held. Its
// source's marks, one per byte, taken before its TrackWrite marks the destination defined (empty: all
// defined, or a count-only run that computes nothing); CarryUndefined puts them on the destination after
// it. Bytes past the UB are not read: the instruction's own operand checks name such a range.
inline std::vector<uint8_t> UndefinedMarks(uint32_t addr, uint32_t bytes)
{
    std::vector<uint8_t> marks;
    if (perf::SkipCompute() || addr >= kUbTotal) return marks;
    bytes = std::min(bytes, kUbTotal - addr);
    if (!AnyUndefined(addr, bytes)) return marks;
    marks.resize(bytes);
    for (uint32_t i = 0; i < bytes; ++i) marks[i] = Undefined(addr + i) ? 1 : 0;
    return marks;
}
inline void CarryUndefined(uint32_t addr, const std::vector<uint8_t>& marks)
{
    for (uint32_t i = 0; i < marks.size(); ++i)
        if (marks[i] != 0) MarkDefined(addr + i, 1, false);
}
// UB bytes [addr, addr + bytes) made indeterminate: the poison fill, a NaN to arithmetic, and marked as
// nothing this kernel wrote, so that a Select over them poisons too (to it the fill is an all-ones mask).
inline void PoisonUb(uint32_t addr, uint32_t bytes)
{
    std::memset(State().ub + addr, 0xFF, bytes);
    MarkDefined(addr, bytes, false);
}

inline void TrackRead(int pipe, uint32_t op, uint32_t addr, uint32_t bytes, const char* what)
{
    if (bytes == 0) return;
    BlockState& s = State();
    for (uint32_t b = addr / kBlockBytes; b <= (addr + bytes - 1) / kBlockBytes; ++b) {
        UbBlock& blk = s.blocks[b];
        // a read of what the same instruction wrote (an accumulating repeat) is ordered by the
        // instruction itself; which overlaps are allowed there is the overlap rule's business
        if (blk.writer >= 0 && !(blk.writer == pipe && blk.write_seq == op)) {
            CheckOrdered(s, blk.writer, blk.write_seq, pipe, "read-after-write", b * 32, what);
        }
        if (pipe == kV && blk.read_seq[kV] != op) blk.v_read_before = blk.read_seq[kV];
        blk.read_seq[pipe] = std::max(blk.read_seq[pipe], op);
    }
}

inline void TrackWrite(int pipe, uint32_t op, uint32_t addr, uint32_t bytes, const char* what)
{
    if (bytes == 0) return;
    BlockState& s = State();
    for (uint32_t b = addr / kBlockBytes; b <= (addr + bytes - 1) / kBlockBytes; ++b) {
        UbBlock& blk = s.blocks[b];
        if (blk.writer >= 0 && (blk.writer != pipe || (pipe == kMte2 && blk.write_seq != op))) {
            CheckOrdered(s, blk.writer, blk.write_seq, pipe, "write-after-write", b * 32, what);
        }
        for (int r = 0; r < kPipes; ++r) {
            if (r != pipe) CheckOrdered(s, r, blk.read_seq[r], pipe, "write-after-read", b * 32, what);
        }
        if (pipe == kV) {
            // Allowed (the pipe runs in order; docs/design.md §9), but noted for the model: another op
            // of this barrier window read or wrote these bytes.
            const uint32_t read = blk.read_seq[kV] != op ? blk.read_seq[kV] : blk.v_read_before;
            const uint32_t wrote = blk.writer == kV && blk.write_seq != op ? blk.write_seq : 0;
            if (std::max(read, wrote) > s.clock[kV][kV]) perf::SameWindowOverwrite(op);
        }
        blk.writer = static_cast<int8_t>(pipe);
        blk.write_seq = op;
        blk.read_seq.fill(0);
        blk.v_read_before = 0;
    }
    MarkDefined(addr, bytes, true);
}

// What `pipe` knows right now, for a flag or a queue event to hand to another pipe.
inline Clock Snapshot(int pipe)
{
    BlockState& s = State();
    Clock c = s.clock[pipe];
    c[pipe] = s.seq[pipe];
    return c;
}

inline void Observe(int pipe, const Clock& c) { Join(State().clock[pipe], c); }

} // namespace ascend_emu

// GM ordering (per launch), emu_gm.h: after everything above, which it uses.
#include "emu_gm.h"
