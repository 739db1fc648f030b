// ascend-rmsnorm: what differs between the builds (bisheng -x asc, CANN 8.0-8.3 -xcce, the CPU
// emulation): how a kernel is declared and launched, and one API spelling.

#ifndef ASCEND_RMSNORM_COMMON_PLATFORM_H_
#define ASCEND_RMSNORM_COMMON_PLATFORM_H_

// RMSNORM_CHEVRON is the bare launch; launchers use RMSNORM_LAUNCH (host/launch_check.h), which also
// reports a launch the runtime refused.
#if defined(ASCEND_RMSNORM_EMU)
// The CPU emulation runs every block index, in a shuffled order, instead of a chevron launch.
#define RMSNORM_CHEVRON(kernel, blocks, stream, ...) \
    ((void)(stream), ascend_emu::Launch(#kernel, (blocks), [&]() { kernel(__VA_ARGS__); }))
#else
#define RMSNORM_CHEVRON(kernel, blocks, stream, ...) kernel<<<(blocks), 0, (stream)>>>(__VA_ARGS__)
#endif

#if defined(ASCEND_RMSNORM_LEGACY_CCE) && !defined(ASCEND_RMSNORM_EMU)
// CANN 8.0-8.3 (-xcce): vector-only comes from --cce-aicore-arch=dav-c220-vec.
#define RMSNORM_KERNEL extern "C" __global__ __aicore__
// The older name of Compares (both exist in newer CANN; 8.0-8.3 know only this one).
#define RMSNORM_COMPARES CompareScalar
#else
#define RMSNORM_KERNEL __global__ __vector__
#define RMSNORM_COMPARES Compares
#endif

#endif  // ASCEND_RMSNORM_COMMON_PLATFORM_H_
