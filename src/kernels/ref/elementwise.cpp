// Reference kernels for every elementwise op and fused_elementwise: plain per-element loops
// over any strides with numpy broadcasting. They are the oracle for the fast kernels, so
// they favour obviousness: one index computation per element, and each op's formula from its
// row (kernels/elementwise_ops.h says where rounding happens).
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "ir/elementwise_program.h"
#include "ir/op_table.h"
#include "kernels/elementwise_ops.h"
#include "kernels/kernel.h"
#include "kernels/quantize.h"

namespace updraft {
namespace {

double load_f(const TensorView& v, int64_t off) {
  switch (v.dtype) {
    case DType::f32: return v.ptr<float>()[off];
    case DType::f64: return v.ptr<double>()[off];
    case DType::i64: return static_cast<double>(v.ptr<int64_t>()[off]);
    case DType::i32: return v.ptr<int32_t>()[off];
    case DType::boolean: return v.ptr<bool>()[off] ? 1.0 : 0.0;
    case DType::i8: return v.ptr<int8_t>()[off];  // i8, u8, bf16: cast's sources only
    case DType::u8: return v.ptr<uint8_t>()[off];
    case DType::bf16: return bf16_to_f32(v.ptr<uint16_t>()[off]);
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

// One instruction over node inputs (operands are $k or immediates).
template <typename T>
void run_float_instr(const EwInstr& ins, const TensorView* in, int nin, const TensorView& out) {
  for_each_element(out, in, nin, [&](int64_t oo, const int64_t* offs) {
    T v[3] = {0, 0, 0};
    for (size_t j = 0; j < ins.args.size(); ++j) {
      const EwOperand& a = ins.args[j];
      v[j] = a.kind == EwOperand::Kind::imm ? static_cast<T>(a.imm) : static_cast<T>(load_f(in[a.index], offs[a.index]));
    }
    store_f(out, oo, ew_ref<T>(ins.op, v[0], v[1], v[2]));
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
    store_i(out, oo, ew_ref_int(ins.op, v, imm));
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
// graph's f32 tensors would hold it, so fused and unfused reference results agree. Outputs 1..
// (the extra results) have output 0's shape and are stored at its offsets.
void run_program(const EwProgram& p, const TensorView* in, int nin, TensorView* out) {
  for (int k = 1; k < p.num_outputs(); ++k)
    UPDRAFT_CHECK(out[k].is_contiguous() && out[k].shape() == out[0].shape() && out[0].is_contiguous(),
                  "fused_elementwise", "extra results need contiguous outputs of output 0's shape");
  std::vector<float> regs(p.instrs.size());
  for_each_element(out[0], in, nin, [&](int64_t oo, const int64_t* offs) {
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
      regs[i] = ew_ref<float>(ins.op, v[0], v[1], v[2]);
    }
    store_f(out[0], oo, regs.back());
    for (size_t k = 0; k < p.also.size(); ++k) out[k + 1].ptr<float>()[oo] = regs[p.also[k]];
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
  for (const char* op : ew_kernel_node_ops()) r.add(op, Device::ref, make_ref_instr_kernel);
  r.add("cast", Device::ref, [](const KernelContext& ctx) {
    return make_kernel(std::string("ref_cast_to_") + dtype_name(ctx.out_dtype(0)),
                       [](const TensorView* in, TensorView* out) { run_cast(in[0], out[0]); });
  });
  r.add("fused_elementwise", Device::ref, [](const KernelContext& ctx) {
    EwProgram p = parse_ew_program(ctx.node.attr("program").s(), "fused_elementwise");
    int nin = static_cast<int>(ctx.node.inputs.size());
    return make_kernel("ref_fused_elementwise",
                       [p, nin](const TensorView* in, TensorView* out) { run_program(p, in, nin, out); });
  });
}

}  // namespace updraft
