// Conversions between Python/DLPack objects and engine types, shared by the binding files.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/attr.h"
#include "ir/dim.h"
#include "runtime/executable.h"

namespace updraft::py {

namespace nb = nanobind;
using AnyArray = nb::ndarray<nb::device::cpu>;

DType dtype_from_dlpack(nb::dlpack::dtype dt);  // throws Error("bindings", ...) for complex etc.
TensorView view_of(const AnyArray& a);          // zero-copy; strides in elements
// An engine Tensor sharing the array's memory (kept alive by the engine; contiguous only).
Tensor constant_from(const AnyArray& arr);
// CompileOptions from the dict updraft.CompilerConfig.engine_options() gives.
CompileOptions options_from(const nb::dict& d);
Shape shape_from_py(const nb::list& dims);      // ints and size text ("s0", "s0*12")
nb::list shape_to_py(const Shape& s);           // ints, and Dim::str() for symbolic dims
// `op` (when given) says which attributes are symbolic sizes (Dims/Sym specs), which then take
// ints mixed with size text: {"shape": ["s0", "s1", 12, 64]}, {"end": "s1"}.
Attrs attrs_from_py(const nb::dict& d, const std::string& op = "");

}  // namespace updraft::py
