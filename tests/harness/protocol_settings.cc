#include "harness/protocol_settings.h"

namespace chorus_test {

const char* protoName(Proto proto) {
  switch (proto) {
    case Proto::kSimple:
      return "Simple";
    case Proto::kLL:
      return "LL";
    case Proto::kLL128:
      return "LL128";
  }
  return "?";
}

const char* algoName(Algo algo) { return algo == Algo::kRing ? "Ring" : "Tree"; }

void applyFifoSettings(ScopedEnv& env, const FifoSettings& settings) {
  for (const char* prefix : {"NCCL_", "CHORUS_P2P_"}) {
    env.set(std::string(prefix) + "BUFFSIZE", std::to_string(settings.simpleBuffBytes));
    env.set(std::string(prefix) + "LL_BUFFSIZE", std::to_string(settings.llBuffBytes));
    env.set(std::string(prefix) + "LL128_BUFFSIZE", std::to_string(settings.ll128BuffBytes));
  }
  env.set("NCCL_STEPS", std::to_string(settings.steps));
  env.set("NCCL_MIN_NCHANNELS", std::to_string(settings.channels));
  env.set("NCCL_MAX_NCHANNELS", std::to_string(settings.channels));
}

size_t slotPayloadBytes(Proto proto, const FifoSettings& settings) {
  const size_t slots = static_cast<size_t>(settings.steps);
  switch (proto) {
    case Proto::kSimple:
      return settings.simpleBuffBytes / slots / 64 * 64;
    case Proto::kLL:
      return settings.llBuffBytes / slots / 16 * 8;
    case Proto::kLL128:
      return settings.ll128BuffBytes / slots / 128 * 120;
  }
  return 0;
}

}  // namespace chorus_test
