// Conversions between Python/DLPack objects and engine types, shared by the binding files.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/attr.h"
#include "ir/dim.h"

namespace updraft::py {

namespace nb = nanobind;
using AnyArray = nb::ndarray<nb::device::cpu>;

DType dtype_from_dlpack(nb::dlpack::dtype dt);  // throws Error("bindings", ...) for complex etc.
TensorView view_of(const AnyArray& a);          // zero-copy; strides in elements
Shape shape_from_py(const nb::list& dims);      // ints and symbol names
nb::list shape_to_py(const Shape& s);
Attrs attrs_from_py(const nb::dict& d);

}  // namespace updraft::py
