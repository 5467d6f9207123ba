// updraft._C's debugging surface (python/updraft/debug/): every node output of a compiled graph
// for one call (runtime/debug_outputs.h).
#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include "runtime/debug_outputs.h"

namespace nb = nanobind;

namespace updraft::py {

void bind_debug(nb::module_& m) {
  m.def(
      "debug_outputs",
      [](const std::shared_ptr<Executable>& cg) {
        DebugOutputs d = debug_outputs(*cg);
        nb::list captured;
        for (const CapturedOutput& c : d.captured) {
          nb::dict e;
          e["node"] = c.node;
          e["output"] = c.output;
          e["value"] = c.value;
          e["block"] = c.block;
          captured.append(e);
        }
        return nb::make_tuple(d.exe, d.num_outputs, captured);
      },
      nb::arg("executable"),
      "(Executable, num_outputs, captured): an Executable over a copy of `executable`'s optimised graph "
      "whose outputs are its own outputs (num_outputs), then every node output in node order, run by the "
      "same planner and kernels; captured[i] = {node (position in node order), output, value (id), "
      "block (the channel block the engine keeps it in; captured as plain NCHW)} describes output "
      "num_outputs + i.");
}

}  // namespace updraft::py
