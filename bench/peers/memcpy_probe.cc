// Single-thread memcpy bandwidth at the sweep's sizes: the physical reference for
// bench/run_sweep.py. GB/s = bytes copied / time per copy (each byte is read once and
// written once). Small copies repeat inside each timed iteration (at least 1 MiB copied
// per iteration) so the clock's resolution does not dominate.
//   memcpy_probe -b 8 -e 64M -f 2 -n 20 -w 5
#include "peer_common.h"

namespace {

// Keeps the compiler from dropping or merging copies whose results are never read.
inline void clobber(void* p) { asm volatile("" : : "r"(p) : "memory"); }

}  // namespace

int main(int argc, char** argv) {
  bench::PeerOptions options;
  if (int code = bench::parsePeerOptions(argc, argv, &options, false); code != 0) return code < 0 ? 0 : code;
  bench::HostBuffer<char> source = bench::allocateHost<char>(options.maxBytes);
  bench::HostBuffer<char> destination = bench::allocateHost<char>(options.maxBytes);
  std::memset(source.get(), 0x5a, options.maxBytes);
  std::printf("# memcpy_probe: single-thread memcpy, %d iters, %d warmup\n", options.iters, options.warmupIters);
  std::printf("# %10s  %10s  %9s  %7s\n", "size", "copies", "time", "bw");
  std::printf("# %10s  %10s  %9s  %7s\n", "(B)", "per iter", "(us)", "(GB/s)");
  int64_t wrong = 0;
  for (size_t bytes : bench::sweepSizes(options)) {
    const size_t repeats = std::max<size_t>(1, (size_t{1} << 20) / std::max<size_t>(bytes, 1));
    auto copyAll = [&] {
      for (size_t r = 0; r < repeats; ++r) {
        std::memcpy(destination.get(), source.get(), bytes);
        clobber(destination.get());
      }
    };
    for (int i = 0; i < options.warmupIters; ++i) copyAll();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < options.iters; ++i) copyAll();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
                     (static_cast<double>(options.iters) * static_cast<double>(repeats));
    if (std::memcmp(destination.get(), source.get(), bytes) != 0) ++wrong;
    double gbps = seconds > 0 ? static_cast<double>(bytes) / 1.0e9 / seconds : 0;
    std::printf("%12zu  %10zu  %9.3f  %7.2f\n", bytes, repeats, seconds * 1e6, gbps);
    std::fflush(stdout);
  }
  if (wrong)
    std::fprintf(stderr, "memcpy_probe: %lld copies differ from their source\n", static_cast<long long>(wrong));
  return wrong ? 1 : 0;
}
