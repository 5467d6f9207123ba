#include "convert.h"

#include <nanobind/stl/string.h>

#include "core/error.h"
#include "ir/op_table.h"
#include "ir/text.h"

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

// A size written by the front end: an int, or text in the IR's dim syntax ("s0", "s0*12",
// "(s0*s1)//2"), parsed with the text IR's dim parser so "s0*12" is an expression over s0 and
// not one opaque symbol.
static Dim dim_from_py(nb::handle h, const char* where) {
  if (nb::isinstance<nb::bool_>(h))
    throw Error("bindings", std::string(where) + " entries must be int or str, got a bool");
  if (nb::isinstance<nb::int_>(h)) return Dim(nb::cast<int64_t>(h));
  if (nb::isinstance<nb::str>(h)) {
    std::string text = nb::cast<std::string>(h);
    try {
      return parse_dim(text);
    } catch (const Error& e) {
      throw Error("bindings", std::string(where) + " entry '" + text +
                                  "' is not a size expression (an int, a symbol like s0, or e.g. s0*12): " + e.what());
    }
  }
  throw Error("bindings", std::string(where) + " entries must be int or str (a symbol like s0 or an expression like s0*12)");
}

Shape shape_from_py(const nb::list& dims) {
  Shape s;
  for (nb::handle h : dims) s.push_back(dim_from_py(h, "shape"));
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

Attrs attrs_from_py(const nb::dict& d, const std::string& op) {
  // Symbolic specs (reshape/expand shape, slice start/end) take sizes written as text; which
  // attributes those are comes from the op table, so a str elsewhere stays a string attr.
  const OpDef* def = op.empty() ? nullptr : OpTable::get().find(op);
  auto spec_kind = [&](const std::string& key) -> int {
    if (def)
      for (const AttrSpec& s : def->attrs)
        if (s.name == key) return static_cast<int>(s.kind);
    return -1;
  };
  Attrs attrs;
  for (auto [k, v] : d) {
    std::string key = nb::cast<std::string>(k);
    // bool is a subclass of int in Python: test it first.
    const int kind = spec_kind(key);
    if (kind == static_cast<int>(Attr::Kind::Sym) && (nb::isinstance<nb::str>(v) || nb::isinstance<nb::int_>(v)) &&
        !nb::isinstance<nb::bool_>(v)) {
      attrs[key] = Attr::from_dim(dim_from_py(v, ("attribute '" + key + "'").c_str()));
      continue;
    }
    if (kind == static_cast<int>(Attr::Kind::Dims) && (nb::isinstance<nb::list>(v) || nb::isinstance<nb::tuple>(v))) {
      Shape dims;
      for (nb::handle e : nb::borrow<nb::sequence>(v)) dims.push_back(dim_from_py(e, ("attribute '" + key + "'").c_str()));
      attrs[key] = Attr::from_dims(dims);
      continue;
    }
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
