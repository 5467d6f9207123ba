// The single-node elementwise ops. Each runs as a one-instruction elementwise program
// (ir/elementwise_program.h), so the reference and cpu families register a kernel for every
// op in this one list:
//
//   for (const char* op : kElementwiseNodeOps) r.add(op, Device::cpu, factory);
#pragma once

namespace updraft {

inline constexpr const char* kElementwiseNodeOps[] = {
    "neg", "abs", "relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "erf", "silu", "reciprocal", "sin",
    "cos", "floor", "ceil", "round", "sign", "hardswish", "hardsigmoid", "gelu", "leaky_relu", "elu", "clamp",
    "pow_scalar", "logical_not", "isnan", "add", "sub", "mul", "div", "maximum", "minimum", "pow", "remainder",
    "floor_divide", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "bitwise_and", "bitwise_or",
    "where", "acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh", "tan", "log1p", "expm1", "log2",
    "log10", "exp2", "atan2", "fmod"};

}  // namespace updraft
