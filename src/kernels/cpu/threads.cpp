#include "kernels/cpu/threads.h"

#include <cstdlib>

namespace updraft::cpu {

double min_work_per_thread() {
  static const double value = [] {
    const char* env = std::getenv("UPDRAFT_MIN_WORK_PER_THREAD");
    if (env == nullptr || *env == '\0') return kMinWorkPerThread;
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    return end != env && *end == '\0' && v > 0 ? v : kMinWorkPerThread;
  }();
  return value;
}

}  // namespace updraft::cpu
