// Replays every input in fuzz/regressions/<target>/ through that fuzz target's harness
// (fuzz/targets.h): each once crashed the engine (a signal or a sanitizer report) and must now
// end in an updraft Error or succeed. The seed corpus (fuzz/corpus/) is replayed too: real
// entries, model files and graphs must keep loading.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "../../fuzz/targets.h"

namespace {

namespace fs = std::filesystem;

const fs::path kFuzzDir = fs::path(__FILE__).parent_path().parent_path().parent_path() / "fuzz";

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void replay(const char* target, void (*harness)(const uint8_t*, size_t)) {
  int n = 0;
  for (const char* kind : {"regressions", "corpus"}) {
    const fs::path dir = kFuzzDir / kind / target;
    if (!fs::exists(dir)) continue;
    for (const auto& f : fs::directory_iterator(dir)) {
      SCOPED_TRACE(f.path().string());
      const std::string bytes = read_all(f.path());
      harness(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++n;
    }
  }
  EXPECT_GT(n, 0) << "no inputs under " << kFuzzDir;
}

}  // namespace

TEST(FuzzRegressions, TextIr) { replay("text_ir", updraft::fuzz::text_ir); }
TEST(FuzzRegressions, Entry) { replay("entry", updraft::fuzz::entry); }
TEST(FuzzRegressions, Dim) { replay("dim", updraft::fuzz::dim); }
TEST(FuzzRegressions, Model) { replay("model", updraft::fuzz::model); }

// The committed seed entry is a real one: it loads (this engine and CPU permitting).
TEST(FuzzRegressions, SeedEntryLoads) {
  const fs::path p = kFuzzDir / "corpus" / "entry" / "seed_model.entry";
  ASSERT_TRUE(fs::exists(p));
  const std::string bytes = updraft::fuzz::fresh_seed_entry();
  auto g = updraft::load_entry(bytes, updraft::fuzz::kSeedKey, updraft::fuzz::seed_params());
  EXPECT_GT(g->nodes().size(), 0u);
}

// The committed seed model file is a real one: it loads and its signature is the seed model's.
TEST(FuzzRegressions, SeedModelFileLoads) {
  const fs::path p = kFuzzDir / "corpus" / "model" / "seed_model.updraft";
  ASSERT_TRUE(fs::exists(p));
  for (const std::string& bytes : {read_all(p), updraft::fuzz::fresh_seed_model_file()}) {
    updraft::LoadedModel m = updraft::load_model(bytes);
    EXPECT_GT(m.graph->nodes().size(), 0u);
    ASSERT_EQ(m.signature.outputs.size(), 1u);
    EXPECT_EQ(m.signature.outputs[0].name, "y");
  }
}
