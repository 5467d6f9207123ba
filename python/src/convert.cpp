#include "convert.h"

#include <nanobind/stl/string.h>

#include "core/error.h"

namespace updraft::py {

DType dtype_from_dlpack(nb::dlpack::dtype dt) {
  using C = nb::dlpack::dtype_code;
  auto code = static_cast<C>(dt.code);
  if (dt.lanes == 1) {
    if (code == C::Float && dt.bits == 32) return DType::f32;
    if (code == C::Float && dt.bits == 64) return DType::f64;
    if (code == C::Float && dt.bits == 16) return DType::f16;
    if (code == C::Bfloat && dt.bits == 16) return DType::bf16;
    if (code == C::Int && dt.bits == 64) return DType::i64;
    if (code == C::Int && dt.bits == 32) return DType::i32;
    if (code == C::Int && dt.bits == 16) return DType::i16;
    if (code == C::Int && dt.bits == 8) return DType::i8;
    if (code == C::UInt && dt.bits == 8) return DType::u8;
    if (code == C::Bool) return DType::boolean;
  }
  throw Error("bindings", "tensor dtype (DLPack code " + std::to_string(dt.code) + ", " + std::to_string(dt.bits) +
                              " bits) is not supported by the engine; complex and unsigned wide types run in PyTorch");
}

TensorView view_of(const AnyArray& a) {
  UPDRAFT_CHECK(a.ndim() <= static_cast<size_t>(kMaxDims), "bindings",
                "tensor rank " + std::to_string(a.ndim()) + " exceeds the engine limit of 8");
  TensorView v;
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  v.dtype = dtype_from_dlpack(a.dtype());
  v.ndim = static_cast<int>(a.ndim());
  // DLPack strides are in elements; a null strides pointer means contiguous.
  auto cont = std::vector<int64_t>(v.ndim);
  int64_t acc = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    cont[i] = acc;
    acc *= static_cast<int64_t>(a.shape(i));
  }
  for (int i = 0; i < v.ndim; ++i) {
    v.sizes[i] = static_cast<int64_t>(a.shape(i));
    v.strides[i] = a.stride_ptr() ? a.stride(i) : cont[i];
  }
  return v;
}

Shape shape_from_py(const nb::list& dims) {
  Shape s;
  for (nb::handle h : dims) {
    if (nb::isinstance<nb::str>(h)) s.push_back(Dim::sym(nb::cast<std::string>(h)));
    else if (nb::isinstance<nb::int_>(h)) s.push_back(Dim(nb::cast<int64_t>(h)));
    else throw Error("bindings", "shape entries must be int or str (a symbol name)");
  }
  return s;
}

nb::list shape_to_py(const Shape& s) {
  nb::list out;
  for (const Dim& d : s) {
    if (d.is_static()) out.append(d.value());
    else out.append(d.str());
  }
  return out;
}

Attrs attrs_from_py(const nb::dict& d) {
  Attrs attrs;
  for (auto [k, v] : d) {
    std::string key = nb::cast<std::string>(k);
    // bool is a subclass of int in Python: test it first.
    if (nb::isinstance<nb::bool_>(v)) attrs[key] = Attr(nb::cast<bool>(v));
    else if (nb::isinstance<nb::int_>(v)) attrs[key] = Attr(nb::cast<int64_t>(v));
    else if (nb::isinstance<nb::float_>(v)) attrs[key] = Attr(nb::cast<double>(v));
    else if (nb::isinstance<nb::str>(v)) attrs[key] = Attr(nb::cast<std::string>(v));
    else if (nb::isinstance<nb::list>(v) || nb::isinstance<nb::tuple>(v)) {
      nb::sequence seq = nb::borrow<nb::sequence>(v);
      bool any_float = false;
      for (nb::handle e : seq) any_float |= nb::isinstance<nb::float_>(e);
      if (any_float) {
        std::vector<double> xs;
        for (nb::handle e : seq) xs.push_back(nb::cast<double>(e));
        attrs[key] = Attr(std::move(xs));
      } else {
        std::vector<int64_t> xs;
        for (nb::handle e : seq) xs.push_back(nb::cast<int64_t>(e));
        attrs[key] = Attr(std::move(xs));
      }
    } else {
      throw Error("bindings", "attribute '" + key + "' must be int, float, bool, str or a list of numbers");
    }
  }
  return attrs;
}

}  // namespace updraft::py
