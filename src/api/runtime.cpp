// The public C++ runtime (include/updraft/runtime.h) over the engine: a Model is a loaded model
// file (model/model_file.h) and the Executable built from its graph with no pass run.
//
// run() checks the caller's tensors against the signature itself (count, dtype, rank, static
// sizes, one value per symbol, each symbol's range: what the model was exported for, which the
// engine alone does not know) without allocating more than the views it hands the engine, then
// calls Executable::run, whose cached-plan lookup allocates nothing. Only when something fails
// does it spend time finding out what (an output buffer of the wrong shape is a Shape error, a
// kernel failure a Runtime one). What it does not do: copy inputs or outputs, or keep any
// mutable state of its own: every member is written once in load(), so concurrent runs share
// nothing but the Executable (whose plan cache is locked and whose arenas are pooled per call).
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <map>

#include "api/api_error.h"
#include "core/tensor.h"
#include "core/version.h"
#include "ir/op_table.h"
#include "model/model_file.h"
#include "runtime/executable.h"
#include "runtime/plan.h"

namespace updraft::runtime {

using detail::ErrorKind;
using detail::guarded;
using detail::KindedError;

static_assert(static_cast<int>(DType::boolean) == static_cast<int>(updraft::DType::boolean) &&
                  static_cast<int>(DType::i64) == static_cast<int>(updraft::DType::i64),
              "runtime::DType must keep the engine's order (core/dtype.h)");

namespace {

constexpr int kNumDTypes = static_cast<int>(DType::boolean) + 1;

updraft::DType engine_dtype(DType dt) {
  int v = static_cast<int>(dt);
  if (v < 0 || v >= kNumDTypes)
    throw KindedError(ErrorKind::InvalidArgument,
                      "[runtime] dtype value " + std::to_string(v) + " is not an updraft::runtime::DType");
  return static_cast<updraft::DType>(v);
}

std::string dims_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

IOInfo io_info(const ModelIO& io) {
  IOInfo info;
  info.name = io.name;
  info.dtype = static_cast<DType>(io.type.dtype);
  if (!io.binds.empty()) {  // a 0-d i64 tensor at run(); its value is the symbol's
    info.is_size = true;
    info.dims = {io.binds};
    return info;
  }
  for (const Dim& d : io.type.shape) {
    info.shape.push_back(d.is_static() ? d.value() : -1);
    info.dims.push_back(d.str());
  }
  return info;
}

// How run() checks one input dim: a static size, a symbol (index into Impl::symbols), or an
// expression of symbols (s0 + 1), which the engine checks once every symbol is bound.
struct DimCheck {
  enum Kind : uint8_t { Static, Symbol, Expr } kind = Static;
  int64_t value = 0;  // Static: the size; Symbol: the symbol's index
};

}  // namespace

struct __attribute__((visibility("hidden"))) Model::Impl {  // not part of the exported API
  std::shared_ptr<Executable> exe;
  ModelSignature sig;
  std::vector<IOInfo> inputs, outputs;
  std::vector<SymbolRange> ranges;
  ModelStats stats;
  // run()'s checks, precomputed from the signature.
  std::vector<std::vector<DimCheck>> input_dims;  // by input (a size input: one Symbol entry)
  std::vector<int64_t> sym_min, sym_max;          // by symbol index

  std::vector<std::vector<int64_t>> shapes_of(const std::vector<TensorRef>& inputs) const;
  void check_inputs(const std::vector<TensorRef>& in) const;
  void check_outputs(const std::vector<TensorRef>& out) const;
  [[noreturn]] void explain_run_failure(const std::vector<TensorRef>& in, const std::vector<TensorRef>& out,
                                        const char* what) const;
};

namespace {

TensorView to_view(const TensorRef& t, const char* role, size_t k, const std::string& name) {
  std::string where = std::string(role) + " " + std::to_string(k) + " (" + name + ")";
  if (t.shape.size() > static_cast<size_t>(kMaxDims))
    throw KindedError(ErrorKind::Shape, "[runtime] " + where + " has rank " + std::to_string(t.shape.size()) +
                                            "; the engine takes at most " + std::to_string(kMaxDims) + " dims");
  if (!t.strides.empty() && t.strides.size() != t.shape.size())
    throw KindedError(ErrorKind::InvalidArgument, "[runtime] " + where + " has " + std::to_string(t.strides.size()) +
                                                      " strides for " + std::to_string(t.shape.size()) +
                                                      " dims; give one stride per dim, or none (contiguous)");
  TensorView v;
  v.data = t.data;
  v.dtype = engine_dtype(t.dtype);
  v.ndim = static_cast<int>(t.shape.size());
  int64_t stride = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    if (t.shape[d] < 0)
      throw KindedError(ErrorKind::Shape, "[runtime] " + where + " has a negative size " + dims_text(t.shape));
    v.sizes[d] = t.shape[d];
    v.strides[d] = t.strides.empty() ? stride : t.strides[d];
    if (__builtin_mul_overflow(stride, t.shape[d], &stride))
      throw KindedError(ErrorKind::Shape, "[runtime] " + where + " has more elements than fit in 64 bits " +
                                              dims_text(t.shape));
  }
  return v;
}

std::vector<TensorView> to_views(const std::vector<TensorRef>& ts, const std::vector<IOInfo>& infos, const char* role) {
  std::vector<TensorView> out;
  out.reserve(ts.size());
  for (size_t k = 0; k < ts.size(); ++k) out.push_back(to_view(ts[k], role, k, infos[k].name));
  return out;
}

}  // namespace

std::vector<std::vector<int64_t>> Model::Impl::shapes_of(const std::vector<TensorRef>& in) const {
  std::vector<std::vector<int64_t>> shapes;
  for (size_t k = 0; k < in.size(); ++k) {
    if (k < inputs.size() && inputs[k].is_size && in[k].data && in[k].shape.empty() && in[k].dtype == DType::i64)
      shapes.push_back({*static_cast<const int64_t*>(in[k].data)});
    else
      shapes.push_back(in[k].shape);
  }
  return shapes;
}

void Model::Impl::check_inputs(const std::vector<TensorRef>& in) const {
  if (in.size() != inputs.size())
    throw KindedError(ErrorKind::Shape, "[runtime] the model takes " + std::to_string(inputs.size()) + " inputs, got " +
                                            std::to_string(in.size()) + "; Model::inputs() lists them");
  // Symbol values seen so far; kUnset until bound. Small models have a handful of symbols.
  constexpr int64_t kUnset = -1;
  int64_t local[8];
  std::vector<int64_t> heap;
  int64_t* bound = local;
  if (sym_min.size() > 8) {
    heap.assign(sym_min.size(), kUnset);
    bound = heap.data();
  } else {
    for (size_t s = 0; s < sym_min.size(); ++s) local[s] = kUnset;
  }
  bool ok = true;
  for (size_t k = 0; k < in.size() && ok; ++k) {
    const TensorRef& t = in[k];
    const IOInfo& info = inputs[k];
    if (t.dtype != info.dtype)
      throw KindedError(ErrorKind::Shape, "[runtime] input " + info.name + " is " + dtype_name(t.dtype) +
                                              ", the model takes " + dtype_name(info.dtype) + "; convert it first");
    if (info.is_size) {
      if (!t.shape.empty() || t.data == nullptr)
        throw KindedError(ErrorKind::Shape,
                          "[runtime] size input " + info.name +
                              " is passed as a 0-d i64 tensor holding the value (shape {}), got shape " +
                              dims_text(t.shape));
      int64_t v = *static_cast<const int64_t*>(t.data);
      size_t s = static_cast<size_t>(input_dims[k][0].value);
      ok = v >= sym_min[s] && v <= sym_max[s] && (bound[s] == kUnset || bound[s] == v);
      bound[s] = v;
      continue;
    }
    const std::vector<DimCheck>& dims = input_dims[k];
    if (t.shape.size() != dims.size()) {
      ok = false;
      break;
    }
    for (size_t d = 0; d < dims.size() && ok; ++d) {
      int64_t v = t.shape[d];
      if (v < 0) ok = false;
      else if (dims[d].kind == DimCheck::Static) ok = v == dims[d].value;
      else if (dims[d].kind == DimCheck::Symbol) {
        size_t s = static_cast<size_t>(dims[d].value);
        ok = v >= sym_min[s] && v <= sym_max[s] && (bound[s] == kUnset || bound[s] == v);
        bound[s] = v;
      }
    }
  }
  if (ok) return;
  // The slow path: the signature's own check names the input, the dim and the range.
  std::vector<std::vector<int64_t>> shapes = shapes_of(in);
  for (size_t k = 0; k < shapes.size(); ++k)
    for (int64_t v : shapes[k])
      if (v < 0 && !inputs[k].is_size)
        throw KindedError(ErrorKind::Shape, "[runtime] input " + inputs[k].name + " has a negative size " +
                                                dims_text(shapes[k]));
  guarded(ErrorKind::Shape, [&] { sig.check_shapes(shapes); });
  throw KindedError(ErrorKind::Shape, "[runtime] these input shapes do not fit the model's signature:\n" + sig.str());
}

void Model::Impl::check_outputs(const std::vector<TensorRef>& out) const {
  if (out.size() != outputs.size())
    throw KindedError(ErrorKind::Shape, "[runtime] the model has " + std::to_string(outputs.size()) +
                                            " outputs, got " + std::to_string(out.size()) +
                                            " buffers; Model::outputs() lists them");
  for (size_t k = 0; k < out.size(); ++k) {
    const TensorRef& t = out[k];
    const IOInfo& info = outputs[k];
    if (t.dtype != info.dtype)
      throw KindedError(ErrorKind::Shape, "[runtime] output " + info.name + " is " + dtype_name(info.dtype) +
                                              ", its buffer is " + dtype_name(t.dtype));
    if (t.shape.size() != info.shape.size())
      throw KindedError(ErrorKind::Shape, "[runtime] output " + info.name + " has rank " +
                                              std::to_string(info.shape.size()) + ", its buffer has shape " +
                                              dims_text(t.shape) + "; output_shapes() gives the shapes");
    if (!t.strides.empty()) {
      int64_t stride = 1;
      for (size_t d = t.shape.size(); d-- > 0;) {
        if (t.shape[d] != 1 && t.strides[d] != stride)
          throw KindedError(ErrorKind::InvalidArgument,
                            "[runtime] output " + info.name + " is strided; outputs must be contiguous (no strides)");
        stride *= t.shape[d];
      }
    }
  }
}

void Model::Impl::explain_run_failure(const std::vector<TensorRef>& in, const std::vector<TensorRef>& out,
                                      const char* what) const {
  // Was it the output buffers' shapes? Ask for the shapes these inputs give (a plan build at
  // worst, and only on this failure path).
  std::vector<std::vector<int64_t>> want;
  try {
    want = exe->prepare(shapes_of(in));
  } catch (const std::exception& e) {
    throw KindedError(ErrorKind::Shape, e.what());  // the inputs' sizes disagree (s0 + 1 is not s1)
  }
  for (size_t k = 0; k < out.size() && k < want.size(); ++k)
    if (out[k].shape != want[k])
      throw KindedError(ErrorKind::Shape, "[runtime] output " + outputs[k].name + "'s buffer has shape " +
                                              dims_text(out[k].shape) + ", these inputs give " + dims_text(want[k]) +
                                              "; allocate the shapes output_shapes() returns");
  for (size_t k = 0; k < in.size(); ++k)
    if (in[k].data == nullptr && !in[k].shape.empty())
      throw KindedError(ErrorKind::InvalidArgument, "[runtime] input " + inputs[k].name + " has no data pointer");
  for (size_t k = 0; k < out.size(); ++k)
    if (out[k].data == nullptr)
      throw KindedError(ErrorKind::InvalidArgument, "[runtime] output " + outputs[k].name + " has no data pointer");
  throw KindedError(ErrorKind::Runtime, what);
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

namespace {
template <typename Impl>  // Model::Impl, which is private
const Impl& need(const std::unique_ptr<Impl>& impl) {
  if (!impl)
    throw KindedError(ErrorKind::InvalidArgument, "[runtime] this Model was moved from; use the Model it was moved to");
  return *impl;
}
}  // namespace

Model Model::load(const std::string& path, const LoadOptions& opts) {
  // Whatever escapes the steps below (a failed allocation) still leaves as an Error.
  return guarded(ErrorKind::BadModel, [&]() -> Model {
    auto t0 = std::chrono::steady_clock::now();
    if (opts.num_threads < 0)
      throw KindedError(ErrorKind::InvalidArgument, "[runtime] LoadOptions::num_threads is " +
                                                        std::to_string(opts.num_threads) +
                                                        "; use 0 (all cores) or a positive thread count");
    struct stat file;
    if (::stat(path.c_str(), &file) == 0 && !S_ISREG(file.st_mode))
      throw KindedError(ErrorKind::File, "[model] " + path + " is not a regular file; give the path of a model file");
    auto impl = std::make_unique<Impl>();
    LoadedModel lm;
    try {
      lm = guarded(ErrorKind::BadModel, [&] { return load_model_file(path, opts.map); });
    } catch (const KindedError& e) {
      // The engine says what is wrong; the kind says whether the file was there to read at all.
      if (e.kind() == ErrorKind::BadModel && ::access(path.c_str(), R_OK) != 0)
        throw KindedError(ErrorKind::File, e.what());
      throw;
    }
    guarded(ErrorKind::BadModel, [&] {
      CompileOptions co;
      co.num_threads = opts.num_threads;
      impl->exe = Executable::from_optimized(std::move(lm.graph), co, lm.load_ms);
      impl->sig = lm.signature;
      impl->ranges.clear();
      for (const updraft::SymbolRange& r : lm.signature.ranges) impl->ranges.push_back({r.symbol, r.min, r.max});
      for (const ModelIO& io : lm.signature.inputs) impl->inputs.push_back(io_info(io));
      for (const ModelIO& io : lm.signature.outputs) impl->outputs.push_back(io_info(io));
      // Symbols by index, with their ranges (no range: any size).
      std::map<std::string, int> index;
      auto sym_index = [&](const std::string& s) {
        auto [it, fresh] = index.insert({s, static_cast<int>(impl->sym_min.size())});
        if (fresh) {
          int64_t lo = 0, hi = INT64_MAX;
          for (const updraft::SymbolRange& r : lm.signature.ranges)
            if (r.symbol == s) lo = r.min, hi = r.max;
          impl->sym_min.push_back(lo);
          impl->sym_max.push_back(hi);
        }
        return it->second;
      };
      for (const ModelIO& io : lm.signature.inputs) {
        std::vector<DimCheck> dims;
        if (!io.binds.empty()) {
          dims.push_back({DimCheck::Symbol, sym_index(io.binds)});
        } else {
          for (const Dim& d : io.type.shape) {
            if (d.is_static()) dims.push_back({DimCheck::Static, d.value()});
            else if (d.kind() == Dim::Kind::Sym) dims.push_back({DimCheck::Symbol, sym_index(d.str())});
            else dims.push_back({DimCheck::Expr, 0});
          }
        }
        impl->input_dims.push_back(std::move(dims));
      }
      ModelStats& st = impl->stats;
      st.file_bytes = lm.file_bytes;
      st.constant_bytes = lm.constant_bytes;
      st.mapped = lm.mapped;
      st.engine_version = lm.meta.engine;
      st.note = lm.meta.note;
      st.required_cpu = lm.meta.requires_cpu;
      std::map<std::string, size_t> op_index;
      for (const Node* n : impl->exe->graph().nodes()) {
        auto [it, fresh] = op_index.insert({n->op->name, st.ops.size()});
        if (fresh) st.ops.push_back({n->op->name, 0});
        ++st.ops[it->second].second;
      }
  });
  impl->stats.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return Model(std::move(impl));
  });
}

const std::vector<IOInfo>& Model::inputs() const { return need(impl_).inputs; }
const std::vector<IOInfo>& Model::outputs() const { return need(impl_).outputs; }
const std::vector<SymbolRange>& Model::ranges() const { return need(impl_).ranges; }
const ModelStats& Model::stats() const { return need(impl_).stats; }
std::string Model::signature_text() const { return need(impl_).sig.str(); }

std::vector<std::vector<int64_t>> Model::output_shapes(const std::vector<std::vector<int64_t>>& input_shapes) {
  const Impl& m = need(impl_);
  guarded(ErrorKind::Shape, [&] { m.sig.check_shapes(input_shapes); });
  return guarded(ErrorKind::Shape, [&] { return m.exe->prepare(input_shapes); });
}

size_t Model::arena_bytes(const std::vector<std::vector<int64_t>>& input_shapes) {
  const Impl& m = need(impl_);
  guarded(ErrorKind::Shape, [&] { m.sig.check_shapes(input_shapes); });
  return guarded(ErrorKind::Shape, [&] { return m.exe->plan(input_shapes)->memory().arena_bytes; });
}

void Model::run(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs) {
  const Impl& m = need(impl_);
  std::vector<TensorView> in, out;
  guarded(ErrorKind::Shape, [&] {
    m.check_inputs(inputs);
    m.check_outputs(outputs);
    in = to_views(inputs, m.inputs, "input");
    out = to_views(outputs, m.outputs, "output");
  });
  try {
    m.exe->run(in, out);
  } catch (const std::bad_alloc&) {
    guarded(ErrorKind::Runtime, [] { throw std::bad_alloc(); });
  } catch (const std::exception& e) {
    guarded(ErrorKind::Runtime, [&] { m.explain_run_failure(inputs, outputs, e.what()); });
  } catch (...) {
    throw KindedError(ErrorKind::Internal, "[runtime] unknown exception while running; please report it");
  }
}

const char* dtype_name(DType dt) {
  int v = static_cast<int>(dt);
  if (v < 0 || v >= kNumDTypes) return "?";
  return updraft::dtype_name(static_cast<updraft::DType>(v));
}

size_t dtype_size(DType dt) {
  int v = static_cast<int>(dt);
  if (v < 0 || v >= kNumDTypes) return 0;
  return updraft::dtype_size(static_cast<updraft::DType>(v));
}

const char* version() { return kEngineVersion; }

}  // namespace updraft::runtime
