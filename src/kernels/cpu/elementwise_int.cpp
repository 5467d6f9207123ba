// Integer and bool elementwise kernels (i64, i32, bool; where also on f64) and cast between
// f32/f64/i64/i32/bool (and from i8/u8/bf16). Typed loops over the broadcast plan; the contiguous and
// scalar-operand cases are separate loops the compiler vectorises. Integer arithmetic wraps
// (two's complement), as PyTorch's does. Integer floor_divide and remainder scan the divisor
// for a zero first and raise the reference's error before any work (an exception must not
// leave an OpenMP region).
#include <limits>
#include <type_traits>

#include "core/error.h"
#include "kernels/cpu/elementwise_internal.h"
#include "kernels/quantize.h"

namespace updraft::cpu_ew {
namespace {

constexpr int64_t kChunk = 4096;  // elements per work item: amortises the per-chunk indexing

template <typename A, typename R, typename F>
void loop1(const TensorView* in, TensorView& out, const std::string& op, F f) {
  BcastPlan p = make_bcast_plan(out, in, 1, op);
  const A* x = in[0].ptr<A>();
  R* d = out.ptr<R>();
  const int64_t sx = p.inner_stride(1);
  bcast_for(p, kChunk, [&] {
    return [&](const int64_t* o, int64_t n) {
      R* dd = d + o[0];
      const A* xx = x + o[1];
      if (sx == 1) for (int64_t i = 0; i < n; ++i) dd[i] = f(xx[i]);
      else for (int64_t i = 0; i < n; ++i) dd[i] = f(xx[i * sx]);
    };
  });
}

template <typename A, typename R, typename F>
void loop2(const TensorView* in, TensorView& out, const std::string& op, F f) {
  BcastPlan p = make_bcast_plan(out, in, 2, op);
  const A* x = in[0].ptr<A>();
  const A* y = in[1].ptr<A>();
  R* d = out.ptr<R>();
  const int64_t sx = p.inner_stride(1), sy = p.inner_stride(2);
  bcast_for(p, kChunk, [&] {
    return [&](const int64_t* o, int64_t n) {
      R* dd = d + o[0];
      const A* xx = x + o[1];
      const A* yy = y + o[2];
      if (sx == 1 && sy == 1) {
        for (int64_t i = 0; i < n; ++i) dd[i] = f(xx[i], yy[i]);
      } else if (sx == 1 && sy == 0) {
        const A b = *yy;
        for (int64_t i = 0; i < n; ++i) dd[i] = f(xx[i], b);
      } else if (sx == 0 && sy == 1) {
        const A a = *xx;
        for (int64_t i = 0; i < n; ++i) dd[i] = f(a, yy[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) dd[i] = f(xx[i * sx], yy[i * sy]);
      }
    };
  });
}

template <typename T>
void where_loop(const TensorView* in, TensorView& out) {
  BcastPlan p = make_bcast_plan(out, in, 3, "where");
  const bool* c = in[0].ptr<bool>();
  const T* x = in[1].ptr<T>();
  const T* y = in[2].ptr<T>();
  T* d = out.ptr<T>();
  const int64_t sc = p.inner_stride(1), sx = p.inner_stride(2), sy = p.inner_stride(3);
  bcast_for(p, kChunk, [&] {
    return [&](const int64_t* o, int64_t n) {
      T* dd = d + o[0];
      const bool* cc = c + o[1];
      const T* xx = x + o[2];
      const T* yy = y + o[3];
      if (sc == 1 && sx == 1 && sy == 1)
        for (int64_t i = 0; i < n; ++i) dd[i] = cc[i] ? xx[i] : yy[i];
      else
        for (int64_t i = 0; i < n; ++i) dd[i] = cc[i * sc] ? xx[i * sx] : yy[i * sy];
    };
  });
}

// Calls f(T{}) with T the C++ type of dt (only the dtypes listed; others return false).
template <typename F> bool with_int_type(DType dt, bool allow_bool, F f) {
  switch (dt) {
    case DType::i64: f(int64_t{}); return true;
    case DType::i32: f(int32_t{}); return true;
    case DType::boolean: if (allow_bool) { f(bool{}); return true; } return false;
    default: return false;
  }
}

template <typename T> T wrap_add(T a, T b) { using U = std::make_unsigned_t<T>; return static_cast<T>(U(a) + U(b)); }
template <typename T> T wrap_sub(T a, T b) { using U = std::make_unsigned_t<T>; return static_cast<T>(U(a) - U(b)); }
template <typename T> T wrap_mul(T a, T b) { using U = std::make_unsigned_t<T>; return static_cast<T>(U(a) * U(b)); }

// Whether any element of v (any strides) is zero.
template <typename T> bool has_zero(const TensorView& v) {
  const T* p = v.ptr<T>();
  int64_t n = v.numel(), idx[kMaxDims] = {};
  for (int64_t e = 0; e < n; ++e) {
    int64_t off = 0;
    for (int d = 0; d < v.ndim; ++d) off += idx[d] * v.strides[d];
    if (p[off] == 0) return true;
    for (int d = v.ndim - 1; d >= 0 && ++idx[d] == v.sizes[d]; --d) idx[d] = 0;
  }
  return false;
}

// Python-style integer division (rounds toward -inf; the remainder takes the divisor's sign);
// b == -1 is taken apart because INT_MIN / -1 overflows. b != 0 (checked by the caller).
template <typename T> T int_floor_divide(T a, T b) {
  if (b == -1) return wrap_sub<T>(0, a);
  T q = static_cast<T>(a / b), m = static_cast<T>(a % b);
  return (m != 0 && ((m < 0) != (b < 0))) ? static_cast<T>(q - 1) : q;
}
template <typename T> T int_remainder(T a, T b) {
  if (b == -1) return 0;
  T m = static_cast<T>(a % b);
  return (m != 0 && ((m < 0) != (b < 0))) ? static_cast<T>(m + b) : m;
}

// The integer functor of each op: f<T>(a[, b]) on i64/i32 (and bool when kBool), the result
// bool for truth-valued ops; kDivides: a zero divisor raises the reference's error before any
// work. An op with none has no integer fast kernel (the reference runs it: integer clamp).
template <EwOp Op> struct IntFn {
  static constexpr bool kHas = false;
  static constexpr bool kBool = false;
};
template <int Arity, bool Bool, bool Divides = false> struct IntForm {
  static constexpr bool kHas = true;
  static constexpr int kArity = Arity;
  static constexpr bool kBool = Bool;
  static constexpr bool kDivides = Divides;
};
#define INT_FN1(OP, BOOL, ...) \
  template <> struct IntFn<EwOp::OP> : IntForm<1, BOOL> { template <typename T> static auto f(T a) { return __VA_ARGS__; } };
#define INT_FN2(OP, BOOL, ...)                                                      \
  template <> struct IntFn<EwOp::OP> : IntForm<2, BOOL> {                          \
    template <typename T> static auto f(T a, T b) { return __VA_ARGS__; }          \
  };

INT_FN2(add, false, wrap_add<T>(a, b))
INT_FN2(sub, false, wrap_sub<T>(a, b))
INT_FN2(mul, false, wrap_mul<T>(a, b))
INT_FN2(maximum, false, a > b ? a : b)
INT_FN2(minimum, false, a < b ? a : b)
INT_FN1(neg, false, wrap_sub<T>(0, a))
INT_FN1(abs, false, a < 0 ? wrap_sub<T>(0, a) : a)
INT_FN1(relu, false, a < 0 ? T(0) : a)
INT_FN1(sign, false, static_cast<T>((a > 0) - (a < 0)))
template <> struct IntFn<EwOp::floor_divide> : IntForm<2, false, true> {
  template <typename T> static T f(T a, T b) { return int_floor_divide<T>(a, b); }
};
template <> struct IntFn<EwOp::remainder> : IntForm<2, false, true> {
  template <typename T> static T f(T a, T b) { return int_remainder<T>(a, b); }
};
INT_FN2(eq, true, a == b)
INT_FN2(ne, true, a != b)
INT_FN2(lt, true, a < b)
INT_FN2(le, true, a <= b)
INT_FN2(gt, true, a > b)
INT_FN2(ge, true, a >= b)
INT_FN2(bitwise_and, true, static_cast<T>(a & b))
INT_FN2(bitwise_or, true, static_cast<T>(a | b))
INT_FN2(logical_and, true, a != 0 && b != 0)
INT_FN2(logical_or, true, a != 0 || b != 0)
INT_FN1(logical_not, true, a == 0)

// One op's loop over data dtype dt; the output is bool for truth-valued ops, else dt.
template <EwOp Op> void run_int_op(DType dt, const TensorView* in, TensorView& out, const std::string& name) {
  using F = IntFn<Op>;
  if constexpr (F::kHas) {
    with_int_type(dt, F::kBool, [&](auto tag) {
      using T = decltype(tag);
      using R = std::conditional_t<ew_op_info(Op).bool_result, bool, T>;
      if constexpr (std::is_same_v<T, bool> && !F::kBool) {
        return;  // not reached: with_int_type declines bool for these ops
      } else if constexpr (F::kArity == 1) {
        loop1<T, R>(in, out, name, [](T a) -> R { return F::template f<T>(a); });
      } else {
        if constexpr (F::kDivides)
          if (out.numel() > 0 && has_zero<T>(in[1])) throw Error(name, "integer division by zero");
        loop2<T, R>(in, out, name, [](T a, T b) -> R { return F::template f<T>(a, b); });
      }
    });
  }
}

// Whether run_int has a loop for (op, data dtype).
bool int_supported(EwOp op, DType dt) {
  bool i = dt == DType::i64 || dt == DType::i32;
  if (op == EwOp::where) return i || dt == DType::boolean || dt == DType::f64;
  switch (op) {
#define UPDRAFT_EW_OP(name, ...) \
  case EwOp::name:               \
    return IntFn<EwOp::name>::kHas && (i || (IntFn<EwOp::name>::kBool && dt == DType::boolean));
#include "ir/elementwise_ops.def"
    case EwOp::count_: break;
  }
  return false;
}

// Runs op on data dtype dt (int_supported(op, dt) must hold).
void run_int(EwOp op, DType dt, const TensorView* in, TensorView& out, const std::string& kernel_op) {
  if (op == EwOp::where) {
    if (dt == DType::f64) where_loop<double>(in, out);
    else with_int_type(dt, true, [&](auto tag) { where_loop<decltype(tag)>(in, out); });
    return;
  }
  switch (op) {
#define UPDRAFT_EW_OP(name, ...) \
  case EwOp::name: return run_int_op<EwOp::name>(dt, in, out, kernel_op);
#include "ir/elementwise_ops.def"
    case EwOp::count_: break;
  }
}

// Float -> int of NaN/inf/out-of-range is UB in C++; write the type's minimum there, which is
// what PyTorch gives on x86 (the reference's float_to_int says why).
template <typename I, typename F> I float_to_int(F x) {
  double v = static_cast<double>(x);
  if (!(v > static_cast<double>(std::numeric_limits<I>::min()) - 1.0 &&
        v < static_cast<double>(std::numeric_limits<I>::max()) + 1.0))
    return std::numeric_limits<I>::min();
  return static_cast<I>(x);
}

template <typename F> bool with_cast_type(DType dt, F f) {
  switch (dt) {
    case DType::f32: f(float{}); return true;
    case DType::f64: f(double{}); return true;
    default: return with_int_type(dt, true, f);
  }
}

// A bf16 element as its bits; converts to a number the way the storage form means it.
struct Bf16 {
  uint16_t bits;
};

// Cast's sources: the targets' types plus the compact storage forms a weight may come in
// (i8, u8, bf16), which are only ever widened.
template <typename F> bool with_cast_source(DType dt, F f) {
  switch (dt) {
    case DType::i8: f(int8_t{}); return true;
    case DType::u8: f(uint8_t{}); return true;
    case DType::bf16: f(Bf16{}); return true;
    default: return with_cast_type(dt, f);
  }
}

template <typename A, typename R> R convert(A x) {
  if constexpr (std::is_same_v<A, Bf16>) return convert<float, R>(bf16_to_f32(x.bits));
  else if constexpr (std::is_same_v<R, bool>) return x != A(0);
  else if constexpr (std::is_floating_point_v<A> && std::is_integral_v<R>) return float_to_int<R>(x);
  else return static_cast<R>(x);
}

}  // namespace

std::unique_ptr<Kernel> make_int_kernel(const KernelContext& ctx) {
  const Node& n = ctx.node;
  EwInstr ins = ew_instr_for_node(n);
  if (ins.args.size() != n.inputs.size()) return nullptr;  // ops with immediates (clamp) run on ref
  DType dt = ctx.in_dtype(ins.op == EwOp::where ? 1 : 0);
  if (!int_supported(ins.op, dt)) return nullptr;
  EwOp op = ins.op;
  std::string name = n.op_name();
  const int threads = ctx.num_threads;
  return make_generic_kernel(std::string("cpu_") + dtype_name(dt) + "_" + name, [op, dt, name, threads](const TensorView* in, TensorView* out) {
    cpu::ScopedThreads t(ew_threads(threads));
    UPDRAFT_CHECK(out[0].is_contiguous(), name, "the CPU kernel writes contiguous outputs only");
    run_int(op, dt, in, out[0], name);
  });
}

std::unique_ptr<Kernel> make_cast_kernel(const KernelContext& ctx) {
  DType from = ctx.in_dtype(0), to = ctx.out_dtype(0);
  bool known = with_cast_source(from, [](auto) {}) && with_cast_type(to, [](auto) {});
  if (!known) return nullptr;
  return make_generic_kernel(std::string("cpu_cast_") + dtype_name(from) + "_to_" + dtype_name(to),
                     [from, to, threads = ctx.num_threads](const TensorView* in, TensorView* out) {
                       cpu::ScopedThreads t(ew_threads(threads));
                       UPDRAFT_CHECK(out[0].is_contiguous(), "cast", "the CPU kernel writes contiguous outputs only");
                       with_cast_source(from, [&](auto a) {
                         with_cast_type(to, [&](auto r) {
                           using A = decltype(a);
                           using R = decltype(r);
                           loop1<A, R>(in, out[0], "cast", convert<A, R>);
                         });
                       });
                     });
}

}  // namespace updraft::cpu_ew
