// Writes the generated part of the fuzz seed corpus: a real cache entry of the seed model
// (fuzz/targets.h), compiled with the full pass pipeline, a model file of it, and that compiled
// graph's text IR.
//   make_seeds <corpus dir>   ->  <dir>/entry/seed_model.entry, <dir>/model/{seed_model,mlp}.updraft,
//                                 <dir>/text_ir/seed_model_optimized.ir
// The entry and the model file depend on this engine version and CPU features; scripts/fuzz.sh regenerates it
// on every run, so the committed one only has to be a valid example.
#include <cstdio>
#include <fstream>
#include <string>

#include "runtime/executable.h"
#include "targets.h"

using namespace updraft;

namespace {

// A second model file seed, for the ops and signature parts the seed model lacks: two symbols
// with ranges, a size input, two outputs, layer_norm, matmul, gelu, a reduction.
const char* kMlpModel = R"(graph(%x: f32[s0, s1, 16], %n: i64[] = s1) {
  %g = constant f32[16] random(seed=1)
  %beta = constant f32[16] random(seed=2)
  %w = constant f32[16, 24] random(seed=3)
  %b = constant f32[24] random(seed=4)
  %0 = layer_norm(%x, %g, %beta) {normalized_ndim=1}
  %1 = matmul(%0, %w)
  %2 = add(%1, %b)
  %3 = gelu(%2)
  %4 = sum(%3) {dims=[2]}
  %5 = tanh(%3)
  return (%4, %5)
})";

void write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  if (!out) {
    std::fprintf(stderr, "make_seeds: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds <corpus dir>\n");
    return 2;
  }
  const std::string dir = argv[1];
  write(dir + "/entry/seed_model.entry", fuzz::fresh_seed_entry());
  write(dir + "/model/seed_model.updraft", fuzz::fresh_seed_model_file());
  ModelMeta mlp;
  mlp.note = "fuzz seed: mlp";
  mlp.output_names = {"pooled", "hidden"};
  mlp.ranges = {{"s0", 1, 4}, {"s1", 1, 16}};
  write(dir + "/model/mlp.updraft",
        save_model(Executable::compile(parse_graph(kMlpModel), CompileOptions{})->graph(), mlp));
  auto cg = Executable::compile(fuzz::seed_model(), CompileOptions{});
  PrintOptions po;
  po.max_literal_numel = -1;
  write(dir + "/text_ir/seed_model_optimized.ir", print_graph(cg->graph(), po));
  return 0;
}
