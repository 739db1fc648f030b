// Running a kernel on the CPU: every block index once, in a shuffled order (to expose any
// assumption about the order blocks run in), each block with a fresh UB and sync state.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "emu_pipe.h"

// Builtin block variables of the bisheng compiler.
#define block_idx (ascend_emu::g_launch.block_idx)
#define block_num (ascend_emu::g_launch.block_num)

namespace ascend_emu {

inline thread_local std::unordered_map<std::string, uint32_t> g_peak_ub;
inline thread_local std::unordered_map<std::string, uint32_t> g_last_blocks;  // block_dim of each kernel's last launch
inline thread_local uint64_t g_launches = 0;
// Nanoseconds this thread spent inside Launch (the emulated device's work, which an NPU does
// asynchronously): benchmarks subtract it to see the host-side cost of a call.
inline thread_local uint64_t g_device_ns = 0;

// ASCEND_RMSNORM_EMU_SEED: 1-20 decimal digits below 2^64 and nothing else, as ascend_rmsnorm/_env.py
// parses it (which warns about any other value); anything else is ignored, as if unset.
inline bool ParseSeed(const char* text, uint64_t* out)
{
    if (text == nullptr || text[0] == '\0' || std::strlen(text) > 20) return false;
    for (const char* c = text; *c != '\0'; ++c) {
        if (*c < '0' || *c > '9') return false;
    }
    errno = 0;
    *out = std::strtoull(text, nullptr, 10);
    return errno != ERANGE;
}

inline uint64_t LaunchSeed()
{
    uint64_t fixed = 0;
    if (ParseSeed(std::getenv("ASCEND_RMSNORM_EMU_SEED"), &fixed)) return fixed + g_launches;
    return 0x9E3779B97F4A7C15ull * (g_launches + 1);
}

// The runtime's thread-level last error, as aclrtPeekAtLastError / aclrtGetLastError show it
// (host/launch_check.h), and the launch a test has the runtime refuse: the emulation's runtime refuses
// nothing by itself.
inline thread_local int32_t g_thread_error = 0;
inline thread_local int64_t g_refuse_in = -1;  // launches on this thread before the refused one; -1: none
inline thread_local int32_t g_refuse_code = 0;

inline int32_t PeekThreadError() { return g_thread_error; }
inline int32_t TakeThreadError()
{
    const int32_t code = g_thread_error;
    g_thread_error = 0;
    return code;
}

// Whether the runtime refuses this launch (it then runs no block and records the test's code).
inline bool Refused()
{
    if (g_refuse_in < 0) return false;
    if (g_refuse_in-- > 0) return false;
    g_thread_error = g_refuse_code;
    return true;
}

template <typename Body>
inline void Launch(const char* kernel, uint32_t block_dim, Body&& body)
{
    if (block_dim < 1 || block_dim > kMaxBlockDim) {
        g_launch = LaunchInfo{kernel, -1, block_dim};
        Fail("block dim", Fmt("launch with %u blocks; numBlocks must be in [1, 65535]", block_dim), doc::kKernel);
    }
    if (Refused()) return;
    const auto started = std::chrono::steady_clock::now();
    if (!g_state_owner) g_state_owner.reset(new BlockState);
    std::vector<uint32_t> order(block_dim);
    std::iota(order.begin(), order.end(), 0u);
    std::mt19937_64 rng(LaunchSeed());
    std::shuffle(order.begin(), order.end(), rng);
    ++g_launches;
    const bool autosync = EnvFlag("ASCEND_RMSNORM_EMU_AUTOSYNC");
    uint32_t& peak = g_peak_ub[kernel];
    g_last_blocks[kernel] = block_dim;
    perf::BeginLaunch(kernel, block_dim);
    GmBeginLaunch(!perf::SkipCompute());
    for (uint32_t idx : order) {
        g_launch = LaunchInfo{kernel, idx, block_dim};
        g_state = g_state_owner.get();
        g_state->Reset(autosync, !perf::SkipCompute());
        perf::BeginBlock(idx);
        body();
        for (int e = 0; e < kNumHardEvents; ++e) {
            for (int id = 0; id < kEventIds; ++id) {
                if (g_state->flags[e][id].set) {
                    Fail("event protocol",
                         Fmt("the kernel ended with event %d id %d set and never waited on; the flag leaks into "
                             "later kernels",
                             e, id),
                         doc::kSetFlag);
                }
            }
        }
        peak = std::max(peak, g_state->ub_peak);
        perf::EndBlock(g_state->ub_peak, g_state->seq);
        g_state = nullptr;
    }
    g_launch = LaunchInfo{};
    g_device_ns += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count());
}

// `kernel`'s figure in one of the per-kernel tables above (0: no launch of it since the last reset).
inline uint32_t KernelStat(const std::unordered_map<std::string, uint32_t>& table, const char* kernel)
{
    auto it = table.find(kernel);
    return it == table.end() ? 0u : it->second;
}

} // namespace ascend_emu

// Introspection for tests: the largest UB footprint any block of `kernel` reserved since the last reset.
extern "C" __attribute__((visibility("default"), used)) inline uint32_t ascend_rmsnorm_emu_peak_ub(const char* kernel)
{
    return ascend_emu::KernelStat(ascend_emu::g_peak_ub, kernel);
}
// Introspection for tests: the blocks of the last launch of `kernel` since the last reset (0: none).
extern "C" __attribute__((visibility("default"), used)) inline uint32_t ascend_rmsnorm_emu_last_blocks(const char* kernel)
{
    return ascend_emu::KernelStat(ascend_emu::g_last_blocks, kernel);
}
// The UB addresses dst, src0, src1 of this thread's last count-form binary instruction, when it was an
// `api` one (1); 0 otherwise.
extern "C" __attribute__((visibility("default"), used)) inline int32_t ascend_rmsnorm_emu_last_operands(
    const char* api, uint32_t* out)
{
    const auto& last = AscendC::emu_detail::g_last_operands;
    if (last.api == nullptr || std::strcmp(last.api, api) != 0) return 0;
    for (int i = 0; i < 3; ++i) out[i] = last.addr[i];
    return 1;
}
// Nanoseconds this thread has spent inside emulated launches since it started.
extern "C" __attribute__((visibility("default"), used)) inline uint64_t ascend_rmsnorm_emu_device_ns()
{
    return ascend_emu::g_device_ns;
}
extern "C" __attribute__((visibility("default"), used)) inline void ascend_rmsnorm_emu_reset_stats()
{
    ascend_emu::g_peak_ub.clear();
    ascend_emu::g_last_blocks.clear();
}
// The seed the next launch will use (tests: ASCEND_RMSNORM_EMU_SEED is parsed as _env.py parses it).
extern "C" __attribute__((visibility("default"), used)) inline uint64_t ascend_rmsnorm_emu_next_seed()
{
    return ascend_emu::LaunchSeed();
}
// How the emulation reads a switch such as ASCEND_RMSNORM_EMU_SATURATE (tests compare it with _env.py).
extern "C" __attribute__((visibility("default"), used)) inline int32_t ascend_rmsnorm_emu_env_flag(const char* name)
{
    return ascend_emu::EnvFlag(name) ? 1 : 0;
}
// Tests: the runtime refuses this thread's launch number `after` from now (0: the next), recording
// `code`; a negative `after` cancels. And the thread's last error, set as another call would leave it.
extern "C" __attribute__((visibility("default"), used)) inline void ascend_rmsnorm_emu_refuse_launch(int64_t after,
                                                                                                   int32_t code)
{
    ascend_emu::g_refuse_in = after < 0 ? -1 : after;
    ascend_emu::g_refuse_code = code;
}
extern "C" __attribute__((visibility("default"), used)) inline void ascend_rmsnorm_emu_set_thread_error(int32_t code)
{
    ascend_emu::g_thread_error = code;
}
extern "C" __attribute__((visibility("default"), used)) inline int32_t ascend_rmsnorm_emu_thread_error()
{
    return ascend_emu::g_thread_error;
}
extern "C" __attribute__((visibility("default"), used)) inline uint32_t ascend_rmsnorm_emu_ub_usable()
{
    return ascend_emu::kUbUsable;
}
