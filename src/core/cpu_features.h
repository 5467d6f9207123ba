// The CPU features the engine cares about: one table (cpu_features.cpp), read by the compile
// cache's key (which kernels a plan picks depends on them) and by model files (which features a
// file needs).
#pragma once
#include <string>

namespace updraft {

// The features this process runs with, in the table's order, e.g. "sse4.2,avx,avx2,fma,f16c".
std::string cpu_features();
// The features the engine's baseline kernels are compiled for (CMakeLists.txt: -mavx2 -mfma
// -mf16c): a model file records them and a load on a CPU without any of them is refused.
std::string engine_required_cpu_features();
// Whether this CPU has every feature of a comma-separated list; a name the table does not know
// counts as missing. `missing` (optional) gets the ones it lacks, comma-separated.
bool cpu_has_features(const std::string& features, std::string* missing = nullptr);

}  // namespace updraft
