#include "core/env.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

#include "core/debug.h"
#include "core/settings.h"

namespace chorus {
namespace {

// NCCL reads NCCL_CONF_FILE, else ~/.nccl.conf, then /etc/nccl.conf; the
// environment wins over every file.
void parseConfFile(const std::string& path, std::map<std::string, std::string>* out) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    size_t eq = line.find('=', start);
    if (eq == std::string::npos) continue;
    std::string key = line.substr(start, eq - start);
    key.erase(key.find_last_not_of(" \t") + 1);
    std::string value = line.substr(eq + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    value.erase(value.find_last_not_of(" \t\r") + 1);
    out->emplace(key, value);  // first file read wins
  }
}

const std::map<std::string, std::string>& confFileValues() {
  static const std::map<std::string, std::string> values = [] {
    std::map<std::string, std::string> v;
    if (const char* file = getenv("NCCL_CONF_FILE")) {
      parseConfFile(file, &v);
    } else if (const char* home = getenv("HOME")) {
      parseConfFile(std::string(home) + "/.nccl.conf", &v);
    }
    parseConfFile("/etc/nccl.conf", &v);
    return v;
  }();
  return values;
}

}  // namespace

std::optional<std::string> envValue(const char* name) {
  // The settings table is the list of what Chorus reads; a name missing from it is a bug
  // here, not the user's, and would escape the unknown-variable check.
  if (findSetting(name) == nullptr) WARN("internal: setting %s is read but missing from core/settings.cc", name);
  if (const char* v = getenv(name)) return std::string(v);
  const auto& conf = confFileValues();
  auto it = conf.find(name);
  if (it != conf.end()) return it->second;
  return std::nullopt;
}

std::optional<int64_t> parseIntSetting(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = strtoll(text.c_str(), &end, 0);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return v;
}

int64_t envInt(const char* name, int64_t fallback) {
  auto value = envValue(name);
  if (!value || value->empty()) return fallback;
  const std::optional<int64_t> v = parseIntSetting(*value);
  if (!v) {
    WARN("Invalid value %s for %s, using default %lld", value->c_str(), name, static_cast<long long>(fallback));
    return fallback;
  }
  return *v;
}

int64_t envIntInRange(const char* name, int64_t fallback, int64_t low, int64_t high) {
  const int64_t v = envInt(name, fallback);
  if (v >= low && v <= high) return v;
  WARN("%s=%lld is outside [%lld, %lld]; using the default %lld", name, static_cast<long long>(v),
       static_cast<long long>(low), static_cast<long long>(high), static_cast<long long>(fallback));
  return fallback;
}

int bootstrapTimeoutSeconds() {
  const int64_t seconds = envIntInRange("CHORUS_BOOTSTRAP_TIMEOUT", 300, 0, INT32_MAX);
  return static_cast<int>(std::clamp<int64_t>(seconds, 1, 1000000));
}

std::string envString(const char* name, const std::string& fallback) {
  auto value = envValue(name);
  return value ? *value : fallback;
}

}  // namespace chorus
