// CPU emulation of the Ascend C subset ascend-rmsnorm's kernels use (work in progress).
#pragma once
#include <cstdint>
#define __global__
#define __aicore__
#define __vector__
#define __gm__
