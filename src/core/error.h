// Errors: every failure the engine reports names the component and, where it can, the fix.
//
//   throw updraft::Error("fuse", "input 2 is bf16, expected f32");
//   // what(): "[fuse] input 2 is bf16, expected f32"
#pragma once
#include <stdexcept>
#include <string>

namespace updraft {

class Error : public std::runtime_error {
 public:
  Error(const std::string& component, const std::string& message)
      : std::runtime_error("[" + component + "] " + message), component_(component) {}
  const std::string& component() const { return component_; }

 private:
  std::string component_;
};

// Check an invariant that bad input can break; throws Error (never aborts).
#define UPDRAFT_CHECK(cond, component, msg)                      \
  do {                                                           \
    if (!(cond)) throw ::updraft::Error((component), (msg));     \
  } while (0)

}  // namespace updraft
