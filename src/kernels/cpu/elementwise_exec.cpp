// Broadcast planning and the blocked program evaluator behind every f32 elementwise kernel,
// single op or fused chain, and every f64 single-op kernel: each block of up to kBlock output elements is computed
// through the whole program with intermediates in stack buffers, so memory is read and
// written once per element no matter how long the chain is.
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/elementwise_internal.h"

namespace updraft::cpu_ew {

namespace {

// Merges the plan's last two dims where every operand either steps through them jointly or is
// periodic over them (BcastPlan): stride 0 over the outer, 1 over an inner of P elements.
void merge_periodic_inner(BcastPlan& p, int64_t chunk) {
  const int nd = p.ndim;
  if (nd < 2) return;
  const int64_t P = p.sizes[nd - 1];
  if (P < 2 || chunk % P != 0) return;  // 0: an empty tensor
  bool any = false;
  for (int k = 0; k < p.nops; ++k) {
    const int64_t s_in = p.strides[k][nd - 1], s_out = p.strides[k][nd - 2];
    if (s_out == s_in * P) continue;
    if (k == 0 || s_in != 1 || s_out != 0) return;
    any = true;
  }
  if (!any) return;
  p.periodic = true;
  for (int k = 0; k < p.nops; ++k) {
    const bool per = p.strides[k][nd - 1] == 1 && p.strides[k][nd - 2] == 0 && k > 0;
    p.period[k] = per ? P : 0;
    p.strides[k][nd - 2] = per ? 0 : p.strides[k][nd - 1];
  }
  p.sizes[nd - 2] *= P;
  p.ndim = nd - 1;
}

}  // namespace

BcastPlan make_bcast_plan(const TensorView& out, const TensorView* in, int nin, const std::string& op,
                          int64_t periodic_chunk) {
  UPDRAFT_CHECK(nin <= kMaxInputs, op, "has " + std::to_string(nin) + " inputs; the CPU kernels take at most " +
                                           std::to_string(kMaxInputs));
  const int r = out.ndim;
  int64_t st[kMaxOperands][kMaxDims];  // rows [0, nin] x dims [0, r) are set below
  for (int d = 0; d < r; ++d) st[0][d] = out.strides[d];
  for (int k = 0; k < nin; ++k) {
    int shift = r - in[k].ndim;
    bool ok = shift >= 0;
    for (int d = 0; d < shift && d < r; ++d) st[k + 1][d] = 0;  // leading broadcast dims
    for (int d = 0; ok && d < in[k].ndim; ++d) {
      int64_t sz = in[k].sizes[d], want = out.sizes[d + shift];
      if (sz == want) st[k + 1][d + shift] = sz == 1 ? 0 : in[k].strides[d];
      else if (sz == 1) st[k + 1][d + shift] = 0;
      else ok = false;
    }
    if (!ok) {
      std::string s = "[";
      for (int d = 0; d < in[k].ndim; ++d) s += (d ? ", " : "") + std::to_string(in[k].sizes[d]);
      throw Error(op, "input " + std::to_string(k) + " of shape " + s + "] does not broadcast to the output");
    }
  }
  BcastPlan p;
  p.nops = nin + 1;
  p.numel = out.numel();
  int nd = 0;
  for (int d = 0; d < r; ++d) {
    if (out.sizes[d] == 1) continue;
    bool merge = nd > 0;
    for (int k = 0; merge && k < p.nops; ++k) merge = p.strides[k][nd - 1] == st[k][d] * out.sizes[d];
    if (merge) {
      p.sizes[nd - 1] *= out.sizes[d];
      for (int k = 0; k < p.nops; ++k) p.strides[k][nd - 1] = st[k][d];
    } else {
      p.sizes[nd] = out.sizes[d];
      for (int k = 0; k < p.nops; ++k) p.strides[k][nd] = st[k][d];
      ++nd;
    }
  }
  if (nd == 0) {  // a single element
    nd = 1;
    p.sizes[0] = 1;
    for (int k = 0; k < p.nops; ++k) p.strides[k][0] = 0;
  }
  p.ndim = nd;
  if (periodic_chunk > 0) merge_periodic_inner(p, periodic_chunk);
  return p;
}

template <typename T>
std::unique_ptr<BlockProgram<T>> BlockProgram<T>::compile(const EwProgram& p, int num_inputs) {
  if (num_inputs > kMaxInputs || p.num_inputs() > num_inputs) return nullptr;
  auto prog = std::unique_ptr<BlockProgram>(new BlockProgram());
  prog->out_dtype_ = p.out_dtype == DType::boolean ? DType::boolean : kData;
  prog->input_slot_.assign(num_inputs, -1);
  int nslots = 0;
  std::vector<int> free_slots;
  auto alloc = [&] {
    if (!free_slots.empty()) {
      int s = free_slots.back();
      free_slots.pop_back();
      return s;
    }
    return nslots++;
  };
  auto imm_slot = [&](T v) {
    for (auto& [s, x] : prog->imms_)
      if (std::memcmp(&x, &v, sizeof v) == 0) return s;  // bitwise: keeps -0.0 and NaN distinct
    int s = nslots++;
    prog->imms_.push_back({s, v});
    return s;
  };
  const int n = static_cast<int>(p.instrs.size());
  std::vector<int> last_use(n, -1), reg_slot(n, -1);
  for (int i = 0; i < n; ++i)
    for (const EwOperand& a : p.instrs[i].args)
      if (a.kind == EwOperand::Kind::reg) last_use[a.index] = i;
  for (int k : p.also) last_use[k] = n;  // extra results are stored at the end of each block
  for (int i = 0; i < n; ++i) {
    EwInstr ins = p.instrs[i];
    if (!ew_op_info(ins.op).in_program) return nullptr;
    // x ** c for the exponents PyTorch itself special-cases: exact (2) or correctly rounded.
    if (ins.op == EwOp::pow && ins.args[1].kind == EwOperand::Kind::imm) {
      double e = ins.args[1].imm;
      if (e == 2.0) ins = {EwOp::mul, {ins.args[0], ins.args[0]}};
      else if (e == 0.5) ins = {EwOp::sqrt, {ins.args[0]}};
      else if (e == -0.5) ins = {EwOp::rsqrt, {ins.args[0]}};
      else if (e == -1.0) ins = {EwOp::reciprocal, {ins.args[0]}};
    }
    BlockFn<T> fn = block_fn(ins.op, T{});
    if (!fn) return nullptr;  // no fast functor for T: the reference runs it
    Step st{fn, static_cast<int>(ins.args.size()), {0, 0, 0}, 0};
    for (int j = 0; j < st.nargs; ++j) {
      const EwOperand& a = ins.args[j];
      if (a.kind == EwOperand::Kind::input) {
        int& s = prog->input_slot_.at(a.index);
        if (s < 0) s = nslots++;
        st.args[j] = s;
      } else if (a.kind == EwOperand::Kind::reg) {
        st.args[j] = reg_slot[a.index];
      } else {
        st.args[j] = imm_slot(static_cast<T>(a.imm));
      }
    }
    // Operands dying here free their slots first: block ops read lane i before writing it,
    // so the result may overwrite an operand it was computed from.
    for (const EwOperand& a : p.instrs[i].args)
      if (a.kind == EwOperand::Kind::reg && last_use[a.index] == i && reg_slot[a.index] >= 0) {
        free_slots.push_back(reg_slot[a.index]);
        reg_slot[a.index] = -1;  // an operand used twice by one instruction is freed once
      }
    st.dst = reg_slot[i] = alloc();
    if (last_use[i] < 0 && i != n - 1) free_slots.push_back(st.dst);  // dead result
    prog->steps_.push_back(st);
  }
  if (nslots > kMaxSlots) return nullptr;
  prog->nslots_ = nslots;
  for (int k : p.also) {
    prog->also_slots_.push_back(reg_slot[k]);
    prog->also_step_.push_back(k);  // instruction k is step k
  }
  prog->input_last_read_.assign(num_inputs, -1);
  for (int i = 0; i < n; ++i)
    for (const EwOperand& a : p.instrs[i].args)
      if (a.kind == EwOperand::Kind::input) prog->input_last_read_[a.index] = i;
  return prog;
}

namespace {

// The bytes a view can touch, [lo, hi).
std::pair<const char*, const char*> span_of(const TensorView& t) {
  const char* lo = static_cast<const char*>(t.data);
  const char* hi = lo;
  const int64_t es = static_cast<int64_t>(dtype_size(t.dtype));
  for (int d = 0; d < t.ndim; ++d) {
    if (t.sizes[d] == 0) return {lo, lo};
    const int64_t reach = (t.sizes[d] - 1) * t.strides[d] * es;
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo, hi + es};
}

bool overlap(const TensorView& a, const TensorView& b) {
  auto [alo, ahi] = span_of(a);
  auto [blo, bhi] = span_of(b);
  return alo < bhi && blo < ahi;
}

}  // namespace

template <typename T>
std::vector<int> BlockProgram<T>::direct_outputs(const TensorView* in, int nin, const TensorView* outs) const {
  if (also_slots_.empty()) return {};  // no allocation on the calls of single ops and plain chains
  std::vector<int> step_out(steps_.size(), -1);
  const int nout = 1 + static_cast<int>(also_slots_.size());
  for (int k = 1; k < nout; ++k) {
    bool ok = true;
    for (int j = 0; ok && j < nout; ++j) ok = j == k || !overlap(outs[k], outs[j]);
    // An input sharing this output's memory is safe only as the same elements (its lane i read
    // before lane i is written, within one block) and only if no later step reads it.
    for (int j = 0; ok && j < nin; ++j)
      if (overlap(outs[k], in[j]))
        ok = in[j].data == outs[k].data && in[j].dtype == outs[k].dtype && in[j].is_contiguous() &&
             in[j].shape() == outs[k].shape() && input_last_read_[j] <= also_step_[k - 1];
    if (ok) step_out[also_step_[k - 1]] = k;
  }
  return step_out;
}

template <typename T>
void BlockProgram<T>::run(const TensorView* in, int nin, TensorView* outs, const std::string& op) const {
  TensorView& out = outs[0];
  UPDRAFT_CHECK(out.is_contiguous(), op, "the CPU kernel writes contiguous outputs only");
  for (size_t k = 0; k < also_slots_.size(); ++k)
    UPDRAFT_CHECK(outs[k + 1].is_contiguous() && outs[k + 1].shape() == out.shape(), op,
                  "extra result " + std::to_string(k + 1) + " needs a contiguous output of output 0's shape");
  UPDRAFT_CHECK(nin == static_cast<int>(input_slot_.size()), op, "got the wrong number of inputs");
  for (int k = 0; k < nin; ++k)
    UPDRAFT_CHECK(in[k].dtype == kData || in[k].dtype == DType::boolean, op,
                  std::string("input ") + std::to_string(k) + " is " + dtype_name(in[k].dtype) + ", expected " +
                      dtype_name(kData) + " or bool");
  const BcastPlan plan = make_bcast_plan(out, in, nin, op, kBlock);
  // Inputs that are one value for the whole call (every stride 0: a 0-d tensor, an optimizer's
  // bias correction) are filled into their slot once per thread, like immediates.
  // A periodic input's strides are 0 too (its period indexes it): not uniform.
  bool uniform[kMaxInputs] = {};
  for (int k = 0; k < nin; ++k) {
    bool all0 = in[k].dtype == kData && input_slot_[k] >= 0 && plan.inner_period(k + 1) == 0;
    for (int d = 0; all0 && d < plan.ndim; ++d) all0 = plan.strides[k + 1][d] == 0;
    uniform[k] = all0;
  }
  const std::vector<int> step_out = direct_outputs(in, nin, outs);
  const BlockProgram& self = *this;
  // Per-thread state: a block-sized stack buffer per slot, immediates filled once.
  bcast_for(plan, kBlock, [&] {
    struct Body {
      const BlockProgram& prog;
      const BcastPlan& plan;
      const TensorView* in;
      TensorView* outs;
      const bool* uniform;
      const int* step_out;  // direct_outputs' answer; null without extra results
      alignas(32) T buf[kMaxSlots][kBlock];
      // A broadcast input's value and count last filled into its slot: the chunks of one row
      // read the same value, which is filled once (input slots are never written by a step).
      // Set for the input slots only: clearing all kMaxSlots entries per call would cost what
      // BcastPlan avoids clearing.
      const T* filled_from[kMaxSlots];
      int filled_n[kMaxSlots];
      explicit Body(const BlockProgram& pr, const BcastPlan& pl, const TensorView* i, TensorView* o, const bool* u,
                    const int* so)
          : prog(pr), plan(pl), in(i), outs(o), uniform(u), step_out(so) {
        for (auto [s, v] : prog.imms_) std::fill(buf[s], buf[s] + kBlock, v);
        for (size_t k = 0; k < prog.input_slot_.size(); ++k) {
          const int s = prog.input_slot_[k];
          if (s < 0) continue;
          filled_from[s] = nullptr, filled_n[s] = 0;
          if (uniform[k]) std::fill(buf[s], buf[s] + kBlock, *in[k].ptr<T>());
        }
      }
      // Inlined into the walk (bcast_for's one per block call): a call with this frame per
      // block cost ~3 ns, 10% of a [1, 960, 7, 7] multiply's 49-element blocks.
      [[gnu::always_inline]] inline void operator()(const int64_t* off, int64_t n64) {
        const int n = static_cast<int>(n64);
        const T* ptr[kMaxSlots];
        for (int s = 0; s < prog.nslots_; ++s) ptr[s] = buf[s];
        for (size_t k = 0; k < prog.input_slot_.size(); ++k) {
          int s = prog.input_slot_[k];
          if (s < 0 || uniform[k]) continue;
          int64_t stride = plan.inner_stride(static_cast<int>(k) + 1);
          const int64_t period = plan.inner_period(static_cast<int>(k) + 1);  // blocks start at phase 0
          if (in[k].dtype == kData) {
            const T* base = in[k].ptr<T>() + off[k + 1];
            if (stride == 1) ptr[s] = base;  // read in place: no copy for the common case
            else if (period) for (int i = 0; i < n; i += period) std::copy(base, base + period, buf[s] + i);
            else if (stride == 0) {
              if (filled_from[s] != base || filled_n[s] < n) {
                std::fill(buf[s], buf[s] + n, *base);
                filled_from[s] = base, filled_n[s] = n;
              }
            }
            else for (int i = 0; i < n; ++i) buf[s][i] = base[i * stride];
          } else {
            const bool* base = in[k].ptr<bool>() + off[k + 1];
            for (int i = 0; i < n; ++i) buf[s][i] = base[period ? i % period : i * stride] ? T(1) : T(0);
          }
        }
        const bool data_out = prog.out_dtype_ == kData;
        T* out_data = data_out ? outs[0].ptr<T>() + off[0] : nullptr;
        const size_t last = prog.steps_.size() - 1;
        for (size_t i = 0; i <= last; ++i) {
          const Step& st = prog.steps_[i];
          // The last step writes straight to the output; every read of this block's inputs
          // has happened by then, so an output sharing input 0's buffer is safe.
          T* dst = (i == last && data_out) ? out_data
                   : step_out && step_out[i] > 0 ? outs[step_out[i]].ptr<T>() + off[0]
                                            : buf[st.dst];
          st.fn(ptr[st.args[0]], st.nargs > 1 ? ptr[st.args[1]] : nullptr, st.nargs > 2 ? ptr[st.args[2]] : nullptr,
                dst, n);
          ptr[st.dst] = dst;
        }
        if (!data_out) {
          bool* ob = outs[0].ptr<bool>() + off[0];
          const T* r = ptr[prog.steps_[last].dst];
          for (int i = 0; i < n; ++i) ob[i] = r[i] != T(0);
        }
        // The other extra results after every step: an output sharing the memory of an input
        // read later is stored once all of this block's reads are done.
        for (size_t k = 0; k < prog.also_slots_.size(); ++k)
          if (step_out[prog.also_step_[k]] < 0)
            std::copy(buf[prog.also_slots_[k]], buf[prog.also_slots_[k]] + n, outs[k + 1].ptr<T>() + off[0]);
      }
    };
    return Body(self, plan, in, outs, uniform, step_out.empty() ? nullptr : step_out.data());
  });
}

template class BlockProgram<float>;
template class BlockProgram<double>;

namespace {

bool all_data(const Node& n, bool is_where, DType data) {
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    DType want = (is_where && k == 0) ? DType::boolean : data;
    if (n.inputs[k]->type.dtype != want) return false;
  }
  return true;
}

template <typename Prog>
std::unique_ptr<Kernel> program_kernel(std::string name, std::string op, std::shared_ptr<const Prog> prog,
                                       int threads) {
  return make_generic_kernel(std::move(name), [prog, op, threads](const TensorView* in, TensorView* out) {
    cpu::ScopedThreads t(ew_threads(threads));
    prog->run(in, static_cast<int>(prog->num_inputs()), out, op);
  });
}

}  // namespace

namespace {

// One elementwise node on T data as a one-instruction program; nullptr to decline.
template <typename T>
std::unique_ptr<Kernel> make_single_kernel(const KernelContext& ctx, const char* suffix) {
  constexpr DType data = sizeof(T) == 4 ? DType::f32 : DType::f64;
  const Node& n = ctx.node;
  if (n.op_name() == "cast") return nullptr;
  EwInstr ins = ew_instr_for_node(n);
  if (!ew_op_info(ins.op).in_program || !all_data(n, ins.op == EwOp::where, data)) return nullptr;
  DType out = ctx.out_dtype(0);
  if (out != data && out != DType::boolean) return nullptr;
  EwProgram p;
  p.out_dtype = out == data ? DType::f32 : out;  // a program's "f32" means "the data type" here
  p.instrs.push_back(std::move(ins));
  std::shared_ptr<const BlockProgram<T>> prog = BlockProgram<T>::compile(p, static_cast<int>(n.inputs.size()));
  if (!prog) return nullptr;
  return program_kernel(std::string("cpu_") + dtype_name(data) + "_" + n.op_name() + suffix, n.op_name(),
                        std::move(prog), ctx.num_threads);
}

}  // namespace

std::unique_ptr<Kernel> make_f32_kernel(const KernelContext& ctx) { return make_single_kernel<float>(ctx, "_avx2"); }
std::unique_ptr<Kernel> make_f64_kernel(const KernelContext& ctx) { return make_single_kernel<double>(ctx, ""); }

std::unique_ptr<Kernel> make_fused_kernel(const KernelContext& ctx) {
  const Node& n = ctx.node;
  for (Value* v : n.inputs)
    if (v->type.dtype != DType::f32 && v->type.dtype != DType::boolean) return nullptr;
  EwProgram p = parse_ew_program(n.attr("program").s(), "fused_elementwise");
  std::shared_ptr<const F32Program> prog = F32Program::compile(p, static_cast<int>(n.inputs.size()));
  if (!prog) return nullptr;  // more inputs or live values than the stack blocks hold: ref runs it
  return program_kernel("cpu_fused_elementwise_f32_avx2", "fused_elementwise", std::move(prog), ctx.num_threads);
}

}  // namespace updraft::cpu_ew
