// Writes the generated part of the fuzz seed corpus: a real cache entry of the seed model
// (fuzz/targets.h), compiled with the full pass pipeline, a model file of it, and that compiled
// graph's text IR.
//   make_seeds <corpus dir>   ->  <dir>/entry/seed_model.entry, <dir>/model/seed_model.updraft,
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
  auto cg = Executable::compile(fuzz::seed_model(), CompileOptions{});
  PrintOptions po;
  po.max_literal_numel = -1;
  write(dir + "/text_ir/seed_model_optimized.ir", print_graph(cg->graph(), po));
  return 0;
}
