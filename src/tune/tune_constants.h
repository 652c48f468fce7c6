// The numbers behind the tuning model (tuner.h), in one place so they can be calibrated.
//
// Units: microseconds and bytes. Arrays indexed by protocol follow NCCL's numbering
// (LL 0, LL128 1, Simple 2); by algorithm, NCCL's too (Tree 0, Ring 1).
//
// Calibrating from measurements (tools/perf, one channel, one host, forced with
// NCCL_ALGO / NCCL_PROTO):
//  1. busBwGBs of TuneTopology: the busbw a large (>= 256 MiB) ring AllReduce reaches with
//     Simple, divided by the channel count.
//  2. bandwidthFactor[LL], [LL128]: the same busbw with LL and LL128, divided by Simple's.
//  3. hopLatencyUs of TuneTopology and hopLatencyFactor[]: the slope of the 8-byte ring
//     AllReduce time against its 2(n-1) steps (time at n ranks for n = 2, 4, 8), per protocol;
//     Simple's slope is hopLatencyUs, the others are factors of it.
//  4. baseLatencyUs[][]: the 8-byte time minus the hops' share, per algorithm and protocol
//     (the tree row from forced Tree runs).
//  5. treeBandwidthEfficiency: the time of a large forced-Tree AllReduce as the model
//     predicts it with efficiency 1, divided by the measured time.
//  6. pipelineGrainBytes[]: Broadcast at 8 ranks against 2 ranks at a size of a few slots;
//     the extra time over the bandwidth term, divided by (n-2), times the channel bandwidth.
#pragma once

#include <cstddef>

namespace chorus {

// Calibrated on the CPU executor (2 cores, ranks as processes over shared memory;
// BENCHMARKS.md, "Protocols"): there, Simple is the fastest protocol at every size. A
// hand-off is a cache-line transfer either way, and LL's per-line flags double the bytes
// and the work per byte instead of saving a round trip, so LL and LL128 pay more per hop
// and per byte than Simple. (On a GPU, NCCL's LL hop is a fraction of Simple's; a GPU
// executor needs its own calibration, with the same model.)
struct TuneConstants {
  // Fixed cost of one call (validation, planning, completion), independent of size and
  // rank count: about 0.15 us for an 8-byte call on one rank. [algorithm][protocol]. The
  // tree's row is higher: it runs two passes.
  double baseLatencyUs[2][3] = {
      {0.17, 0.17, 0.17},  // Tree: LL, LL128, Simple
      {0.12, 0.12, 0.12},  // Ring: LL, LL128, Simple
  };

  // One step's hand-off over one hop, relative to TuneTopology::hopLatencyUs (Simple's).
  // Measured: an 8-byte two-rank AllReduce (one hop) takes 0.22 us with Simple and 0.25 us
  // with LL or LL128.
  double hopLatencyFactor[3] = {1.3, 1.3, 1.0};

  // Sustained bandwidth relative to Simple's. LL moves 8 B of data per 16 B line as
  // polled 8-byte words: about a third of Simple's copy bandwidth. LL128 measured 0.75 to
  // 0.8 of Simple's at 32 KiB to 128 KiB (its 120-of-128-byte lines and per-line checks).
  double bandwidthFactor[3] = {0.35, 0.8, 1.0};

  // Tree AllReduce keeps slightly less of the link bandwidth than a ring (NCCL uses 0.92):
  // interior ranks serve two children, which the ring's steady one-in-one-out never does.
  double treeBandwidthEfficiency = 0.92;

  // The unit after which a receiver in a chain or tree can forward data: a whole slot for
  // Simple (NCCL_BUFFSIZE / NCCL_STEPS; the tail is posted per slot), one line's payload for
  // LL (8 B) and LL128 (120 B), whose receivers consume line by line. Set these to what the
  // executor really forwards (e.g. the slot's payload if it forwards whole LL slots).
  double pipelineGrainBytes[3] = {8.0, 120.0, double(size_t(4) << 20) / 8};
};

// A GPU communicator's figures, until the CUDA executor is calibrated on a GPU (the six
// steps above): NCCL's tuning model (src/graph/tuning.cc) in this model's terms. Per hop
// of a ring, in us, LL / LL128 / Simple: 0.47 / 1.9 / 3.4 over NVLink, 1.0 / 2.5 / 5.7
// over PCI; base latency Ring 3.6 / 10.0 / 8.4, Tree 4.4 / 4.4 / 8.4 (NCCL's Tree/Simple
// base is 0 with a 28 us hop standing for a chunk: this model's fill term does that);
// LL carries a quarter of Simple's AllReduce bandwidth, LL128 0.92 of it; a tree keeps 0.9.
// Predictions (BENCHMARKS.md labels them so), not measurements.
inline constexpr double kGpuNvlinkHopUs = 3.4;  // TuneTopology::hopLatencyUs, Simple
inline constexpr double kGpuPciHopUs = 5.7;
inline TuneConstants gpuTuneConstants(bool nvlink) {
  TuneConstants c;
  const double simpleHop = nvlink ? kGpuNvlinkHopUs : kGpuPciHopUs;
  const double hops[3] = {nvlink ? 0.47 : 1.0, nvlink ? 1.9 : 2.5, simpleHop};
  const double tree[3] = {4.4, 4.4, 8.4};
  const double ring[3] = {3.6, 10.0, 8.4};
  for (int p = 0; p < 3; ++p) {
    c.baseLatencyUs[0][p] = tree[p];
    c.baseLatencyUs[1][p] = ring[p];
    c.hopLatencyFactor[p] = hops[p] / simpleHop;
  }
  c.bandwidthFactor[0] = 0.25;
  c.bandwidthFactor[1] = 0.92;
  c.bandwidthFactor[2] = 1.0;
  c.treeBandwidthEfficiency = 0.9;
  return c;
}

// Across hosts, NCCL's network hop for a ring (hwLat[NET]): LL 2.7, LL128 4.0, Simple 14 us;
// the hops within a host keep the figures above (TuneTopology::localHopLatencyUs, with the
// network's protocol factors: the model has one factor per protocol).
inline constexpr double kGpuNetHopUs = 14.0;
inline TuneConstants gpuNetTuneConstants(bool nvlink) {
  TuneConstants c = gpuTuneConstants(nvlink);
  const double hops[3] = {2.7, 4.0, kGpuNetHopUs};
  for (int p = 0; p < 3; ++p) c.hopLatencyFactor[p] = hops[p] / kGpuNetHopUs;
  return c;
}

}  // namespace chorus
