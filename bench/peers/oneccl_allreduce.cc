// oneCCL's ccl::allreduce (float sum, host buffers) over its own libfabric transport (ATL/OFI), in
// tools/perf's row format, for bench/run_sweep.py. mpirun only launches the processes: rank and size
// come from OMPI_COMM_WORLD_RANK/SIZE, and rank 0 hands its main key-value store's address to the
// others through a file in a fresh directory (-s DIR or ONECCL_BENCH_STORE). libfabric's provider
// picks the transport: FI_PROVIDER=shm with CCL_ATL_SHM=1 (shared memory) or FI_PROVIDER=tcp.
//   FI_PROVIDER=tcp mpirun -np 2 oneccl_allreduce -s "$(mktemp -d)" -b 8 -e 64M -f 2 -n 20 -w 5
// bench/setup-oneccl.sh installs oneCCL 2021.16 from PyPI.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <oneapi/ccl.hpp>
#include <stdexcept>
#include <string>
#include <thread>

#include "peer_common.h"

namespace {

class OnecclCollective final : public bench::Collective {
 public:
  OnecclCollective(int rank, int nranks, std::shared_ptr<ccl::kvs> kvs)
      : rank_(rank), nranks_(nranks), comm_(ccl::create_communicator(nranks, rank, std::move(kvs))) {}
  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  void allreduce(float* send, float* recv, size_t count) override {
    ccl::allreduce(send, recv, count, ccl::reduction::sum, comm_).wait();
  }
  void barrier() override { ccl::barrier(comm_).wait(); }
  double maxOverRanks(double value) override { return reduce(value, ccl::reduction::max); }
  double sumOverRanks(double value) override { return reduce(value, ccl::reduction::sum); }

 private:
  double reduce(double value, ccl::reduction op) {
    double result = 0;
    ccl::allreduce(&value, &result, 1, op, comm_).wait();
    return result;
  }
  int rank_;
  int nranks_;
  ccl::communicator comm_;
};

bool environmentInt(const char* name, int* value) {
  const char* text = std::getenv(name);
  return text != nullptr && chorus::perf::parseInt(text, 0, value);
}

// Defaults the caller's environment may override. oneCCL reads them at ccl::init().
void setDefaults() {
  // mpirun here is Open MPI: no PMI for oneCCL's hydra launcher, and ATL/MPI would need Intel MPI.
  setenv("CCL_ATL_TRANSPORT", "ofi", 0);
  setenv("CCL_PROCESS_LAUNCHER", "none", 0);
  if (const char* localRank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) setenv("CCL_LOCAL_RANK", localRank, 0);
  if (const char* localSize = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) setenv("CCL_LOCAL_SIZE", localSize, 0);
  // Its worker thread polls: with more busy threads than cores every small call waits for a
  // scheduler tick (about 10 ms each on 2 cores). Without offload the caller's thread progresses.
  setenv("CCL_WORKER_OFFLOAD", "0", 0);
#ifdef ONECCL_BENCH_LIBDIR
  // Where bench/setup-oneccl.sh's impi-rt put libfabric and its providers.
  setenv("CCL_OFI_LIBRARY_PATH", ONECCL_BENCH_LIBDIR "/libfabric.so.1", 0);
  setenv("FI_PROVIDER_PATH", ONECCL_BENCH_LIBDIR, 0);
#endif
}

constexpr const char* kAddressFile = "oneccl-main-kvs";

// Rank 0 publishes the address with a rename, so a reader never sees half a file.
void publishAddress(const std::string& dir, const ccl::kvs::address_type& address) {
  const std::string path = dir + "/" + kAddressFile, partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    out.write(address.data(), static_cast<std::streamsize>(address.size()));
    if (!out) throw std::runtime_error("cannot write " + partial);
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename to " + path);
}

ccl::kvs::address_type awaitAddress(const std::string& dir) {
  const std::string path = dir + "/" + kAddressFile;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (access(path.c_str(), R_OK) != 0) {
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("no address from rank 0 in " + path);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ccl::kvs::address_type address{};
  std::ifstream in(path, std::ios::binary);
  in.read(address.data(), static_cast<std::streamsize>(address.size()));
  if (in.gcount() != static_cast<std::streamsize>(address.size())) throw std::runtime_error("short read of " + path);
  return address;
}

}  // namespace

int main(int argc, char** argv) {
  bench::PeerOptions options;
  if (const char* store = std::getenv("ONECCL_BENCH_STORE")) options.store = store;
  if (int code = bench::parsePeerOptions(argc, argv, &options, true); code != 0) return code < 0 ? 0 : code;
  int rank = 0, nranks = 0;
  if (!environmentInt("OMPI_COMM_WORLD_RANK", &rank) || !environmentInt("OMPI_COMM_WORLD_SIZE", &nranks) ||
      rank >= nranks) {
    std::fprintf(stderr, "oneccl_allreduce: launch with mpirun (OMPI_COMM_WORLD_RANK/SIZE are not set)\n");
    return 1;
  }
  if (options.store.empty()) {
    std::fprintf(stderr, "oneccl_allreduce: give a fresh rendezvous directory with -s DIR or ONECCL_BENCH_STORE\n");
    return 1;
  }
  setDefaults();
  try {
    ccl::init();
    std::shared_ptr<ccl::kvs> kvs;
    if (rank == 0) {
      kvs = ccl::create_main_kvs();
      publishAddress(options.store, kvs->get_address());
    } else {
      kvs = ccl::create_kvs(awaitAddress(options.store));
    }
    OnecclCollective collective(rank, nranks, std::move(kvs));
    const ccl::library_version version = ccl::get_library_version();
    const char* provider = std::getenv("FI_PROVIDER");
    const std::string library = "oneCCL " + std::to_string(version.major) + "." + std::to_string(version.minor) + "." +
                                std::to_string(version.update) + ", ATL " + std::getenv("CCL_ATL_TRANSPORT") +
                                ", FI_PROVIDER " + (provider ? provider : "(libfabric's choice)");
    return bench::runAllReduceSweep(collective, options, "oneccl_allreduce", library.c_str());
  } catch (const std::exception& error) {  // oneCCL reports failures as ccl::exception
    std::fprintf(stderr, "oneccl_allreduce rank %d: %s\n", rank, error.what());
    return 1;
  }
}
