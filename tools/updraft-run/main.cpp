// updraft-run: runs a compiled model file (written by updraft.export) from the command line, with
// no Python: `info` (what the file holds), `run` (.npy in, .npy out), `bench` (latency,
// throughput, peak memory) and `compare` (outputs against expected .npy files).
//
// It is built on the public C++ API only (include/updraft/runtime.h): what that API does not
// tell (e.g. the graph's op counts) this program does not show. Every failure is one line on
// stderr, "updraft-run: [component] what; fix", and exit code 2; `compare` exits 1 on a
// mismatch. Usage and sample output: docs/updraft-run.md.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "npy.h"
#include "updraft/runtime.h"

namespace ur = updraft::runtime;
using updraft_run::NpyArray;
using updraft_run::NpyError;
using updraft_run::NpyType;
using updraft_run::shape_str;

namespace {

// An error in what the user asked for: "[component] what; fix".
struct CliError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void fail(const std::string& component, const std::string& msg) {
  throw CliError("[" + component + "] " + msg);
}

// ------------------------------------------------------------------------------------------
// Command line

struct Command {
  const char* name;
  const char* options;  // the options it takes, space separated (values follow each)
  const char* flags;    // the options without a value
  const char* help;
};

constexpr const char* kThreadsHelp =
    "  --threads N        threads one run uses (0: all cores; default 0)\n"
    "  --no-map           read the file into memory instead of mapping it\n";

const Command kCommands[] = {
    {"info", "--shape --threads", "--no-map",
     "usage: updraft-run info FILE [--shape NAME=D0,D1,...]...\n"
     "Prints what a model file holds: its inputs and outputs (names, dtypes, symbolic dims and\n"
     "their ranges), the size of its constants and of the file, the engine version that wrote it,\n"
     "the CPU features it needs, and the working memory (arena) one run takes: for the shapes\n"
     "given with --shape, for a static model its one shape, otherwise at each symbol's smallest\n"
     "(and largest, when bounded) value.\n"
     "  --shape NAME=DIMS  a concrete shape for input NAME (a size input: its value); repeatable\n"},
    {"run", "--input --output-dir --threads", "--no-map",
     "usage: updraft-run run FILE --input [NAME=]A.npy [--input ...] --output-dir DIR\n"
     "Runs the model once on the .npy inputs and writes each output to DIR/<output name>.npy.\n"
     "  --input [NAME=]PATH  an input array (.npy; C order, little-endian; the model's dtype);\n"
     "                       in the model's input order, or NAME=PATH for input NAME\n"
     "  --output-dir DIR     where the outputs go (created if missing)\n"},
    {"bench", "--shape --input --threads --iters --time --warmup", "--no-map --zeros --json",
     "usage: updraft-run bench FILE [--shape NAME=DIMS]... [--threads N] [--iters N | --time S] [--warmup N]\n"
     "Measures the latency of one run: warm-up runs, then timed runs; prints p50/p90/p99 (and\n"
     "min/mean/max), throughput and the process's peak memory. Inputs are random (floats, uniform\n"
     "in [-1, 1), seeded) or zero (integers and bools: they are often indices, and 0 is valid for\n"
     "every table), of the static shapes or those given with --shape; or the arrays of --input.\n"
     "A progress line is shown while it runs when stdout is a terminal.\n"
     "  --shape NAME=DIMS  a concrete shape for input NAME (a size input: its value); repeatable\n"
     "  --input [NAME=]PATH  use this .npy array for an input instead of generated data\n"
     "  --iters N          timed runs (default: as many as fit in --time)\n"
     "  --time S           seconds of timed runs (default 3; at least 10 runs either way)\n"
     "  --warmup N         untimed runs first (default 5)\n"
     "  --zeros            every generated input is zero\n"
     "  --json             print the results as one JSON object\n"},
    {"compare", "--input --expect --threads --rtol --atol --output-dir", "--no-map",
     "usage: updraft-run compare FILE --input [NAME=]A.npy ... --expect [NAME=]E.npy ... [--rtol R] [--atol A]\n"
     "Runs the model once and compares each output with its expected array: a float element\n"
     "matches when |got - expected| <= atol + rtol * |expected| (NaN matches NaN), other dtypes\n"
     "must be equal. Prints the worst element of each output (index, got, expected, absolute and\n"
     "relative error). Exit code 0 when every output matches, 1 when one does not.\n"
     "  --input [NAME=]PATH   an input array, as for `run`\n"
     "  --expect [NAME=]PATH  an expected output (.npy), in the model's output order or by name\n"
     "  --rtol R, --atol A    tolerances for every float output (default: per dtype, f32 1e-3/1e-3,\n"
     "                        f64 1e-7/1e-7, f16 1e-2/1e-2, bf16 2e-2/2e-2)\n"
     "  --output-dir DIR      also write the outputs there, as `run` does\n"},
};

constexpr const char* kMainHelp =
    "usage: updraft-run COMMAND FILE [options]   (updraft-run COMMAND --help for each)\n"
    "Runs a compiled updraft model file (updraft.export) without Python.\n"
    "commands:\n"
    "  info     what the file holds: signature, sizes, engine version, CPU needs, arena per shape\n"
    "  run      run once on .npy inputs, write the outputs as .npy files\n"
    "  bench    latency p50/p90/p99, throughput and peak memory\n"
    "  compare  run once and compare the outputs with expected .npy files (exit 1 on mismatch)\n"
    "  --version  the runtime's version\n"
    "Errors: one line, \"updraft-run: [component] what; fix\", exit code 2.\n";

struct Args {
  const Command* cmd = nullptr;
  std::string file;
  std::vector<std::string> inputs, expects, shapes;
  std::string output_dir;
  int threads = 0;
  std::optional<int64_t> iters;
  std::optional<double> time_s;
  int64_t warmup = 5;
  std::optional<double> rtol, atol;
  bool no_map = false, zeros = false, json = false;
};

bool in_list(const char* list, const std::string& word) {
  std::string l = std::string(" ") + list + " ";
  return l.find(" " + word + " ") != std::string::npos;
}

int64_t parse_int(const std::string& opt, const std::string& v, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE || x < lo || x > hi)
    fail("cli", opt + " '" + v + "' is not a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    "]; give e.g. " + opt + " " + std::to_string(std::max<int64_t>(lo, 1)));
  return x;
}

double parse_double(const std::string& opt, const std::string& v, double lo) {
  char* end = nullptr;
  errno = 0;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x) || x < lo)
    fail("cli", opt + " '" + v + "' is not a number >= " + std::to_string(lo) + "; give e.g. " + opt + " 1e-4");
  return x;
}

Args parse_args(int argc, char** argv) {
  Args a;
  std::string sub = argv[1];
  for (const auto& c : kCommands)
    if (sub == c.name) a.cmd = &c;
  if (!a.cmd)
    fail("cli", "unknown command '" + sub + "'; use one of info, run, bench, compare (updraft-run --help)");
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(a.cmd->help, stdout);
      std::exit(0);
    }
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      if (arg == "--" && i + 1 < argc) arg = argv[++i];
      if (!a.file.empty())
        fail("cli", std::string(a.cmd->name) + " takes one model file, got '" + a.file + "' and '" + arg +
                        "'; give inputs with --input");
      a.file = arg;
      continue;
    }
    std::string opt = arg, val;
    bool has_val = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      opt = arg.substr(0, eq);
      val = arg.substr(eq + 1);
      has_val = true;
    }
    if (in_list(a.cmd->flags, opt)) {
      if (has_val) fail("cli", opt + " takes no value; write just " + opt);
      if (opt == "--no-map") a.no_map = true;
      if (opt == "--zeros") a.zeros = true;
      if (opt == "--json") a.json = true;
      continue;
    }
    if (!in_list(a.cmd->options, opt))
      fail("cli", std::string(a.cmd->name) + " has no option " + opt + "; see updraft-run " + a.cmd->name + " --help");
    if (!has_val) {
      if (i + 1 >= argc) fail("cli", opt + " needs a value; see updraft-run " + a.cmd->name + " --help");
      val = argv[++i];
    }
    if (opt == "--input") a.inputs.push_back(val);
    else if (opt == "--expect") a.expects.push_back(val);
    else if (opt == "--shape") a.shapes.push_back(val);
    else if (opt == "--output-dir") a.output_dir = val;
    else if (opt == "--threads") a.threads = static_cast<int>(parse_int(opt, val, 0, 4096));
    else if (opt == "--iters") a.iters = parse_int(opt, val, 1, int64_t{1} << 40);
    else if (opt == "--time") a.time_s = parse_double(opt, val, 0);
    else if (opt == "--warmup") a.warmup = parse_int(opt, val, 0, int64_t{1} << 40);
    else if (opt == "--rtol") a.rtol = parse_double(opt, val, 0);
    else if (opt == "--atol") a.atol = parse_double(opt, val, 0);
  }
  if (a.file.empty())
    fail("cli", std::string(a.cmd->name) + " needs a model file; usage: " +
                    std::string(a.cmd->help).substr(7, std::string(a.cmd->help).find('\n') - 7));
  if (a.iters && a.time_s) fail("cli", "--iters and --time both given; give one");
  std::string name = a.cmd->name;
  if (name == "run" && a.output_dir.empty()) fail("cli", "run writes its outputs to a directory; add --output-dir DIR");
  if (name == "compare" && a.expects.empty()) fail("cli", "compare needs the expected outputs; add --expect E.npy for each output");
  return a;
}

// ------------------------------------------------------------------------------------------
// dtypes

std::optional<NpyType> npy_type_of(ur::DType d) {
  switch (d) {
    case ur::DType::f32: return NpyType::f32;
    case ur::DType::f64: return NpyType::f64;
    case ur::DType::f16: return NpyType::f16;
    case ur::DType::i64: return NpyType::i64;
    case ur::DType::i32: return NpyType::i32;
    case ur::DType::i16: return NpyType::i16;
    case ur::DType::i8: return NpyType::i8;
    case ur::DType::u8: return NpyType::u8;
    case ur::DType::boolean: return NpyType::boolean;
    case ur::DType::bf16: return std::nullopt;  // numpy has no bfloat16
  }
  return std::nullopt;
}

bool is_float(ur::DType d) {
  return d == ur::DType::f32 || d == ur::DType::f64 || d == ur::DType::f16 || d == ur::DType::bf16;
}

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, f;
  if (exp == 0) {
    if (man == 0) {
      f = sign;
    } else {  // subnormal: normalise
      exp = 113;
      while (!(man & 0x400)) {
        man <<= 1;
        --exp;
      }
      f = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    f = sign | 0x7f800000 | (man << 13);
  } else {
    f = sign | ((exp + 112) << 23) | (man << 13);
  }
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

uint16_t float_to_half(float x) {  // round to nearest even
  uint32_t f;
  std::memcpy(&f, &x, 4);
  uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000);
  int32_t e = static_cast<int32_t>((f >> 23) & 0xff);
  uint32_t man = f & 0x7fffff;
  if (e == 0xff) return sign | 0x7c00 | (man ? 0x200 : 0);
  int32_t exp = e - 127 + 15;
  if (exp >= 31) return sign | 0x7c00;
  if (exp <= 0) {
    if (exp < -10) return sign;
    man |= 0x800000;
    int shift = 14 - exp;
    uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (man >> 13), rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

double element(const void* data, ur::DType d, int64_t i) {
  auto at = [&](auto* p) { return static_cast<double>(p[i]); };
  switch (d) {
    case ur::DType::f32: return at(static_cast<const float*>(data));
    case ur::DType::f64: return at(static_cast<const double*>(data));
    case ur::DType::f16: return half_to_float(static_cast<const uint16_t*>(data)[i]);
    case ur::DType::bf16: {
      uint32_t f = static_cast<uint32_t>(static_cast<const uint16_t*>(data)[i]) << 16;
      float out;
      std::memcpy(&out, &f, 4);
      return out;
    }
    case ur::DType::i64: return at(static_cast<const int64_t*>(data));
    case ur::DType::i32: return at(static_cast<const int32_t*>(data));
    case ur::DType::i16: return at(static_cast<const int16_t*>(data));
    case ur::DType::i8: return at(static_cast<const int8_t*>(data));
    case ur::DType::u8: return at(static_cast<const uint8_t*>(data));
    case ur::DType::boolean: return static_cast<const uint8_t*>(data)[i] != 0;
  }
  return 0;
}

std::string type_str(ur::DType d, const std::vector<int64_t>& shape) { return ur::dtype_name(d) + shape_str(shape); }

std::string dims_str(const ur::IOInfo& io) {
  if (io.is_size) return "size (binds " + (io.dims.empty() ? std::string("?") : io.dims[0]) + ")";
  std::string s = std::string(ur::dtype_name(io.dtype)) + "[";
  for (size_t k = 0; k < io.dims.size(); ++k) {
    if (k) s += ", ";
    s += io.dims[k];
  }
  return s + "]";
}

// The width of the name column: the longest input or output name.
int name_width(const ur::Model& m) {
  size_t w = 8;
  for (const auto& io : m.inputs()) w = std::max(w, io.name.size());
  for (const auto& io : m.outputs()) w = std::max(w, io.name.size());
  return static_cast<int>(std::min<size_t>(w, 60));
}

std::string bytes_str(size_t b) {
  char buf[64];
  if (b < 1024) std::snprintf(buf, sizeof buf, "%zu B", b);
  else if (b < (size_t{1} << 20)) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else if (b < (size_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
  else std::snprintf(buf, sizeof buf, "%.2f GiB", b / 1073741824.0);
  return buf;
}

// ------------------------------------------------------------------------------------------
// Shapes: a dim's text ("128", "s0", "(s0+1)", "max(s0,1)") evaluated with bound symbols.

class DimEval {
 public:
  DimEval(const std::string& s, const std::map<std::string, int64_t>& syms) : s_(s), syms_(syms) {}
  // The value, or nullopt when a symbol is unbound or the text is not an expression it knows.
  std::optional<int64_t> eval() {
    auto v = expr();
    skip();
    if (!v || i_ != s_.size()) return std::nullopt;
    return v;
  }

 private:
  void skip() {
    while (i_ < s_.size() && s_[i_] == ' ') ++i_;
  }
  bool eat(const char* t) {
    skip();
    size_t n = std::strlen(t);
    if (s_.compare(i_, n, t) != 0) return false;
    i_ += n;
    return true;
  }
  std::optional<int64_t> expr() {
    auto a = term();
    while (a) {
      if (eat("+")) {
        auto b = term();
        if (!b || __builtin_add_overflow(*a, *b, &*a)) return std::nullopt;
      } else if (eat("-")) {
        auto b = term();
        if (!b || __builtin_sub_overflow(*a, *b, &*a)) return std::nullopt;
      } else {
        break;
      }
    }
    return a;
  }
  std::optional<int64_t> term() {
    auto a = factor();
    while (a) {
      if (eat("*")) {
        auto b = factor();
        if (!b || __builtin_mul_overflow(*a, *b, &*a)) return std::nullopt;
      } else if (eat("//") || eat("/")) {
        auto b = factor();
        if (!b || *b == 0) return std::nullopt;
        int64_t q = *a / *b;
        if ((*a % *b != 0) && ((*a < 0) != (*b < 0))) --q;  // floor, as the engine's FloorDiv
        a = q;
      } else if (eat("%")) {
        auto b = factor();
        if (!b || *b == 0) return std::nullopt;
        int64_t r = *a % *b;
        if (r != 0 && ((r < 0) != (*b < 0))) r += *b;
        a = r;
      } else {
        break;
      }
    }
    return a;
  }
  std::optional<int64_t> factor() {
    skip();
    if (eat("(")) {
      auto v = expr();
      if (!eat(")")) return std::nullopt;
      return v;
    }
    if (eat("-")) {
      auto v = factor();
      if (!v) return std::nullopt;
      return -*v;
    }
    if (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
      int64_t v = 0;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])))
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s_[i_++] - '0', &v)) return std::nullopt;
      return v;
    }
    size_t st = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) ++i_;
    std::string id = s_.substr(st, i_ - st);
    if (id.empty()) return std::nullopt;
    if ((id == "max" || id == "min" || id == "Max" || id == "Min") && eat("(")) {
      auto a = expr();
      if (!eat(",")) return std::nullopt;
      auto b = expr();
      if (!eat(")") || !a || !b) return std::nullopt;
      return (id == "max" || id == "Max") ? std::max(*a, *b) : std::min(*a, *b);
    }
    auto it = syms_.find(id);
    if (it == syms_.end()) return std::nullopt;
    return it->second;
  }

  const std::string& s_;
  const std::map<std::string, int64_t>& syms_;
  size_t i_ = 0;
};

bool is_symbol(const std::string& d) {
  if (d.empty() || !(std::isalpha(static_cast<unsigned char>(d[0])) || d[0] == '_')) return false;
  for (char c : d)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

std::string input_names(const ur::Model& m) {
  std::string s;
  for (const auto& in : m.inputs()) s += (s.empty() ? "" : ", ") + in.name;
  return s.empty() ? "(none)" : s;
}

std::vector<int64_t> parse_dims(const std::string& spec, const std::string& text) {
  std::vector<int64_t> dims;
  if (text.empty()) return dims;  // a 0-d shape
  size_t st = 0;
  while (true) {
    size_t c = text.find_first_of(",x", st);
    std::string d = text.substr(st, c == std::string::npos ? std::string::npos : c - st);
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(d.c_str(), &end, 10);
    if (d.empty() || *end != '\0' || errno == ERANGE || v < 0)
      fail("cli", "--shape " + spec + ": '" + d + "' is not a size; write NAME=D0,D1,... with whole numbers >= 0");
    dims.push_back(v);
    if (c == std::string::npos) break;
    st = c + 1;
  }
  return dims;
}

// One concrete shape per model input (a size input as {value}): from --shape NAME=DIMS, the
// static dims, and symbols bound by other inputs' shapes. `fallback`, when given, binds the
// symbols nothing else binds (info's smallest/largest shapes); otherwise an unbound symbol is an
// error that says which --shape to give.
std::vector<std::vector<int64_t>> resolve_shapes(const ur::Model& m, const std::vector<std::string>& specs,
                                                 const std::map<std::string, std::vector<int64_t>>& given_arrays,
                                                 const std::map<std::string, int64_t>* fallback) {
  std::map<std::string, std::vector<int64_t>> given = given_arrays;
  for (const auto& spec : specs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos)
      fail("cli", "--shape '" + spec + "' has no '='; write NAME=D0,D1,... (inputs: " + input_names(m) + ")");
    std::string name = spec.substr(0, eq);
    bool known = false;
    for (const auto& in : m.inputs()) known |= in.name == name;
    if (!known) fail("cli", "--shape " + spec + ": the model has no input '" + name + "'; its inputs: " + input_names(m));
    given[name] = parse_dims(spec, spec.substr(eq + 1));
  }
  std::map<std::string, int64_t> syms;
  auto bind = [&](const std::string& sym, int64_t v, const std::string& who) {
    auto [it, fresh] = syms.emplace(sym, v);
    if (!fresh && it->second != v)
      fail("cli", who + " binds " + sym + " = " + std::to_string(v) + " but another input binds it to " +
                      std::to_string(it->second) + "; give shapes that agree");
  };
  for (const auto& in : m.inputs()) {
    auto g = given.find(in.name);
    if (g == given.end()) continue;
    if (in.is_size) {
      if (g->second.size() != 1)
        fail("cli", "input " + in.name + " is a size (one value); write --shape " + in.name + "=N");
      if (!in.dims.empty() && is_symbol(in.dims[0])) bind(in.dims[0], g->second[0], "input " + in.name);
      continue;
    }
    if (g->second.size() != in.dims.size())
      fail("cli", "input " + in.name + " has " + std::to_string(in.dims.size()) + " dims (" + dims_str(in) + "), " +
                      shape_str(g->second) + " has " + std::to_string(g->second.size()) + "; give a shape of rank " +
                      std::to_string(in.dims.size()));
    for (size_t k = 0; k < in.dims.size(); ++k)
      if (is_symbol(in.dims[k])) bind(in.dims[k], g->second[k], "input " + in.name);
  }
  if (fallback)
    for (const auto& [s, v] : *fallback) syms.emplace(s, v);
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& in : m.inputs()) {
    auto g = given.find(in.name);
    if (g != given.end()) {
      shapes.push_back(g->second);
      continue;
    }
    std::vector<int64_t> shape;
    for (const auto& d : in.dims) {
      auto v = DimEval(d, syms).eval();
      if (!v)
        fail("cli", "input " + in.name + " is " + dims_str(in) + " and '" + d + "' is not bound; give --shape " + in.name +
                        "=" + std::string(in.is_size ? "N" : "D0,D1,..."));
      shape.push_back(*v);
    }
    shapes.push_back(in.is_size ? std::vector<int64_t>{shape.empty() ? 0 : shape[0]} : shape);
  }
  return shapes;
}

// ------------------------------------------------------------------------------------------
// Inputs and outputs

// Matches --input/--expect arguments ([NAME=]PATH) to names: NAME= picks by name (only when
// NAME is one of `names`, so a path with '=' still works); the rest fill the others in order.
std::vector<std::string> match_paths(const std::vector<std::string>& args, const std::vector<std::string>& names,
                                     const char* opt, const char* what) {
  std::vector<std::string> paths(names.size());
  std::vector<std::string> positional;
  for (const auto& a : args) {
    size_t eq = a.find('=');
    auto it = eq == std::string::npos ? names.end() : std::find(names.begin(), names.end(), a.substr(0, eq));
    if (it == names.end()) {
      positional.push_back(a);
      continue;
    }
    size_t k = static_cast<size_t>(it - names.begin());
    if (!paths[k].empty()) fail("cli", std::string(opt) + " given twice for " + what + " " + names[k] + "; give it once");
    paths[k] = a.substr(eq + 1);
  }
  size_t p = 0;
  for (size_t k = 0; k < names.size() && p < positional.size(); ++k)
    if (paths[k].empty()) paths[k] = positional[p++];
  if (p < positional.size()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    fail("cli", std::to_string(args.size()) + " " + opt + " files for " + std::to_string(names.size()) + " " + what +
                    "s (" + (list.empty() ? "none" : list) + "); give one per " + what);
  }
  for (size_t k = 0; k < names.size(); ++k)
    if (paths[k].empty())
      fail("cli", "no " + std::string(opt) + " for " + what + " " + names[k] + "; add " + opt + " " + names[k] + "=PATH.npy");
  return paths;
}

struct Bound {
  std::vector<NpyArray> arrays;             // one per model input
  std::vector<int64_t> size_values;         // storage for size inputs' values
  std::vector<std::vector<int64_t>> shapes; // as the API wants them (a size input as {value})
  std::vector<ur::TensorRef> refs;
};

void check_input_array(const ur::IOInfo& in, const NpyArray& a, const std::string& path) {
  if (in.is_size) {
    if (a.numel() != 1 || (a.type() != NpyType::i64 && a.type() != NpyType::i32))
      fail("cli", "input " + in.name + " is a size (one integer), " + path + " holds " + npy_type_name(a.type()) +
                      shape_str(a.shape()) + "; save it as np.array(N, dtype=np.int64)");
    return;
  }
  auto want = npy_type_of(in.dtype);
  if (!want)
    fail("cli", "input " + in.name + " is " + ur::dtype_name(in.dtype) + ", which .npy files cannot hold; feed it through the C++ API (include/updraft/runtime.h) instead");
  if (a.type() != *want)
    fail("cli", "input " + in.name + " is " + dims_str(in) + ", " + path + " holds " + npy_type_name(a.type()) +
                    shape_str(a.shape()) + "; save it with arr.astype(np." + updraft_run::npy_type_numpy(*want) + ")");
  if (a.shape().size() != in.dims.size())
    fail("cli", "input " + in.name + " is " + dims_str(in) + ", " + path + " has shape " + shape_str(a.shape()) +
                    "; give an array of rank " + std::to_string(in.dims.size()));
  for (size_t k = 0; k < in.shape.size(); ++k)
    if (in.shape[k] >= 0 && a.shape()[k] != in.shape[k])
      fail("cli", "input " + in.name + " is " + dims_str(in) + ", " + path + " has shape " + shape_str(a.shape()) +
                      " (dim " + std::to_string(k) + " must be " + std::to_string(in.shape[k]) + "); give an array of that shape");
}

int64_t size_value(const NpyArray& a) {
  return a.type() == NpyType::i64 ? *static_cast<const int64_t*>(a.data()) : *static_cast<const int32_t*>(a.data());
}

void make_refs(const ur::Model& m, Bound& b) {
  b.size_values.resize(m.inputs().size());
  b.refs.clear();
  for (size_t k = 0; k < m.inputs().size(); ++k) {
    const auto& in = m.inputs()[k];
    if (in.is_size) {
      b.size_values[k] = b.shapes[k].at(0);
      b.refs.push_back(ur::TensorRef::of(&b.size_values[k], ur::DType::i64, {}));
    } else {
      b.refs.push_back(ur::TensorRef::of(b.arrays[k].data(), in.dtype, b.shapes[k]));
    }
  }
}

Bound load_inputs(const ur::Model& m, const std::vector<std::string>& args) {
  std::vector<std::string> names;
  for (const auto& in : m.inputs()) names.push_back(in.name);
  auto paths = match_paths(args, names, "--input", "input");
  Bound b;
  for (size_t k = 0; k < names.size(); ++k) {
    NpyArray a = updraft_run::read_npy(paths[k]);
    check_input_array(m.inputs()[k], a, paths[k]);
    b.shapes.push_back(m.inputs()[k].is_size ? std::vector<int64_t>{size_value(a)} : a.shape());
    b.arrays.push_back(std::move(a));
  }
  make_refs(m, b);
  return b;
}

struct Outputs {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<NpyArray> arrays;  // bf16 outputs in an i16-typed array of the same bytes
  std::vector<ur::TensorRef> refs;
};

// The output shapes for these input shapes; the runtime checks them against the signature.
std::vector<std::vector<int64_t>> output_shapes(ur::Model& m, const std::vector<std::vector<int64_t>>& in_shapes) {
  try {
    return m.output_shapes(in_shapes);
  } catch (const ur::Error& e) {  // the shapes do not fit the signature
    std::string msg = e.what();
    if (msg.find(';') != std::string::npos) throw;
    throw ur::Error(msg + "; give inputs of the shapes and ranges `updraft-run info` lists");
  }
}

Outputs make_outputs(ur::Model& m, const std::vector<std::vector<int64_t>>& in_shapes) {
  Outputs o;
  o.shapes = output_shapes(m, in_shapes);
  if (o.shapes.size() != m.outputs().size())
    fail("runtime", "output_shapes gave " + std::to_string(o.shapes.size()) + " shapes for " +
                        std::to_string(m.outputs().size()) + " outputs; report this as a bug");
  for (size_t k = 0; k < o.shapes.size(); ++k) {
    ur::DType d = m.outputs()[k].dtype;
    auto t = npy_type_of(d);
    o.arrays.emplace_back(t ? *t : NpyType::i16, o.shapes[k]);
    o.refs.push_back(ur::TensorRef::of(o.arrays.back().data(), d, o.shapes[k]));
  }
  return o;
}

// Output names come from the file, which is input from outside: only [A-Za-z0-9_.-], no leading
// dot, so DIR/<name>.npy stays inside DIR.
std::string file_name_for(const std::string& name) {
  std::string s = name.empty() ? "output" : name;
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) c = '_';
  if (s[0] == '.') s[0] = '_';
  return s + ".npy";
}

void write_outputs(const ur::Model& m, const Outputs& o, const std::string& dir, bool quiet) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    fail("cli", "--output-dir " + dir + ": cannot create it (" + (ec ? ec.message() : "not a directory") +
                    "); give a writable directory");
  for (size_t k = 0; k < o.arrays.size(); ++k) {
    const auto& out = m.outputs()[k];
    std::string path = (std::filesystem::path(dir) / file_name_for(out.name)).string();
    if (out.dtype == ur::DType::bf16) {  // widened exactly to f32: numpy has no bfloat16
      NpyArray f(NpyType::f32, o.shapes[k]);
      for (int64_t i = 0; i < f.numel(); ++i)
        static_cast<float*>(f.data())[i] = static_cast<float>(element(o.arrays[k].data(), ur::DType::bf16, i));
      updraft_run::write_npy(path, NpyType::f32, o.shapes[k], f.data());
      if (!quiet) std::printf("  %-*s bf16%s -> %s (as float32: numpy has no bfloat16)\n", name_width(m), out.name.c_str(),
                              shape_str(o.shapes[k]).c_str(), path.c_str());
      continue;
    }
    updraft_run::write_npy(path, o.arrays[k].type(), o.shapes[k], o.arrays[k].data());
    if (!quiet) std::printf("  %-*s %-20s -> %s\n", name_width(m), out.name.c_str(), type_str(out.dtype, o.shapes[k]).c_str(), path.c_str());
  }
}

ur::Model load_model(const Args& a) {
  struct stat st;
  if (::stat(a.file.c_str(), &st) != 0)
    fail("cli", a.file + ": " + std::strerror(errno) + "; give the path of a model file (updraft.export writes one)");
  if (S_ISDIR(st.st_mode)) fail("cli", a.file + " is a directory; give the path of a model file");
  ur::LoadOptions opts;
  opts.num_threads = a.threads;
  opts.map = !a.no_map;
  try {
    return ur::Model::load(a.file, opts);
  } catch (const ur::Error& e) {
    // Every load failure is a file this runtime cannot use; where the library's message gives
    // no fix, the one that always applies is a good copy of the file.
    std::string m = e.what();
    if (m.find(';') != std::string::npos) throw;
    throw ur::Error(m + "; " + a.file + " cannot be used: copy it again or export it again (updraft.export)");
  }
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// ------------------------------------------------------------------------------------------
// info

std::string range_str(const ur::SymbolRange& r) {
  return r.symbol + " in [" + std::to_string(r.min) + ", " + (r.max == INT64_MAX ? "inf" : std::to_string(r.max)) + "]";
}

std::string shapes_str(const ur::Model& m, const std::vector<std::vector<int64_t>>& shapes) {
  std::string s;
  for (size_t k = 0; k < shapes.size(); ++k) {
    if (k) s += ' ';
    s += m.inputs()[k].name + "=";
    for (size_t j = 0; j < shapes[k].size(); ++j) {
      if (j) s += ',';
      s += std::to_string(shapes[k][j]);
    }
  }
  return s;
}

void print_arena(ur::Model& m, const char* label, const std::vector<std::vector<int64_t>>& shapes) {
  try {
    size_t b = m.arena_bytes(shapes);
    std::printf("  %-9s %-28s %s (%zu bytes)\n", label, shapes_str(m, shapes).c_str(), bytes_str(b).c_str(), b);
  } catch (const ur::Error& e) {
    std::printf("  %-9s %-28s not plannable: %s\n", label, shapes_str(m, shapes).c_str(), e.what());
  }
}

int cmd_info(const Args& a) {
  ur::Model m = load_model(a);
  const int w = name_width(m);
  const ur::ModelStats& st = m.stats();
  std::printf("file       %s\n", a.file.c_str());
  std::printf("size       %s (%zu bytes); constants %s (%zu bytes), %s\n", bytes_str(st.file_bytes).c_str(), st.file_bytes,
              bytes_str(st.constant_bytes).c_str(), st.constant_bytes,
              st.mapped ? "mapped in place" : "read into memory");
  std::printf("engine     %s (this runtime: %s)\n", st.engine_version.c_str(), ur::version());
  std::printf("requires   %s (this CPU has them: the file loaded)\n", st.required_cpu.empty() ? "(nothing)" : st.required_cpu.c_str());
  if (!st.note.empty()) std::printf("note       %s\n", st.note.c_str());
  std::printf("load       %.2f ms\n", st.load_ms);
  if (!st.ops.empty()) {  // most used first; ties in the graph's order
    auto ops = st.ops;
    std::stable_sort(ops.begin(), ops.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
    int total = 0;
    for (const auto& [op, n] : ops) total += n;
    std::string head = "ops        " + std::to_string(total) + " nodes, " + std::to_string(ops.size()) +
                       (ops.size() == 1 ? " kind:" : " kinds:");
    std::printf("%s", head.c_str());
    size_t col = head.size();
    for (const auto& [op, n] : ops) {
      std::string item = op + " " + std::to_string(n);
      if (col + item.size() + 2 > 100) {
        std::printf("\n          ");
        col = 10;
      }
      std::printf(" %s", item.c_str());
      col += item.size() + 1;
    }
    std::printf("\n");
  }
  std::printf("inputs:\n");
  for (const auto& in : m.inputs()) std::printf("  %-*s %s\n", w, in.name.c_str(), dims_str(in).c_str());
  std::printf("outputs:\n");
  for (const auto& out : m.outputs()) std::printf("  %-*s %s\n", w, out.name.c_str(), dims_str(out).c_str());
  if (!m.ranges().empty()) {
    std::printf("symbols:\n");
    for (const auto& r : m.ranges()) std::printf("  %s\n", range_str(r).c_str());
  }
  // Per-thread scratch is part of the arena, so it is given for this --threads.
  std::printf("arena (working memory of one run on %s):\n",
              a.threads ? (std::to_string(a.threads) + (a.threads == 1 ? " thread" : " threads")).c_str() : "all cores");
  if (!a.shapes.empty() || m.ranges().empty()) {
    print_arena(m, a.shapes.empty() ? "static" : "given", resolve_shapes(m, a.shapes, {}, nullptr));
    return 0;
  }
  std::map<std::string, int64_t> lo, hi;
  bool bounded = true;
  for (const auto& r : m.ranges()) {
    lo[r.symbol] = r.min;
    hi[r.symbol] = r.max;
    bounded &= r.max != INT64_MAX;
  }
  print_arena(m, "smallest", resolve_shapes(m, {}, {}, &lo));
  if (bounded) print_arena(m, "largest", resolve_shapes(m, {}, {}, &hi));
  else std::printf("  (a symbol has no upper bound: give --shape for the arena at a larger shape)\n");
  return 0;
}

// ------------------------------------------------------------------------------------------
// run

int cmd_run(const Args& a) {
  ur::Model m = load_model(a);
  Bound in = load_inputs(m, a.inputs);
  Outputs out = make_outputs(m, in.shapes);
  auto t0 = std::chrono::steady_clock::now();
  m.run(in.refs, out.refs);
  double ms = ms_since(t0);
  // A first run: it includes one-time work (packing weights for the kernels); bench measures the rest.
  std::printf("ran %s in %.3f ms (a first run; load %.2f ms)\n", a.file.c_str(), ms, m.stats().load_ms);
  write_outputs(m, out, a.output_dir, false);
  return 0;
}

// ------------------------------------------------------------------------------------------
// bench

double percentile(const std::vector<double>& sorted, double p) {  // nearest rank
  if (sorted.empty()) return 0;
  size_t r = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, r == 0 ? 0 : r - 1)];
}

void fill_random(NpyArray& arr, ur::DType d, bool zeros, std::mt19937_64& rng) {
  if (zeros || !is_float(d)) return;  // integers and bools stay 0 (indices: valid for every table)
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < arr.numel(); ++i) {
    float v = u(rng);
    switch (d) {
      case ur::DType::f32: static_cast<float*>(arr.data())[i] = v; break;
      case ur::DType::f64: static_cast<double*>(arr.data())[i] = v; break;
      case ur::DType::f16: static_cast<uint16_t*>(arr.data())[i] = float_to_half(v); break;
      case ur::DType::bf16: {
        uint32_t f;
        std::memcpy(&f, &v, 4);
        static_cast<uint16_t*>(arr.data())[i] = static_cast<uint16_t>(f >> 16);
        break;
      }
      default: break;
    }
  }
}

double peak_rss_mib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux: KiB
}

int cmd_bench(const Args& a) {
  ur::Model m = load_model(a);
  // Inputs: --input arrays where given, generated data of the resolved shapes for the rest.
  std::map<std::string, std::vector<int64_t>> from_files;
  std::map<std::string, NpyArray> file_arrays;
  std::vector<std::string> names;
  for (const auto& in : m.inputs()) names.push_back(in.name);
  if (!a.inputs.empty()) {
    // Some inputs by NAME=PATH (generated data for the rest), or one file per input as `run` takes them.
    bool all_named = true;
    for (const auto& arg : a.inputs) {
      size_t eq = arg.find('=');
      all_named &= eq != std::string::npos && std::find(names.begin(), names.end(), arg.substr(0, eq)) != names.end();
    }
    std::vector<std::pair<std::string, std::string>> chosen;  // (input name, path)
    if (all_named) {
      for (const auto& arg : a.inputs) chosen.emplace_back(arg.substr(0, arg.find('=')), arg.substr(arg.find('=') + 1));
    } else {
      auto paths = match_paths(a.inputs, names, "--input", "input");
      for (size_t k = 0; k < names.size(); ++k) chosen.emplace_back(names[k], paths[k]);
    }
    for (const auto& [name, path] : chosen) {
      size_t idx = static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
      if (file_arrays.count(name)) fail("cli", "--input given twice for input " + name + "; give it once");
      NpyArray arr = updraft_run::read_npy(path);
      check_input_array(m.inputs()[idx], arr, path);
      from_files[name] = m.inputs()[idx].is_size ? std::vector<int64_t>{size_value(arr)} : arr.shape();
      file_arrays[name] = std::move(arr);
    }
  }
  Bound in;
  in.shapes = resolve_shapes(m, a.shapes, from_files, nullptr);
  output_shapes(m, in.shapes);  // checked against the signature before any input is allocated
  std::mt19937_64 rng(0);
  for (size_t k = 0; k < m.inputs().size(); ++k) {
    const auto& io = m.inputs()[k];
    auto f = file_arrays.find(io.name);
    if (f != file_arrays.end()) {
      if (!io.is_size && f->second.shape() != in.shapes[k])
        fail("cli", "input " + io.name + ": --shape " + shape_str(in.shapes[k]) + " and the --input array's " +
                        shape_str(f->second.shape()) + " differ; give one of them");
      in.arrays.push_back(std::move(f->second));
      continue;
    }
    if (io.is_size) {
      in.arrays.emplace_back(NpyType::i64, std::vector<int64_t>{});
      continue;
    }
    auto t = npy_type_of(io.dtype);
    in.arrays.emplace_back(t ? *t : NpyType::i16, in.shapes[k]);
    fill_random(in.arrays.back(), io.dtype, a.zeros, rng);
  }
  make_refs(m, in);
  Outputs out = make_outputs(m, in.shapes);
  size_t arena = m.arena_bytes(in.shapes);

  auto t_first = std::chrono::steady_clock::now();
  m.run(in.refs, out.refs);
  double first_ms = ms_since(t_first);
  for (int64_t i = 1; i < a.warmup; ++i) m.run(in.refs, out.refs);

  const bool tty = ::isatty(STDOUT_FILENO) && !a.json;
  const double budget_ms = (a.time_s ? *a.time_s : 3.0) * 1e3;
  const int64_t min_iters = 10;
  std::vector<double> lat;
  lat.reserve(a.iters ? static_cast<size_t>(std::min<int64_t>(*a.iters, 1 << 20)) : 1024);
  auto t0 = std::chrono::steady_clock::now();
  auto last_print = t0;
  size_t shown = 0;  // runs already summarised on the progress line
  while (true) {
    if (a.iters) {
      if (static_cast<int64_t>(lat.size()) >= *a.iters) break;
    } else if (static_cast<int64_t>(lat.size()) >= min_iters && ms_since(t0) >= budget_ms) {
      break;
    }
    auto t = std::chrono::steady_clock::now();
    m.run(in.refs, out.refs);
    lat.push_back(ms_since(t));
    if (tty && std::chrono::steady_clock::now() - last_print > std::chrono::milliseconds(100)) {
      // The median of the runs since the last line: sorting every run so far each time would
      // cost more than a small model's runs as their number grows.
      last_print = std::chrono::steady_clock::now();
      std::vector<double> window(lat.begin() + static_cast<std::ptrdiff_t>(shown), lat.end());
      shown = lat.size();
      std::nth_element(window.begin(), window.begin() + static_cast<std::ptrdiff_t>(window.size() / 2), window.end());
      std::string total = a.iters ? "/" + std::to_string(*a.iters) : "";
      std::printf("\r\033[K  run %zu%s  %.1f s  p50 %.3f ms (last 0.1 s)", lat.size(), total.c_str(), ms_since(t0) / 1e3,
                  window[window.size() / 2]);
      std::fflush(stdout);
    }
  }
  double total_ms = ms_since(t0);
  if (tty) std::printf("\r\033[K");
  std::vector<double> s = lat;
  std::sort(s.begin(), s.end());
  double mean = 0;
  for (double v : s) mean += v;
  mean /= static_cast<double>(s.size());
  double p50 = percentile(s, 50), p90 = percentile(s, 90), p99 = percentile(s, 99);
  double throughput = static_cast<double>(s.size()) / (total_ms / 1e3);
  double rss = peak_rss_mib();
  if (a.json) {
    std::printf("{\"file\": \"%s\", \"threads\": %d, \"shapes\": \"%s\", \"warmup\": %" PRId64 ", \"iters\": %zu, "
                "\"first_ms\": %.6f, \"p50_ms\": %.6f, \"p90_ms\": %.6f, \"p99_ms\": %.6f, \"min_ms\": %.6f, "
                "\"mean_ms\": %.6f, \"max_ms\": %.6f, \"throughput_per_s\": %.3f, \"arena_bytes\": %zu, "
                "\"peak_rss_mib\": %.1f, \"load_ms\": %.3f}\n",
                a.file.c_str(), a.threads, shapes_str(m, in.shapes).c_str(), a.warmup, s.size(), first_ms, p50, p90, p99,
                s.front(), mean, s.back(), throughput, arena, rss, m.stats().load_ms);
    return 0;
  }
  std::printf("model      %s (engine %s, load %.2f ms)\n", a.file.c_str(), m.stats().engine_version.c_str(), m.stats().load_ms);
  std::printf("threads    %s\n", a.threads ? std::to_string(a.threads).c_str() : "all cores");
  std::printf("shapes     %s%s\n", shapes_str(m, in.shapes).c_str(),
              a.inputs.empty() ? (a.zeros ? " (zeros)" : " (random floats, zero integers)") : "");
  std::printf("arena      %s\n", bytes_str(arena).c_str());
  std::printf("warm-up    %" PRId64 " runs (first %.3f ms)\n", std::max<int64_t>(a.warmup, 1), first_ms);
  std::printf("runs       %zu in %.2f s\n", s.size(), total_ms / 1e3);
  std::printf("latency    p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  (min %.3f, mean %.3f, max %.3f)\n", p50, p90, p99,
              s.front(), mean, s.back());
  std::printf("throughput %.1f runs/s\n", throughput);
  std::printf("peak RSS   %.1f MiB\n", rss);
  return 0;
}

// ------------------------------------------------------------------------------------------
// compare

// Default tolerances per dtype (rtol, atol). A model file is compared whole, usually against
// eager PyTorch: the engine sums in another order (blocked oneDNN GEMMs and convolutions, fused
// kernels, FMA), about 1e-5 relative per op, and tens of layers grow that to ~1e-4 on values of
// order 1 (ResNet-50 from the zoo: 3.3e-4 at worst). So f32 takes 1e-3, the whole-model
// tolerance tests/python/test_models.py uses, which still catches a real lowering bug (errors of
// order 1). f64 keeps 1e-7 (updraft.debug's bisect); f16/bf16 carry ~11/8 mantissa bits, hence
// 1e-2/2e-2. Integer and bool outputs (indices, masks) must be exact.
struct Tol {
  double rtol, atol;
};
Tol default_tol(ur::DType d) {
  switch (d) {
    case ur::DType::f32: return {1e-3, 1e-3};
    case ur::DType::f64: return {1e-7, 1e-7};
    case ur::DType::f16: return {1e-2, 1e-2};
    case ur::DType::bf16: return {2e-2, 2e-2};
    default: return {0, 0};
  }
}

std::string index_str(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    if (shape[k] > 0) {
      idx[k] = flat % shape[k];
      flat /= shape[k];
    }
  }
  return shape_str(idx);
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

int cmd_compare(const Args& a) {
  ur::Model m = load_model(a);
  Bound in = load_inputs(m, a.inputs);
  Outputs out = make_outputs(m, in.shapes);
  m.run(in.refs, out.refs);
  if (!a.output_dir.empty()) write_outputs(m, out, a.output_dir, true);
  std::vector<std::string> names;
  for (const auto& o : m.outputs()) names.push_back(o.name);
  auto paths = match_paths(a.expects, names, "--expect", "output");
  bool all_ok = true;
  for (size_t k = 0; k < names.size(); ++k) {
    const auto& io = m.outputs()[k];
    NpyArray want = updraft_run::read_npy(paths[k]);
    ur::DType d = io.dtype;
    auto t = npy_type_of(d);
    NpyType want_type = t ? *t : NpyType::f32;  // bf16 is compared against the f32 that `run` writes
    if (want.type() != want_type)
      fail("compare", "output " + io.name + " is " + ur::dtype_name(d) + ", " + paths[k] + " holds " +
                          npy_type_name(want.type()) + "; save the expected output as np." +
                          updraft_run::npy_type_numpy(want_type));
    ur::DType want_d = d == ur::DType::bf16 ? ur::DType::f32 : d;
    std::printf("%s %s", io.name.c_str(), type_str(d, out.shapes[k]).c_str());
    if (want.shape() != out.shapes[k]) {
      std::printf("  MISMATCH: shape %s, expected %s\n", shape_str(out.shapes[k]).c_str(), shape_str(want.shape()).c_str());
      all_ok = false;
      continue;
    }
    Tol tol = default_tol(d);
    if (is_float(d)) {
      if (a.rtol) tol.rtol = *a.rtol;
      if (a.atol) tol.atol = *a.atol;
    }
    // The worst element: the largest error relative to what the tolerance allows there (above
    // 1: a mismatch), so a matching output shows the element closest to failing.
    constexpr double kInf = std::numeric_limits<double>::infinity();
    int64_t bad = 0, worst = -1;
    double worst_ratio = -1, max_abs = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      double g = element(out.arrays[k].data(), d, i), e = element(want.data(), want_d, i);
      double err, ratio;
      if (std::isnan(g) || std::isnan(e)) {
        err = ratio = std::isnan(g) && std::isnan(e) ? 0 : kInf;
      } else if (g == e) {  // equal infinities included
        err = ratio = 0;
      } else {
        err = std::fabs(g - e);  // inf when one side is infinite
        double allowed = tol.atol + tol.rtol * std::fabs(e);
        ratio = std::isinf(err) || std::isinf(allowed) ? kInf : allowed > 0 ? err / allowed : kInf;
      }
      if (ratio > 1) ++bad;
      max_abs = std::max(max_abs, err);
      if (ratio > worst_ratio) {
        worst_ratio = ratio;
        worst = i;
      }
    }
    bool ok = bad == 0;
    all_ok &= ok;
    std::printf("  %s", ok ? "OK" : "MISMATCH");
    if (is_float(d)) std::printf(" (rtol %g, atol %g)", tol.rtol, tol.atol);
    else std::printf(" (exact)");
    if (!ok) std::printf(": %" PRId64 " of %" PRId64 " elements differ", bad, want.numel());
    std::printf("\n");
    if (worst >= 0) {
      double g = element(out.arrays[k].data(), d, worst), e = element(want.data(), want_d, worst);
      double abs_err = std::fabs(g - e);
      if (g == e || (std::isnan(g) && std::isnan(e))) abs_err = 0;
      double rel = e != 0 ? abs_err / std::fabs(e) : (abs_err == 0 ? 0 : std::numeric_limits<double>::infinity());
      std::printf("  worst at %s: got %s, expected %s (abs error %.3g, rel error %.3g", index_str(worst, want.shape()).c_str(),
                  num(g).c_str(), num(e).c_str(), abs_err, rel);
      if (is_float(d) && std::isfinite(worst_ratio)) std::printf(", %.3g of the tolerance", worst_ratio);
      std::printf("); max abs error %.3g\n", max_abs);
    }
  }
  std::printf("%s\n", all_ok ? "match" : "MISMATCH");
  return all_ok ? 0 : 1;
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

int report(const std::string& component, const std::string& msg) {
  std::string m = one_line(msg);
  // The library's messages already start with their component ("[model] ...").
  std::fprintf(stderr, "updraft-run: %s\n", (m.rfind('[', 0) == 0 ? m : "[" + component + "] " + m).c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fputs(kMainHelp, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::string(argv[1]) == "--version") {
    std::printf("updraft-run %s\n", ur::version());
    return 0;
  }
  try {
    Args a = parse_args(argc, argv);
    std::string c = a.cmd->name;
    if (c == "info") return cmd_info(a);
    if (c == "run") return cmd_run(a);
    if (c == "bench") return cmd_bench(a);
    return cmd_compare(a);
  } catch (const CliError& e) {
    return report("cli", e.what());
  } catch (const NpyError& e) {
    return report("npy", e.what());
  } catch (const ur::Error& e) {
    return report("runtime", e.what());
  } catch (const std::bad_alloc&) {
    return report("cli", "out of memory; use smaller shapes or fewer threads");
  } catch (const std::exception& e) {
    return report("cli", std::string("unexpected error: ") + e.what() + "; report this as a bug");
  }
}
