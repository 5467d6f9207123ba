// The engine's own sdpa kernel (attention.cpp, with AVX-512 tiles in attention_avx512.cpp): a
// CPU kernel written here, not a oneDNN primitive (oneDNN 3.2 has no fused attention), so it
// lives with the other fast CPU kernels. Registered by the registry (registry.cpp).
#pragma once

namespace updraft {

class KernelRegistry;
void register_cpu_attention_kernels(KernelRegistry& r);  // sdpa, f32

}  // namespace updraft
