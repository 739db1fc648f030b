// ascend-rmsnorm: the UB plan (ub_plan.h) as the kernels see it, in namespace rmsnorm::dev:
// they size their InitBuffer calls with the same arithmetic the host checks.

#ifndef ASCEND_RMSNORM_COMMON_DEVICE_PLAN_H_
#define ASCEND_RMSNORM_COMMON_DEVICE_PLAN_H_

#include "constants.h"

namespace rmsnorm {

#define RMSNORM_PLAN_FN __aicore__
namespace dev {
#include "ub_plan.h"
}  // namespace dev
#undef RMSNORM_PLAN_FN

}  // namespace rmsnorm

#endif  // ASCEND_RMSNORM_COMMON_DEVICE_PLAN_H_
