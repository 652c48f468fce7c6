// chorus_torch._C: makes chorus process groups for chorus_torch/__init__.py, which
// registers them with torch.distributed as the "chorus" backend.
#include <torch/extension.h>

#include "process_group_chorus.h"

namespace py = pybind11;
using chorus_torch::ProcessGroupChorus;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Chorus collectives as a torch.distributed backend";
  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int worldSize,
         double timeoutSeconds) -> c10::intrusive_ptr<c10d::ProcessGroup> {
        TORCH_CHECK(worldSize >= 1, "chorus: world_size must be at least 1, got ", worldSize);
        TORCH_CHECK(rank >= 0 && rank < worldSize, "chorus: rank ", rank, " is outside 0..", worldSize - 1);
        TORCH_CHECK(timeoutSeconds > 0, "chorus: timeout must be positive, got ", timeoutSeconds, " s");
        const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeoutSeconds * 1000));
        return c10::make_intrusive<ProcessGroupChorus>(store, rank, worldSize, timeout);
      },
      py::arg("store"), py::arg("rank"), py::arg("world_size"), py::arg("timeout_seconds"),
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "collective_timings",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
        auto* chorus = dynamic_cast<ProcessGroupChorus*>(group.get());
        TORCH_CHECK(chorus != nullptr, "chorus: collective_timings needs a chorus process group, got ",
                    group->getBackendName());
        py::list timings;
        for (const auto& t : chorus->timings()) {
          timings.append(py::make_tuple(t.op, t.queued, t.started, t.finished, t.ok));
        }
        return timings;
      },
      py::arg("group"));
}
