// The public API's error boundary (private to the runtime library): every failure leaves the
// library as an updraft::runtime::Error that also carries a kind, which the C API turns into
// its status codes. What it does not do: change the message (the engine's "[component] ...; do
// X" text is passed on as it is).
#pragma once
#include <new>
#include <string>

#include "core/error.h"
#include "updraft/runtime.h"

namespace updraft::runtime::detail {

// One list for the C status codes (updraft_c.h keeps the same numbers).
enum class ErrorKind : int {
  InvalidArgument = 1,  // a null pointer, a bad option, an index out of range, a strided output
  File = 2,             // the model file cannot be opened or read
  BadModel = 3,         // truncated, corrupt, newer format, needs CPU features this machine lacks
  Shape = 4,            // inputs or output buffers that do not fit the model's signature
  Runtime = 5,          // a failure while running
  OutOfMemory = 6,
  Internal = 7,         // anything else (a bug: please report it)
};

class KindedError : public Error {
 public:
  KindedError(ErrorKind kind, const std::string& what) : Error(what), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Runs `fn`, turning whatever it throws into a KindedError (`kind` for the engine's own errors).
template <typename Fn>
auto guarded(ErrorKind kind, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const KindedError&) {
    throw;
  } catch (const runtime::Error& e) {
    throw KindedError(kind, e.what());
  } catch (const updraft::Error& e) {
    throw KindedError(kind, e.what());
  } catch (const std::bad_alloc&) {
    throw KindedError(ErrorKind::OutOfMemory,
                      "[runtime] out of memory; free memory, or run smaller inputs (arena_bytes() gives one run's "
                      "working memory)");
  } catch (const std::exception& e) {
    throw KindedError(kind == ErrorKind::Runtime ? ErrorKind::Internal : kind, std::string("[runtime] ") + e.what());
  } catch (...) {
    throw KindedError(ErrorKind::Internal, "[runtime] unknown exception inside the runtime library; please report it");
  }
}

}  // namespace updraft::runtime::detail
