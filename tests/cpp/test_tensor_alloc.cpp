// aligned_alloc_shared (src/core/tensor.cpp): small buffers 64-byte aligned, large ones 2 MB
// aligned (so they can be backed by transparent huge pages), all writable to their end.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "core/tensor.h"

using namespace updraft;

TEST(TensorAlloc, AlignmentFollowsSize) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{100}, kHugePage - 1, kHugePage, kHugePage + 1, 3 * kHugePage + 5}) {
    auto p = aligned_alloc_shared(bytes);
    ASSERT_NE(p, nullptr);
    const auto addr = reinterpret_cast<uintptr_t>(p.get());
    EXPECT_EQ(addr % 64, 0u) << bytes;
    if (bytes >= kHugePage) EXPECT_EQ(addr % kHugePage, 0u) << bytes;
    if (bytes) std::memset(p.get(), 0x5a, bytes);
  }
  Tensor big(DType::f32, {static_cast<int64_t>(kHugePage)});  // 8 MB of zeros
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % kHugePage, 0u);
  EXPECT_EQ(static_cast<const float*>(big.data())[kHugePage - 1], 0.f);
}
