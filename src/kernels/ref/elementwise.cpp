// Reference kernels for every elementwise op and fused_elementwise: plain per-element loops
// over any strides with numpy broadcasting. They are the oracle for the fast kernels, so
// they favour obviousness: one index computation per element, one switch per op.
//
// Float semantics: inputs are read at their dtype T (f32 or f64); transcendental and
// arithmetic results are computed in double and rounded once to T (for + - * / that equals
// T arithmetic), floor_divide/remainder are computed in T because their result depends on
// the rounding of intermediate steps exactly as PyTorch does it. Integer ops compute in
// int64 with two's-complement wrap (i32 results truncate, as PyTorch's do).
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "ir/elementwise_program.h"
#include "ir/op_table.h"
#include "kernels/elementwise_ops.h"
#include "kernels/kernel.h"

namespace updraft {
namespace {

double load_f(const TensorView& v, int64_t off) {
  switch (v.dtype) {
    case DType::f32: return v.ptr<float>()[off];
    case DType::f64: return v.ptr<double>()[off];
    case DType::i64: return static_cast<double>(v.ptr<int64_t>()[off]);
    case DType::i32: return v.ptr<int32_t>()[off];
    case DType::boolean: return v.ptr<bool>()[off] ? 1.0 : 0.0;
    default: throw Error("kernels", std::string("ref elementwise: dtype ") + dtype_name(v.dtype) + " is not handled");
  }
}

int64_t load_i(const TensorView& v, int64_t off) {
  switch (v.dtype) {
    case DType::i64: return v.ptr<int64_t>()[off];
    case DType::i32: return v.ptr<int32_t>()[off];
    case DType::boolean: return v.ptr<bool>()[off] ? 1 : 0;
    default: return static_cast<int64_t>(load_f(v, off));
  }
}

// Float -> int conversion of NaN/inf/out-of-range is undefined in C++. PyTorch on x86 gives
// what the truncating conversion instructions give there, the "integer indefinite" value, i.e.
// the type's minimum (int64: INT64_MIN; int32: INT32_MIN, e.g. 3e9 -> -2147483648), so the
// reference writes that, without invoking UB.
template <typename I> I float_to_int(double x) {
  if (!(x > static_cast<double>(std::numeric_limits<I>::min()) - 1.0 &&
        x < static_cast<double>(std::numeric_limits<I>::max()) + 1.0))
    return std::numeric_limits<I>::min();
  return static_cast<I>(x);
}

void store_f(const TensorView& v, int64_t off, double x) {
  switch (v.dtype) {
    case DType::f32: v.ptr<float>()[off] = static_cast<float>(x); break;
    case DType::f64: v.ptr<double>()[off] = x; break;
    case DType::i64: v.ptr<int64_t>()[off] = float_to_int<int64_t>(x); break;
    case DType::i32: v.ptr<int32_t>()[off] = float_to_int<int32_t>(x); break;
    case DType::boolean: v.ptr<bool>()[off] = x != 0.0; break;
    default: throw Error("kernels", std::string("ref elementwise: dtype ") + dtype_name(v.dtype) + " is not handled");
  }
}

void store_i(const TensorView& v, int64_t off, int64_t x) {
  switch (v.dtype) {
    case DType::i64: v.ptr<int64_t>()[off] = x; break;
    case DType::i32: v.ptr<int32_t>()[off] = static_cast<int32_t>(x); break;  // wraps mod 2^32
    case DType::boolean: v.ptr<bool>()[off] = x != 0; break;
    default: store_f(v, off, static_cast<double>(x)); break;
  }
}

// Calls f(out_offset, in_offsets) for every output element in row-major order. Input dims
// align to the right of the output's; a size-1 input dim broadcasts (offset stays put).
template <typename F>
void for_each_element(const TensorView& out, const TensorView* in, int nin, F f) {
  int r = out.ndim;
  std::vector<std::vector<int64_t>> st(nin, std::vector<int64_t>(r, 0));
  for (int k = 0; k < nin; ++k) {
    int shift = r - in[k].ndim;
    UPDRAFT_CHECK(shift >= 0, "kernels", "ref elementwise: input has a higher rank than the output");
    for (int d = 0; d < in[k].ndim; ++d) {
      int64_t sz = in[k].sizes[d];
      UPDRAFT_CHECK(sz == 1 || sz == out.sizes[d + shift], "kernels", "ref elementwise: input does not broadcast to the output");
      st[k][d + shift] = sz == 1 ? 0 : in[k].strides[d];
    }
  }
  int64_t n = out.numel();
  std::vector<int64_t> offs(nin);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, oo = 0;
    std::fill(offs.begin(), offs.end(), 0);
    for (int d = r - 1; d >= 0; --d) {
      int64_t c = rem % out.sizes[d];
      rem /= out.sizes[d];
      oo += c * out.strides[d];
      for (int k = 0; k < nin; ++k) offs[k] += c * st[k][d];
    }
    f(oo, offs.data());
  }
}

template <typename T> T py_floor_divide(T a, T b) {
  if (b == 0) return a / b;
  T mod = std::fmod(a, b);
  T div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
  if (div == 0) return std::copysign(T(0), a / b);
  T fl = std::floor(div);
  if (div - fl > T(0.5)) fl += 1;
  return fl;
}

template <typename T> T py_remainder(T a, T b) {
  T mod = std::fmod(a, b);
  if (mod != 0 && (b < 0) != (mod < 0)) mod += b;
  return mod;
}

// One float op on values of precision T (see the file comment for where rounding happens).
template <typename T> T ref_float(EwOp op, T ta, T tb, T tc) {
  double a = ta, b = tb, c = tc;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  double r = 0;
  switch (op) {
    case EwOp::neg: r = -a; break;
    case EwOp::abs: r = std::fabs(a); break;
    case EwOp::relu: r = a < 0 ? 0.0 : a; break;
    case EwOp::sigmoid: r = 1.0 / (1.0 + std::exp(-a)); break;
    case EwOp::tanh: r = std::tanh(a); break;
    case EwOp::exp: r = std::exp(a); break;
    case EwOp::log: r = std::log(a); break;
    case EwOp::sqrt: r = std::sqrt(a); break;
    case EwOp::rsqrt: r = 1.0 / std::sqrt(a); break;
    case EwOp::erf: r = std::erf(a); break;
    case EwOp::silu: r = a / (1.0 + std::exp(-a)); break;
    case EwOp::reciprocal: r = 1.0 / a; break;
    case EwOp::sin: r = std::sin(a); break;
    case EwOp::cos: r = std::cos(a); break;
    case EwOp::floor: r = std::floor(a); break;
    case EwOp::ceil: r = std::ceil(a); break;
    case EwOp::round: r = std::nearbyint(a); break;  // default rounding mode: half to even
    case EwOp::sign: r = (a > 0) - (a < 0); break;
    case EwOp::hardswish: r = a * std::min(std::max(a + 3.0, 0.0), 6.0) / 6.0; break;
    case EwOp::hardsigmoid: r = std::min(std::max(a + 3.0, 0.0), 6.0) / 6.0; break;
    case EwOp::gelu: r = 0.5 * a * std::erfc(-a * M_SQRT1_2); break;
    case EwOp::gelu_tanh: {
      double u = std::sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a);
      r = 0.5 * a * (1.0 + std::tanh(u));
      break;
    }
    case EwOp::acos: r = std::acos(a); break;
    case EwOp::acosh: r = std::acosh(a); break;
    case EwOp::asin: r = std::asin(a); break;
    case EwOp::asinh: r = std::asinh(a); break;
    case EwOp::atan: r = std::atan(a); break;
    case EwOp::atanh: r = std::atanh(a); break;
    case EwOp::cosh: r = std::cosh(a); break;
    case EwOp::sinh: r = std::sinh(a); break;
    case EwOp::tan: r = std::tan(a); break;
    case EwOp::log1p: r = std::log1p(a); break;
    case EwOp::expm1: r = std::expm1(a); break;
    case EwOp::log2: r = std::log2(a); break;
    case EwOp::log10: r = std::log10(a); break;
    case EwOp::exp2: r = std::exp2(a); break;
    case EwOp::logical_not: r = a == 0.0; break;
    case EwOp::isnan: r = std::isnan(a); break;
    case EwOp::leaky_relu: r = a > 0 ? a : a * b; break;
    case EwOp::elu: r = a > 0 ? a : b * std::expm1(a); break;
    case EwOp::add: r = a + b; break;
    case EwOp::sub: r = a - b; break;
    case EwOp::mul: r = a * b; break;
    case EwOp::div: r = a / b; break;
    case EwOp::maximum: r = (std::isnan(a) || std::isnan(b)) ? nan : std::max(a, b); break;
    case EwOp::minimum: r = (std::isnan(a) || std::isnan(b)) ? nan : std::min(a, b); break;
    case EwOp::pow: r = std::pow(a, b); break;
    case EwOp::remainder: return py_remainder<T>(ta, tb);
    case EwOp::floor_divide: return py_floor_divide<T>(ta, tb);
    case EwOp::atan2: r = std::atan2(a, b); break;
    case EwOp::fmod: return std::fmod(ta, tb);  // exact in any precision
    case EwOp::eq: r = a == b; break;
    case EwOp::ne: r = a != b; break;
    case EwOp::lt: r = a < b; break;
    case EwOp::le: r = a <= b; break;
    case EwOp::gt: r = a > b; break;
    case EwOp::ge: r = a >= b; break;
    case EwOp::logical_and: r = (a != 0) && (b != 0); break;
    case EwOp::logical_or: r = (a != 0) || (b != 0); break;
    case EwOp::clamp: r = std::isnan(a) ? a : std::min(std::max(a, b), c); break;
    case EwOp::where: r = a != 0 ? b : c; break;
    default: throw Error(ew_op_info(op).name, "has no float reference semantics");
  }
  return static_cast<T>(r);
}

// One op on integers (bool is 0/1). `imm` holds immediate operands (clamp bounds).
int64_t ref_int(EwOp op, const int64_t* v, const double* imm) {
  int64_t a = v[0], b = v[1], c = v[2];
  auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  switch (op) {
    case EwOp::neg: return static_cast<int64_t>(0 - ua);
    case EwOp::abs: return a < 0 ? static_cast<int64_t>(0 - ua) : a;
    case EwOp::relu: return a < 0 ? 0 : a;
    case EwOp::sign: return (a > 0) - (a < 0);
    case EwOp::logical_not: return a == 0;
    case EwOp::add: return static_cast<int64_t>(ua + ub);
    case EwOp::sub: return static_cast<int64_t>(ua - ub);
    case EwOp::mul: return static_cast<int64_t>(ua * ub);
    case EwOp::maximum: return std::max(a, b);
    case EwOp::minimum: return std::min(a, b);
    case EwOp::remainder:
    case EwOp::floor_divide: {
      UPDRAFT_CHECK(b != 0, ew_op_info(op).name, "integer division by zero");
      if (b == -1) return op == EwOp::remainder ? 0 : static_cast<int64_t>(0 - ua);  // avoids INT64_MIN / -1
      int64_t q = a / b, m = a % b;
      bool adjust = m != 0 && ((m < 0) != (b < 0));
      return op == EwOp::remainder ? (adjust ? m + b : m) : (adjust ? q - 1 : q);
    }
    case EwOp::eq: return a == b;
    case EwOp::ne: return a != b;
    case EwOp::lt: return a < b;
    case EwOp::le: return a <= b;
    case EwOp::gt: return a > b;
    case EwOp::ge: return a >= b;
    case EwOp::logical_and: return a != 0 && b != 0;
    case EwOp::logical_or: return a != 0 || b != 0;
    case EwOp::bitwise_and: return a & b;
    case EwOp::bitwise_or: return a | b;
    case EwOp::where: return a != 0 ? b : c;
    case EwOp::clamp: {  // bounds are doubles (the op's float attributes); +-inf never binds
      double x = static_cast<double>(a);
      if (x < imm[1]) return static_cast<int64_t>(std::ceil(imm[1]));
      if (x > imm[2]) return static_cast<int64_t>(std::floor(imm[2]));
      return a;
    }
    default: throw Error(ew_op_info(op).name, "has no integer semantics");
  }
}

// One instruction over node inputs (operands are $k or immediates).
template <typename T>
void run_float_instr(const EwInstr& ins, const TensorView* in, int nin, const TensorView& out) {
  for_each_element(out, in, nin, [&](int64_t oo, const int64_t* offs) {
    T v[3] = {0, 0, 0};
    for (size_t j = 0; j < ins.args.size(); ++j) {
      const EwOperand& a = ins.args[j];
      v[j] = a.kind == EwOperand::Kind::imm ? static_cast<T>(a.imm) : static_cast<T>(load_f(in[a.index], offs[a.index]));
    }
    store_f(out, oo, ref_float<T>(ins.op, v[0], v[1], v[2]));
  });
}

void run_int_instr(const EwInstr& ins, const TensorView* in, int nin, const TensorView& out) {
  for_each_element(out, in, nin, [&](int64_t oo, const int64_t* offs) {
    int64_t v[3] = {0, 0, 0};
    double imm[3] = {0, 0, 0};
    for (size_t j = 0; j < ins.args.size(); ++j) {
      const EwOperand& a = ins.args[j];
      if (a.kind == EwOperand::Kind::imm) imm[j] = a.imm;
      else v[j] = load_i(in[a.index], offs[a.index]);
    }
    store_i(out, oo, ref_int(ins.op, v, imm));
  });
}

void run_cast(const TensorView& x, const TensorView& out) {
  bool from_float = is_floating(x.dtype);
  for_each_element(out, &x, 1, [&](int64_t oo, const int64_t* offs) {
    if (from_float) store_f(out, oo, load_f(x, offs[0]));
    else store_i(out, oo, load_i(x, offs[0]));
  });
}

// A fused program, per element: every intermediate is rounded to f32, exactly as the unfused
// graph's f32 tensors would hold it, so fused and unfused reference results agree.
void run_program(const EwProgram& p, const TensorView* in, int nin, const TensorView& out) {
  std::vector<float> regs(p.instrs.size());
  for_each_element(out, in, nin, [&](int64_t oo, const int64_t* offs) {
    for (size_t i = 0; i < p.instrs.size(); ++i) {
      const EwInstr& ins = p.instrs[i];
      float v[3] = {0, 0, 0};
      for (size_t j = 0; j < ins.args.size(); ++j) {
        const EwOperand& a = ins.args[j];
        switch (a.kind) {
          case EwOperand::Kind::input: v[j] = static_cast<float>(load_f(in[a.index], offs[a.index])); break;
          case EwOperand::Kind::reg: v[j] = regs[a.index]; break;
          case EwOperand::Kind::imm: v[j] = static_cast<float>(a.imm); break;
        }
      }
      regs[i] = ref_float<float>(ins.op, v[0], v[1], v[2]);
    }
    store_f(out, oo, regs.back());
  });
}

std::unique_ptr<Kernel> make_ref_instr_kernel(const KernelContext& ctx) {
  const Node& n = ctx.node;
  EwInstr ins = ew_instr_for_node(n);
  int nin = static_cast<int>(n.inputs.size());
  // The data dtype decides the domain; where's condition is input 0, its data is input 1.
  DType data = n.inputs.at(ins.op == EwOp::where ? 1 : 0)->type.dtype;
  std::string name = std::string("ref_") + dtype_name(data) + "_" + n.op_name();
  if (data == DType::f32)
    return make_kernel(name, [ins, nin](const TensorView* in, TensorView* out) { run_float_instr<float>(ins, in, nin, out[0]); });
  if (data == DType::f64)
    return make_kernel(name, [ins, nin](const TensorView* in, TensorView* out) { run_float_instr<double>(ins, in, nin, out[0]); });
  return make_kernel(name, [ins, nin](const TensorView* in, TensorView* out) { run_int_instr(ins, in, nin, out[0]); });
}

}  // namespace

void register_ref_elementwise_kernels(KernelRegistry& r) {
  for (const char* op : kElementwiseNodeOps)
    r.add(op, Device::ref, make_ref_instr_kernel);
  r.add("cast", Device::ref, [](const KernelContext& ctx) {
    return make_kernel(std::string("ref_cast_to_") + dtype_name(ctx.out_dtype(0)),
                       [](const TensorView* in, TensorView* out) { run_cast(in[0], out[0]); });
  });
  r.add("fused_elementwise", Device::ref, [](const KernelContext& ctx) {
    EwProgram p = parse_ew_program(ctx.node.attr("program").s(), "fused_elementwise");
    int nin = static_cast<int>(ctx.node.inputs.size());
    return make_kernel("ref_fused_elementwise",
                       [p, nin](const TensorView* in, TensorView* out) { run_program(p, in, nin, out[0]); });
  });
}

}  // namespace updraft
