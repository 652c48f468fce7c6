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

struct TuneConstants {
  // Fixed cost of one call (enqueue, waking the channel threads, completion), independent
  // of size and rank count. [algorithm][protocol]. The tree's row is higher: it sets up two
  // trees and two passes. LL128's and Simple's exceed LL's: an extra flush and a larger
  // first step.
  double baseLatencyUs[2][3] = {
      {5.0, 6.0, 6.0},  // Tree: LL, LL128, Simple
      {4.0, 5.0, 5.0},  // Ring: LL, LL128, Simple
  };

  // One step's hand-off over one hop, relative to TuneTopology::hopLatencyUs (Simple's
  // tail/head round trip). LL and LL128 carry the flag in the data, so a receiver sees the
  // data as soon as it lands instead of after a separate tail store and its fence.
  double hopLatencyFactor[3] = {0.3, 0.5, 1.0};

  // Sustained bandwidth relative to Simple's. LL moves 8 B of data per 16 B line and, on
  // the CPU, as 8-byte polled stores: about a third of Simple's copy bandwidth. LL128 gives
  // up 8 B of every 128 B line to the flag.
  double bandwidthFactor[3] = {0.35, 120.0 / 128.0, 1.0};

  // Tree AllReduce keeps slightly less of the link bandwidth than a ring (NCCL uses 0.92):
  // interior ranks serve two children, which the ring's steady one-in-one-out never does.
  double treeBandwidthEfficiency = 0.92;

  // The unit after which a receiver in a chain or tree can forward data: a whole slot for
  // Simple (NCCL_BUFFSIZE / NCCL_STEPS; the tail is posted per slot), one line's payload for
  // LL (8 B) and LL128 (120 B), whose receivers consume line by line. Set these to what the
  // executor really forwards (e.g. the slot's payload if it forwards whole LL slots).
  double pipelineGrainBytes[3] = {8.0, 120.0, double(size_t(4) << 20) / 8};
};

}  // namespace chorus
