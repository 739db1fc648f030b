// ascend-rmsnorm: a launch the runtime refuses is reported, not ignored.
//
// `kernel<<<...>>>` returns nothing. The runtime records a launch it refuses as the calling thread's
// last error, which aclrtGetLastError(ACL_RT_THREAD_LEVEL) returns and clears and aclrtPeekAtLastError
// returns and keeps (acl/acl_rt.h, CANN 8.1). RMSNORM_LAUNCH checks it after the launch, but only when
// the thread had no error before: an error that an earlier call of this thread left (torch_npu's
// allocator retrying a failed aclrtMalloc, say) is neither ours to report nor ours to clear, so that
// launch goes unchecked.
//
// The two functions are looked up in the libascendcl.so the process has loaded (torch_npu loads it;
// the launches call into it), not linked by name: a CANN without them loads the library as before and
// its launches go unchecked (ascend_rmsnorm_launch_check_state() says which). The CPU emulation keeps a
// thread error of its own, which tests set (emu/emu_launch.h).
//
// A launcher's status is then 0, one of its own argument codes (below kRefusedNoCode), kRefusedNoCode
// (the runtime recorded a code below kFirstRuntimeCode, which this ABI could mistake for one of those),
// or the runtime's error code itself (ACL's are 100000 and up: acl/acl_base.h,
// acl/error_codes/rt_error_codes.h).

#ifndef ASCEND_RMSNORM_HOST_LAUNCH_CHECK_H_
#define ASCEND_RMSNORM_HOST_LAUNCH_CHECK_H_

#include <cstdint>

#include "../common/platform.h"

#if !defined(ASCEND_RMSNORM_EMU)
#include <dlfcn.h>
#endif

namespace rmsnorm_host {
namespace launch {

constexpr int32_t kRefusedNoCode = 7;
constexpr int32_t kFirstRuntimeCode = 100;

#if defined(ASCEND_RMSNORM_EMU)
inline bool Checked() { return true; }
inline int32_t PeekError() { return ascend_emu::PeekThreadError(); }
inline int32_t TakeError() { return ascend_emu::TakeThreadError(); }
#else
using LastErrorFn = int (*)(int);  // aclError aclrtPeekAtLastError / aclrtGetLastError(aclrtLastErrLevel)
constexpr int kThreadLevel = 0;    // ACL_RT_THREAD_LEVEL

struct ErrorApi {
    LastErrorFn peek;
    LastErrorFn take;
};

inline ErrorApi FindErrorApi()
{
    void* acl = dlopen("libascendcl.so", RTLD_NOW | RTLD_NOLOAD);
    if (acl == nullptr) return ErrorApi{nullptr, nullptr};
    const ErrorApi api{reinterpret_cast<LastErrorFn>(dlsym(acl, "aclrtPeekAtLastError")),
                       reinterpret_cast<LastErrorFn>(dlsym(acl, "aclrtGetLastError"))};
    if (api.peek == nullptr || api.take == nullptr) return ErrorApi{nullptr, nullptr};
    return api;
}

inline const ErrorApi& Api()
{
    static const ErrorApi api = FindErrorApi();
    return api;
}

inline bool Checked() { return Api().peek != nullptr; }
inline int32_t PeekError() { return Api().peek(kThreadLevel); }
inline int32_t TakeError() { return Api().take(kThreadLevel); }
#endif

// Whether the launch about to be made can be checked: the functions are there and the thread is clean.
inline bool CanCheck() { return Checked() && PeekError() == 0; }

// The launcher's status for a launch that CanCheck() allowed: 0, or what the runtime recorded.
inline int32_t Outcome()
{
    const int32_t code = TakeError();
    if (code == 0) return 0;
    return code >= kFirstRuntimeCode ? code : kRefusedNoCode;
}

}  // namespace launch
}  // namespace rmsnorm_host

// Launch `kernel`; when the runtime refuses it, return its status from the enclosing launcher.
#define RMSNORM_LAUNCH(kernel, blocks, stream, ...)                                  \
    do {                                                                             \
        const bool rmsnormCheck = rmsnorm_host::launch::CanCheck();                  \
        RMSNORM_CHEVRON(kernel, blocks, stream, __VA_ARGS__);                        \
        if (rmsnormCheck) {                                                          \
            const int32_t rmsnormStatus = rmsnorm_host::launch::Outcome();           \
            if (rmsnormStatus != 0) return rmsnormStatus;                            \
        }                                                                            \
    } while (0)

// Whether this thread's launches are checked now: -1 never (this CANN lacks the functions), 0 yes, else
// the error an earlier call left on the thread, which keeps its launches unchecked until its owner takes
// it (`ascend-rmsnorm selftest` reports it). Inline and used: a library may include this header twice.
extern "C" __attribute__((visibility("default"), used)) inline int32_t ascend_rmsnorm_launch_check_state()
{
    if (!rmsnorm_host::launch::Checked()) return -1;
    return rmsnorm_host::launch::PeekError();
}

#endif  // ASCEND_RMSNORM_HOST_LAUNCH_CHECK_H_
