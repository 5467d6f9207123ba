// CompileOptions::record_ir (graph dumps, python/updraft/debug/dump.py): every pass record holds
// the IR after it as text that parses back, large constants by reference with their tensors.
#include <gtest/gtest.h>

#include <map>

#include "ir/text.h"
#include "pass_test_util.h"
#include "passes/pipeline.h"

using namespace updraft;

namespace {

const char* kBlock = R"(graph(%x: f32[2, 4, 6, 6]) {
  %w = constant f32[4, 4, 3, 3] random(seed=1)
  %mean = constant f32[4] random(seed=3)
  %var = constant f32[4] random(seed=4, lo=0.5, hi=2.0)
  %gamma = constant f32[4] random(seed=5)
  %beta = constant f32[4] random(seed=6)
  %0 = conv2d(%x, %w) {padding=[1, 1]}
  %1 = batch_norm(%0, %mean, %var, %gamma, %beta)
  %2 = relu(%1)
  return (%2)
})";

std::unique_ptr<Graph> parse_record(const PassRecord& r) {
  std::map<std::string, Tensor> ext(r.externs.begin(), r.externs.end());
  ExternResolver resolve = [&](const std::string& ref, const TensorType&) { return ext.at(ref); };
  return parse_graph(r.ir_after, &resolve);
}

}  // namespace

TEST(RecordIr, EveryPassIrParsesBackAndTheLastIsTheCompiledGraph) {
  auto g = parse_graph(kBlock);
  CompileOptions opts;
  opts.record_ir = true;
  opts.channel_block = 0;
  auto log = run_pipeline(*g, opts);
  ASSERT_GT(log.size(), 3u);
  for (const PassRecord& r : log) {
    ASSERT_FALSE(r.ir_after.empty()) << r.name;
    EXPECT_EQ(r.ir_after.find("elided("), std::string::npos) << r.ir_after;
    EXPECT_NO_THROW(parse_record(r)) << r.name << "\n" << r.ir_after;
  }
  // The 144-element weight is by reference, and keeps its REF through every pass (fold_conv_bn
  // leaves the weight and adds a per-channel scale).
  const std::string& lowered = log.front().ir_after;
  ASSERT_EQ(log.front().externs.size(), 1u) << lowered;
  const std::string ref = log.front().externs[0].first;
  EXPECT_NE(lowered.find("%w = constant f32[4, 4, 3, 3] extern(" + ref + ")"), std::string::npos) << lowered;
  for (const PassRecord& r : log) EXPECT_NE(r.ir_after.find("extern(" + ref + ")"), std::string::npos) << r.name;
  // Small constants stay literal data.
  EXPECT_NE(lowered.find("%mean = constant f32[4] ["), std::string::npos) << lowered;
  EXPECT_EQ(print_graph(*parse_record(log.back())), print_graph(*g));
}

TEST(RecordIr, OffRecordsNothing) {
  auto g = parse_graph(kBlock);
  for (const PassRecord& r : run_pipeline(*g, CompileOptions{})) {
    EXPECT_TRUE(r.ir_after.empty()) << r.name;
    EXPECT_TRUE(r.externs.empty()) << r.name;
  }
}
