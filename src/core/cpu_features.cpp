#include "core/cpu_features.h"

#include <cstddef>

namespace updraft {

namespace {

struct Feature {
  const char* name;
  bool has;
};

// __builtin_cpu_supports takes a literal, so the table is built here, once.
const Feature* table(size_t* n) {
  static const Feature features[] = {
      {"sse4.2", (__builtin_cpu_init(), __builtin_cpu_supports("sse4.2") != 0)},
      {"avx", __builtin_cpu_supports("avx") != 0},
      {"avx2", __builtin_cpu_supports("avx2") != 0},
      {"fma", __builtin_cpu_supports("fma") != 0},
      {"avx512f", __builtin_cpu_supports("avx512f") != 0},
      {"avx512bw", __builtin_cpu_supports("avx512bw") != 0},
      {"avx512vl", __builtin_cpu_supports("avx512vl") != 0},
      {"avx512vnni", __builtin_cpu_supports("avx512vnni") != 0},
      {"avx512bf16", __builtin_cpu_supports("avx512bf16") != 0},
  };
  *n = sizeof features / sizeof features[0];
  return features;
}

}  // namespace

std::string cpu_features() {
  size_t n = 0;
  const Feature* f = table(&n);
  std::string r;
  for (size_t i = 0; i < n; ++i)
    if (f[i].has) r += (r.empty() ? "" : ",") + std::string(f[i].name);
  return r;
}

// f16c is implied by every AVX2 CPU the engine targets (x86-64-v3) and is not in the table, so
// the cache keys written before model files existed stay the same.
std::string engine_required_cpu_features() { return "avx2,fma"; }

bool cpu_has_features(const std::string& features, std::string* missing) {
  size_t n = 0;
  const Feature* f = table(&n);
  bool all = true;
  size_t b = 0;
  while (b <= features.size()) {
    size_t e = features.find(',', b);
    if (e == std::string::npos) e = features.size();
    std::string name = features.substr(b, e - b);
    b = e + 1;
    if (name.empty()) continue;
    bool has = false;
    for (size_t i = 0; i < n; ++i)
      if (name == f[i].name) has = f[i].has;
    if (!has) {
      all = false;
      if (missing) *missing += (missing->empty() ? "" : ",") + name;
    }
  }
  return all;
}

}  // namespace updraft
