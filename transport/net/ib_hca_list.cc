#include "transport/net/ib_hca_list.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "core/debug.h"

namespace chorus {

namespace {

constexpr long kMaxPort = 255;  // port numbers are uint8_t in verbs, and start at 1

// "name" or "name:port"; false (with a WARN) when malformed.
bool parseEntry(const std::string& text, const std::string& setting, HcaFilter::Entry* out) {
  size_t colon = text.find(':');
  out->name = text.substr(0, colon);
  out->port = -1;
  if (out->name.empty()) {
    WARN("NET/IB : NCCL_IB_HCA=%s: entry '%s' has no device name; ignoring it", setting.c_str(), text.c_str());
    return false;
  }
  if (colon == std::string::npos) return true;
  std::string port = text.substr(colon + 1);
  char* end = nullptr;
  errno = 0;
  // Digits only: strtol alone would also take "+1" and " 1".
  bool digits = !port.empty() && isdigit(static_cast<unsigned char>(port[0]));
  long value = digits ? strtol(port.c_str(), &end, 10) : 0;
  if (!digits || errno != 0 || *end != '\0' || value < 1 || value > kMaxPort) {
    WARN("NET/IB : NCCL_IB_HCA=%s: entry '%s' has port '%s', not a number in [1, %ld]; ignoring it", setting.c_str(),
         text.c_str(), port.c_str(), kMaxPort);
    return false;
  }
  out->port = static_cast<int>(value);
  return true;
}

bool nameMatches(const HcaFilter& filter, const std::string& entry, const std::string& devName) {
  return filter.exact ? devName == entry : devName.compare(0, entry.size(), entry) == 0;
}

}  // namespace

HcaFilter parseHcaFilter(const std::string& text) {
  HcaFilter filter;
  size_t pos = 0;
  if (pos < text.size() && text[pos] == '^') {
    filter.exclude = true;
    ++pos;
  }
  if (pos < text.size() && text[pos] == '=') {
    filter.exact = true;
    ++pos;
  }
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() : comma + 1;
    if (item.empty()) continue;  // "a,,b" or a trailing comma
    HcaFilter::Entry entry;
    if (parseEntry(item, text, &entry)) filter.entries.push_back(std::move(entry));
  }
  return filter;
}

bool hcaSelected(const HcaFilter& filter, const std::string& devName, int port) {
  if (filter.entries.empty()) return true;
  bool listed = false;
  for (const HcaFilter::Entry& entry : filter.entries) {
    if (nameMatches(filter, entry.name, devName) && (entry.port == -1 || entry.port == port)) {
      listed = true;
      break;
    }
  }
  return listed != filter.exclude;
}

}  // namespace chorus
