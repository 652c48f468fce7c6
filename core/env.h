// Environment settings. Values come from the process environment first, then from
// NCCL_CONF_FILE, ~/.nccl.conf and /etc/nccl.conf (lines "NAME=value"), as in NCCL.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace chorus {

// The raw value of a setting, or nullopt when it is set nowhere.
std::optional<std::string> envValue(const char* name);

// An integer setting; `fallback` when unset or not a number (a WARN names the bad value).
int64_t envInt(const char* name, int64_t fallback);
// envInt within [low, high]: a value outside is refused with a WARN naming the range, and
// `fallback` is used, as for a malformed one.
int64_t envIntInRange(const char* name, int64_t fallback, int64_t low, int64_t high);

// A setting's text as an integer (decimal, 0x hex, 0 octal), or nullopt when it is not one.
std::optional<int64_t> parseIntSetting(const std::string& text);

// CHORUS_BOOTSTRAP_TIMEOUT in seconds (default 300, 1 to 10^6), read anew on every call:
// how long set-up may wait for other ranks, for every reader alike.
int bootstrapTimeoutSeconds();

// A string setting; `fallback` when unset.
std::string envString(const char* name, const std::string& fallback = "");

}  // namespace chorus
