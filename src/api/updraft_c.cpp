// The plain C API (include/updraft/updraft_c.h) over the C++ runtime (src/api/runtime.cpp).
// Every entry point catches everything: an error becomes a status code (the kind the C++
// runtime gave it, api_error.h) and a message kept per thread. What it does not do: keep state
// between calls other than that message, or run anything the C++ API does not.
#include "updraft/updraft_c.h"

#include <string>
#include <vector>

#include "api/api_error.h"
#include "updraft/runtime.h"

namespace ur = updraft::runtime;
using ur::detail::ErrorKind;
using ur::detail::KindedError;

static_assert(static_cast<int>(ErrorKind::InvalidArgument) == UPDRAFT_ERR_INVALID_ARGUMENT &&
                  static_cast<int>(ErrorKind::File) == UPDRAFT_ERR_FILE &&
                  static_cast<int>(ErrorKind::BadModel) == UPDRAFT_ERR_BAD_MODEL &&
                  static_cast<int>(ErrorKind::Shape) == UPDRAFT_ERR_SHAPE &&
                  static_cast<int>(ErrorKind::Runtime) == UPDRAFT_ERR_RUNTIME &&
                  static_cast<int>(ErrorKind::OutOfMemory) == UPDRAFT_ERR_OUT_OF_MEMORY &&
                  static_cast<int>(ErrorKind::Internal) == UPDRAFT_ERR_INTERNAL,
              "updraft_status and ErrorKind (api_error.h) are one list");
static_assert(static_cast<int>(ur::DType::boolean) == UPDRAFT_BOOL && static_cast<int>(ur::DType::i64) == UPDRAFT_I64,
              "updraft_dtype and updraft::runtime::DType are one list");

struct updraft_model {
  ur::Model model;
  // The C views of inputs()/outputs(): pointers into the Model's own strings and vectors,
  // which never change after load.
  struct IO {
    std::vector<const char*> dims;
    updraft_io_info info{};
  };
  std::vector<IO> inputs, outputs;
  std::string signature;

  explicit updraft_model(ur::Model m) : model(std::move(m)) {
    fill(model.inputs(), inputs);
    fill(model.outputs(), outputs);
    signature = model.signature_text();
  }

 private:
  static void fill(const std::vector<ur::IOInfo>& src, std::vector<IO>& dst) {
    dst.resize(src.size());
    for (size_t k = 0; k < src.size(); ++k) {
      for (const std::string& d : src[k].dims) dst[k].dims.push_back(d.c_str());
      updraft_io_info& i = dst[k].info;
      i.name = src[k].name.c_str();
      i.dtype = static_cast<updraft_dtype>(src[k].dtype);
      i.ndim = static_cast<int>(src[k].shape.size());
      i.shape = src[k].shape.data();
      i.dims = dst[k].dims.data();
      i.is_size = src[k].is_size ? 1 : 0;
    }
  }
};

namespace {

thread_local std::string t_last_error;

updraft_status fail(updraft_status st, std::string msg) {
  try {
    t_last_error = std::move(msg);
  } catch (...) {  // no memory even for the message: the status still says what happened
  }
  return st;
}

// Runs fn; what it throws becomes a status and this thread's message.
template <typename Fn>
updraft_status call(Fn&& fn) {
  try {
    fn();
    return UPDRAFT_OK;
  } catch (const KindedError& e) {
    return fail(static_cast<updraft_status>(e.kind()), e.what());
  } catch (const std::bad_alloc&) {
    return fail(UPDRAFT_ERR_OUT_OF_MEMORY, "[runtime] out of memory");
  } catch (const std::exception& e) {
    return fail(UPDRAFT_ERR_INTERNAL, e.what());
  } catch (...) {
    return fail(UPDRAFT_ERR_INTERNAL, "[runtime] unknown exception; please report it");
  }
}

void need(const void* p, const char* what) {
  if (!p) throw KindedError(ErrorKind::InvalidArgument, std::string("[c-api] ") + what + " is NULL");
}

std::vector<ur::TensorRef> refs(const updraft_tensor* ts, size_t n, const char* role) {
  if (n > 0) need(ts, role);
  std::vector<ur::TensorRef> out(n);
  for (size_t k = 0; k < n; ++k) {
    const updraft_tensor& t = ts[k];
    std::string where = std::string("[c-api] ") + role + "[" + std::to_string(k) + "]";
    if (t.ndim < 0 || t.ndim > 64)
      throw KindedError(ErrorKind::InvalidArgument, where + ".ndim is " + std::to_string(t.ndim));
    if (t.ndim > 0 && !t.shape) throw KindedError(ErrorKind::InvalidArgument, where + ".shape is NULL");
    if (t.dtype < 0 || t.dtype > UPDRAFT_BOOL)
      throw KindedError(ErrorKind::InvalidArgument, where + ".dtype is " + std::to_string(t.dtype) + ", not an updraft_dtype");
    out[k].data = t.data;
    out[k].dtype = static_cast<ur::DType>(t.dtype);
    out[k].shape.assign(t.shape, t.shape + t.ndim);
    if (t.strides) out[k].strides.assign(t.strides, t.strides + t.ndim);
  }
  return out;
}

// Shapes for output_shapes/arena_bytes: a size input's entry is {value}.
std::vector<std::vector<int64_t>> shapes(const updraft_model* m, const updraft_tensor* ts, size_t n) {
  std::vector<ur::TensorRef> r = refs(ts, n, "inputs");
  std::vector<std::vector<int64_t>> out;
  for (size_t k = 0; k < n; ++k) {
    if (k < m->inputs.size() && m->inputs[k].info.is_size && r[k].shape.empty()) {
      need(r[k].data, "a size input's data");
      out.push_back({*static_cast<const int64_t*>(r[k].data)});
    } else {
      out.push_back(r[k].shape);
    }
  }
  return out;
}

updraft_status io_info(const updraft_model* m, size_t index, updraft_io_info* out, bool input) {
  return call([&] {
    need(m, "model");
    need(out, "out");
    const auto& list = input ? m->inputs : m->outputs;
    if (index >= list.size())
      throw KindedError(ErrorKind::InvalidArgument,
                        std::string("[c-api] ") + (input ? "input" : "output") + " index " + std::to_string(index) +
                            " is out of range; the model has " + std::to_string(list.size()));
    *out = list[index].info;
  });
}

}  // namespace

extern "C" {

updraft_load_options updraft_load_options_default(void) { return {0, 1}; }

updraft_status updraft_model_load(const char* path, const updraft_load_options* opts, updraft_model** out) {
  if (out) *out = nullptr;
  return call([&] {
    need(path, "path");
    need(out, "out");
    ur::LoadOptions o;
    if (opts) {
      o.num_threads = opts->num_threads;
      o.map = opts->map != 0;
    }
    *out = new updraft_model(ur::Model::load(path, o));
  });
}

void updraft_model_free(updraft_model* model) { delete model; }

size_t updraft_model_num_inputs(const updraft_model* model) { return model ? model->inputs.size() : 0; }
size_t updraft_model_num_outputs(const updraft_model* model) { return model ? model->outputs.size() : 0; }

updraft_status updraft_model_input_info(const updraft_model* model, size_t index, updraft_io_info* out) {
  return io_info(model, index, out, true);
}
updraft_status updraft_model_output_info(const updraft_model* model, size_t index, updraft_io_info* out) {
  return io_info(model, index, out, false);
}

size_t updraft_model_num_symbols(const updraft_model* model) { return model ? model->model.ranges().size() : 0; }

updraft_status updraft_model_symbol(const updraft_model* model, size_t index, const char** name, int64_t* min,
                                    int64_t* max) {
  return call([&] {
    need(model, "model");
    const auto& ranges = model->model.ranges();
    if (index >= ranges.size())
      throw KindedError(ErrorKind::InvalidArgument, "[c-api] symbol index " + std::to_string(index) +
                                                        " is out of range; the model has " +
                                                        std::to_string(ranges.size()));
    if (name) *name = ranges[index].symbol.c_str();
    if (min) *min = ranges[index].min;
    if (max) *max = ranges[index].max;
  });
}

const char* updraft_model_signature(const updraft_model* model) { return model ? model->signature.c_str() : nullptr; }

updraft_status updraft_model_output_shapes(updraft_model* model, const updraft_tensor* inputs, size_t num_inputs,
                                           int64_t* out_dims, size_t out_len) {
  return call([&] {
    need(model, "model");
    std::vector<std::vector<int64_t>> got = model->model.output_shapes(shapes(model, inputs, num_inputs));
    size_t total = 0;
    for (const auto& s : got) total += s.size();
    if (total > out_len)
      throw KindedError(ErrorKind::InvalidArgument, "[c-api] out_dims has room for " + std::to_string(out_len) +
                                                        " dims, the outputs have " + std::to_string(total));
    if (total > 0) need(out_dims, "out_dims");
    for (const auto& s : got)
      for (int64_t d : s) *out_dims++ = d;
  });
}

updraft_status updraft_model_arena_bytes(updraft_model* model, const updraft_tensor* inputs, size_t num_inputs,
                                         size_t* out_bytes) {
  return call([&] {
    need(model, "model");
    need(out_bytes, "out_bytes");
    *out_bytes = model->model.arena_bytes(shapes(model, inputs, num_inputs));
  });
}

updraft_status updraft_model_run(updraft_model* model, const updraft_tensor* inputs, size_t num_inputs,
                                 const updraft_tensor* outputs, size_t num_outputs) {
  return call([&] {
    need(model, "model");
    model->model.run(refs(inputs, num_inputs, "inputs"), refs(outputs, num_outputs, "outputs"));
  });
}

const char* updraft_last_error(void) { return t_last_error.c_str(); }

const char* updraft_status_name(int status) {
  switch (status) {
    case UPDRAFT_OK: return "UPDRAFT_OK";
    case UPDRAFT_ERR_INVALID_ARGUMENT: return "UPDRAFT_ERR_INVALID_ARGUMENT";
    case UPDRAFT_ERR_FILE: return "UPDRAFT_ERR_FILE";
    case UPDRAFT_ERR_BAD_MODEL: return "UPDRAFT_ERR_BAD_MODEL";
    case UPDRAFT_ERR_SHAPE: return "UPDRAFT_ERR_SHAPE";
    case UPDRAFT_ERR_RUNTIME: return "UPDRAFT_ERR_RUNTIME";
    case UPDRAFT_ERR_OUT_OF_MEMORY: return "UPDRAFT_ERR_OUT_OF_MEMORY";
    case UPDRAFT_ERR_INTERNAL: return "UPDRAFT_ERR_INTERNAL";
  }
  return "UPDRAFT_ERR_UNKNOWN";
}

const char* updraft_dtype_name(int dtype) { return ur::dtype_name(static_cast<ur::DType>(dtype)); }
size_t updraft_dtype_size(int dtype) { return ur::dtype_size(static_cast<ur::DType>(dtype)); }
const char* updraft_version(void) { return ur::version(); }

}  // extern "C"
