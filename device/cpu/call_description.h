// A call as a person reads it, from its stamp (device/common/call_stamp.h):
// "AllReduce(sum, float, 1024; Ring/LL) #17", "Send(4096 bytes; Simple) #3".
// For the WARNs of a mismatch and the lines of a hang report.
#pragma once

#include <string>

#include "device/common/call_stamp.h"

namespace chorus {

std::string describeCall(const CallStamp& call);

}  // namespace chorus
