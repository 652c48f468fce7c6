// chorus_torch._C: makes chorus backends for chorus_torch/__init__.py, which registers
// them with torch.distributed as the "chorus" backend.
#include <pybind11/chrono.h>
#include <torch/extension.h>

#include "backend_chorus.h"

namespace py = pybind11;
using chorus_torch::ChorusBackend;
using chorus_torch::ChorusOptions;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Chorus collectives as a torch.distributed backend";
  py::module_::import("torch.distributed");  // registers c10d's types (Store, Backend, Options) first

  py::class_<ChorusOptions, c10d::Backend::Options, c10::intrusive_ptr<ChorusOptions>>(m, "Options", R"(
Options of a chorus process group, for init_process_group(pg_options=...) and new_group.
timeout: how long a call may run before the group's communicators are aborted (default:
the group's timeout, which init_process_group sets).)")
      .def(py::init<std::chrono::milliseconds>(), py::arg("timeout") = kBackendDefaultTimeout);

  m.def(
      "create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int worldSize,
         const c10::intrusive_ptr<ChorusOptions>& options,
         const std::string& name) -> c10::intrusive_ptr<c10d::Backend> {
        TORCH_CHECK(worldSize >= 1, "chorus: world_size must be at least 1, got ", worldSize);
        TORCH_CHECK(rank >= 0 && rank < worldSize, "chorus: rank ", rank, " is outside 0..", worldSize - 1);
        TORCH_CHECK(options->timeout.count() > 0, "chorus: timeout must be positive, got ", options->timeout.count(),
                    " ms");
        return c10::make_intrusive<ChorusBackend>(store, rank, worldSize, options, name);
      },
      py::arg("store"), py::arg("rank"), py::arg("world_size"), py::arg("options"), py::arg("name") = "chorus",
      py::call_guard<py::gil_scoped_release>());

  m.def(
      "collective_timings",
      [](const c10::intrusive_ptr<c10d::Backend>& backend) {
        auto* chorus = dynamic_cast<ChorusBackend*>(backend.get());
        TORCH_CHECK(chorus != nullptr, "chorus: collective_timings needs a chorus backend, got ",
                    backend->getBackendName());
        py::list timings;
        for (const auto& t : chorus->timings()) {
          timings.append(py::make_tuple(t.op, t.queued, t.started, t.finished, t.ok));
        }
        return timings;
      },
      py::arg("backend"));
}
