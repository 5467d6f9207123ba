// Loads a model file, prints its signature, runs it on inputs of ones (zeros for integers and
// booleans) and prints each output's shape, mean, min and max. Symbolic dims take the smallest
// size their range allows (at least 1); a size input takes its symbol's value.
//
//   run_model MODEL.updraft [--threads N]
#include <updraft/runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace ur = updraft::runtime;

namespace {

// Reads element i of an output as a double (the types an output most often has).
double element(const std::vector<unsigned char>& buf, ur::DType dt, size_t i) {
  const void* p = buf.data() + i * ur::dtype_size(dt);
  switch (dt) {
    case ur::DType::f32: return *static_cast<const float*>(p);
    case ur::DType::f64: return *static_cast<const double*>(p);
    case ur::DType::i64: return static_cast<double>(*static_cast<const int64_t*>(p));
    case ur::DType::i32: return *static_cast<const int32_t*>(p);
    case ur::DType::boolean:
    case ur::DType::u8: return *static_cast<const uint8_t*>(p);
    default: return 0;  // f16/bf16/i16/i8: not decoded by this example
  }
}

void fill_ones(std::vector<unsigned char>& buf, ur::DType dt, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    void* p = buf.data() + i * ur::dtype_size(dt);
    if (dt == ur::DType::f32) *static_cast<float*>(p) = 1.0f;
    else if (dt == ur::DType::f64) *static_cast<double*>(p) = 1.0;
  }
}

std::string dims_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.updraft [--threads N]\n", argv[0]);
    return 2;
  }
  ur::LoadOptions opts;
  if (argc >= 4 && std::strcmp(argv[2], "--threads") == 0) opts.num_threads = std::atoi(argv[3]);
  try {
    ur::Model model = ur::Model::load(argv[1], opts);
    std::printf("updraft runtime %s; model written by engine %s, %zu bytes (%zu of constants), loaded in %.2f ms\n",
                ur::version(), model.stats().engine_version.c_str(), model.stats().file_bytes,
                model.stats().constant_bytes, model.stats().load_ms);
    std::printf("%s", model.signature_text().c_str());
    std::printf("ops:");
    for (const auto& [op, count] : model.stats().ops) std::printf(" %s x%d", op.c_str(), count);
    std::printf("\n");

    std::map<std::string, int64_t> symbol_min;
    for (const ur::SymbolRange& r : model.ranges()) symbol_min[r.symbol] = std::max<int64_t>(r.min, 1);
    auto size_of = [&](const std::string& sym) { return symbol_min.count(sym) ? symbol_min[sym] : int64_t{1}; };

    // Input shapes: a symbolic dim takes its symbol's smallest size (an expression such as
    // "s0 + 1" is left to the model's own check; this example supports plain symbols).
    std::vector<std::vector<int64_t>> shapes;
    std::vector<std::vector<unsigned char>> in_bufs;
    std::vector<int64_t> size_values(model.inputs().size());
    for (size_t k = 0; k < model.inputs().size(); ++k) {
      const ur::IOInfo& in = model.inputs()[k];
      if (in.is_size) {
        size_values[k] = size_of(in.dims[0]);
        shapes.push_back({size_values[k]});
        continue;
      }
      std::vector<int64_t> s = in.shape;
      for (size_t d = 0; d < s.size(); ++d)
        if (s[d] < 0) s[d] = size_of(in.dims[d]);
      shapes.push_back(s);
    }
    std::vector<std::vector<int64_t>> out_shapes = model.output_shapes(shapes);
    std::printf("arena for these shapes: %zu bytes\n", model.arena_bytes(shapes));

    std::vector<ur::TensorRef> inputs, outputs;
    for (size_t k = 0; k < model.inputs().size(); ++k) {
      const ur::IOInfo& in = model.inputs()[k];
      if (in.is_size) {
        inputs.push_back(ur::TensorRef::of(&size_values[k], ur::DType::i64, {}));
        in_bufs.emplace_back();
        continue;
      }
      size_t n = 1;
      for (int64_t d : shapes[k]) n *= static_cast<size_t>(d);
      in_bufs.emplace_back(n * ur::dtype_size(in.dtype), 0);
      fill_ones(in_bufs.back(), in.dtype, n);
      inputs.push_back(ur::TensorRef::of(in_bufs.back().data(), in.dtype, shapes[k]));
      std::printf("input  %-12s %s %s\n", in.name.c_str(), ur::dtype_name(in.dtype), dims_text(shapes[k]).c_str());
    }
    std::vector<std::vector<unsigned char>> out_bufs;
    for (size_t k = 0; k < model.outputs().size(); ++k) {
      size_t n = 1;
      for (int64_t d : out_shapes[k]) n *= static_cast<size_t>(d);
      out_bufs.emplace_back(n * ur::dtype_size(model.outputs()[k].dtype));
    }
    for (size_t k = 0; k < model.outputs().size(); ++k)
      outputs.push_back(ur::TensorRef::of(out_bufs[k].data(), model.outputs()[k].dtype, out_shapes[k]));

    model.run(inputs, outputs);

    for (size_t k = 0; k < model.outputs().size(); ++k) {
      const ur::IOInfo& o = model.outputs()[k];
      size_t n = out_bufs[k].size() / ur::dtype_size(o.dtype);
      double sum = 0, lo = n ? element(out_bufs[k], o.dtype, 0) : 0, hi = lo;
      for (size_t i = 0; i < n; ++i) {
        double v = element(out_bufs[k], o.dtype, i);
        sum += v;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      std::printf("output %-12s %s %s  mean %.6g  min %.6g  max %.6g\n", o.name.c_str(), ur::dtype_name(o.dtype),
                  dims_text(out_shapes[k]).c_str(), n ? sum / double(n) : 0.0, lo, hi);
    }
  } catch (const ur::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
