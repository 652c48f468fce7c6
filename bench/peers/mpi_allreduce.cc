// Open MPI's MPI_Allreduce (float sum) in tools/perf's row format, for bench/run_sweep.py.
// The transport is chosen on the mpirun line (default shared memory, or --mca btl self,tcp).
//   mpirun -np 2 mpi_allreduce -b 8 -e 64M -f 2 -n 20 -w 5
#include <mpi.h>

#include "peer_common.h"

namespace {

class MpiCollective final : public bench::Collective {
 public:
  MpiCollective() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks_);
  }
  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  void allreduce(float* send, float* recv, size_t count) override {
    MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
  double maxOverRanks(double value) override { return reduce(value, MPI_MAX); }
  double sumOverRanks(double value) override { return reduce(value, MPI_SUM); }

 private:
  static double reduce(double value, MPI_Op op) {
    double result = 0;
    MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
    return result;
  }
  int rank_ = 0;
  int nranks_ = 1;
};

// MPI_Init/MPI_Finalize around everything else, even on early exits.
struct MpiSession {
  MpiSession(int* argc, char*** argv) { MPI_Init(argc, argv); }
  ~MpiSession() { MPI_Finalize(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

}  // namespace

int main(int argc, char** argv) {
  MpiSession session(&argc, &argv);
  bench::PeerOptions options;
  if (int code = bench::parsePeerOptions(argc, argv, &options, false); code != 0) return code < 0 ? 0 : code;
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(version, &length);
  std::string library(version, static_cast<size_t>(length));
  library = library.substr(0, library.find_first_of(",\n"));
  if (options.maxBytes / sizeof(float) > static_cast<size_t>(INT32_MAX)) {
    std::fprintf(stderr, "mpi_allreduce: -e %zu exceeds MPI's int element count\n", options.maxBytes);
    return 1;
  }
  MpiCollective collective;
  // The wrong-element total is summed over ranks, so every rank returns the same status.
  return bench::runAllReduceSweep(collective, options, "mpi_allreduce", library.c_str());
}
