// CPU emulation of the Ascend C subset that ascend-rmsnorm's kernels use, for dav-2201
// (Atlas A2/A3). Header-only C++17; an Ascend C source compiles against it unchanged when built
// with -DASCEND_RMSNORM_EMU -I<this dir>, and runs on the host with every documented rule that
// the NPU would break silently (UB budget, alignment, copy lengths, repeat ranges, bounds, queue
// and event protocol, cross-pipe synchronisation, operand types, cast modes) checked and fatal.
//
// What this cannot tell you: whether bisheng accepts the source, real timings, and the exact
// hardware behaviour where the docs leave it open (the in-repeat tree of WholeReduceSum, which
// is why it is not emulated; the saturation mode of casts and of half/int16_t/int32_t arithmetic,
// which is a switch: ASCEND_RMSNORM_EMU_SATURATE=1). ASCEND_RMSNORM_EMU_AUTOSYNC=1 models --cce-auto-sync.
#pragma once

#include "emu_base.h"
#include "emu_perf.h"
#include "emu_types.h"
#include "emu_tensor.h"
#include "emu_pipe.h"
#include "emu_datacopy.h"
#include "emu_vector.h"
#include "emu_launch.h"
