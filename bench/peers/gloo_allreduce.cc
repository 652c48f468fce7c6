// Gloo's ring AllReduce (gloo::allreduce with the RING algorithm, float sum) over its TCP
// transport on 127.0.0.1, in tools/perf's row format, for bench/run_sweep.py. mpirun only
// launches the processes: rank and size come from OMPI_COMM_WORLD_RANK/SIZE, and the ranks
// meet through a gloo::rendezvous::FileStore in a fresh directory (-s DIR or GLOO_BENCH_STORE).
//   mpirun -np 2 gloo_allreduce -s "$(mktemp -d)" -b 8 -e 64M -f 2 -n 20 -w 5
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <exception>
#include <tuple>

#include "peer_common.h"

namespace {

using ReduceFunction = void (*)(void*, const void*, const void*, size_t);

class GlooCollective final : public bench::Collective {
 public:
  GlooCollective(int rank, int nranks, const std::string& storeDir) : rank_(rank), nranks_(nranks) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(storeDir);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, nranks);
    context->connectFullMesh(store, device);
    context_ = context;
  }
  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }

  // The options (and their registered buffers) are kept while the buffers stay the same, so the
  // timed loop measures the collective, not option setup.
  void allreduce(float* send, float* recv, size_t count) override {
    if (!options_ || cached_ != std::tie(send, recv, count)) {
      options_ = std::make_unique<gloo::AllreduceOptions>(context_);
      options_->setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      if (send != recv) options_->setInput(send, count);
      options_->setOutput(recv, count);
      options_->setReduceFunction(static_cast<ReduceFunction>(&gloo::sum<float>));
      cached_ = {send, recv, count};
    }
    gloo::allreduce(*options_);
  }
  void barrier() override {
    gloo::BarrierOptions options(context_);
    gloo::barrier(options);
  }
  double maxOverRanks(double value) override { return reduce(value, &gloo::max<double>); }
  double sumOverRanks(double value) override { return reduce(value, &gloo::sum<double>); }

 private:
  double reduce(double value, ReduceFunction function) {
    gloo::AllreduceOptions options(context_);
    options.setOutput(&value, 1);
    options.setReduceFunction(function);
    options.setTag(1);  // apart from the benchmark's own operations
    gloo::allreduce(options);
    return value;
  }

  int rank_;
  int nranks_;
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<gloo::AllreduceOptions> options_;
  std::tuple<float*, float*, size_t> cached_{};
};

bool environmentInt(const char* name, int* value) {
  const char* text = std::getenv(name);
  return text != nullptr && chorus::perf::parseInt(text, 0, value);
}

}  // namespace

int main(int argc, char** argv) {
  bench::PeerOptions options;
  if (const char* store = std::getenv("GLOO_BENCH_STORE")) options.store = store;
  if (int code = bench::parsePeerOptions(argc, argv, &options, true); code != 0) return code < 0 ? 0 : code;
  int rank = 0, nranks = 0;
  if (!environmentInt("OMPI_COMM_WORLD_RANK", &rank) || !environmentInt("OMPI_COMM_WORLD_SIZE", &nranks) ||
      rank >= nranks) {
    std::fprintf(stderr, "gloo_allreduce: launch with mpirun (OMPI_COMM_WORLD_RANK/SIZE are not set)\n");
    return 1;
  }
  if (options.store.empty()) {
    std::fprintf(stderr, "gloo_allreduce: give a fresh rendezvous directory with -s DIR or GLOO_BENCH_STORE\n");
    return 1;
  }
  try {
    GlooCollective collective(rank, nranks, options.store);
    const std::string library = "Gloo " + std::to_string(GLOO_VERSION_MAJOR) + "." +
                                std::to_string(GLOO_VERSION_MINOR) + "." + std::to_string(GLOO_VERSION_PATCH) +
                                " ring, TCP 127.0.0.1";
    return bench::runAllReduceSweep(collective, options, "gloo_allreduce", library.c_str());
  } catch (const std::exception& error) {  // gloo reports failures (timeouts, I/O) as exceptions
    std::fprintf(stderr, "gloo_allreduce rank %d: %s\n", rank, error.what());
    return 1;
  }
}
