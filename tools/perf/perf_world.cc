#include "perf_world.h"

#include <cstdio>
#include <cstdlib>

#ifdef CHORUS_PERF_MPI
#include <mpi.h>
#endif

namespace chorus::perf {

#ifdef CHORUS_PERF_MPI

PerfWorld::PerfWorld(int* argc, char*** argv) {
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &procRank_);
  MPI_Comm_size(MPI_COMM_WORLD, &procCount_);
}

PerfWorld::~PerfWorld() { MPI_Finalize(); }

void PerfWorld::broadcastId(ncclUniqueId* id) const { MPI_Bcast(id, sizeof(*id), MPI_BYTE, 0, MPI_COMM_WORLD); }

double PerfWorld::sum(double value) const {
  double result = 0;
  MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return result;
}

double PerfWorld::min(double value) const {
  double result = 0;
  MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  return result;
}

double PerfWorld::max(double value) const {
  double result = 0;
  MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return result;
}

int64_t PerfWorld::sum(int64_t value) const {
  long long in = value, result = 0;
  MPI_Allreduce(&in, &result, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return result;
}

void PerfWorld::barrier() const { MPI_Barrier(MPI_COMM_WORLD); }

std::vector<std::string> PerfWorld::gatherLines(const std::string& line) const {
  constexpr int kLineBytes = 1024;
  std::string padded = line.substr(0, kLineBytes - 1);
  padded.resize(kLineBytes, '\0');
  std::vector<char> all(procRank_ == 0 ? static_cast<size_t>(kLineBytes) * procCount_ : 0);
  MPI_Gather(padded.data(), kLineBytes, MPI_CHAR, all.data(), kLineBytes, MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<std::string> lines;
  for (int p = 0; procRank_ == 0 && p < procCount_; ++p) lines.emplace_back(all.data() + p * kLineBytes);
  return lines;
}

void abortRun() {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(EXIT_FAILURE);
}

#else  // one process

PerfWorld::PerfWorld(int*, char***) {}
PerfWorld::~PerfWorld() = default;
void PerfWorld::broadcastId(ncclUniqueId*) const {}
double PerfWorld::sum(double value) const { return value; }
double PerfWorld::min(double value) const { return value; }
double PerfWorld::max(double value) const { return value; }
int64_t PerfWorld::sum(int64_t value) const { return value; }
void PerfWorld::barrier() const {}
std::vector<std::string> PerfWorld::gatherLines(const std::string& line) const { return {line}; }

void abortRun() {
  std::fflush(stdout);
  std::fflush(stderr);
  // _Exit, not exit: other threads are still inside the library and static destructors would race them.
  std::_Exit(EXIT_FAILURE);
}

#endif

}  // namespace chorus::perf
