// The table of every setting Chorus knows: each NCCL_* / CHORUS_* variable the library
// reads (name, type, default, meaning), the NCCL variables it knows but cannot honour,
// and the ones only other software reads. Rules:
//   - every name the library passes to envInt/envString/envValue is in the table
//     (tests/system/settings_table.py checks the sources, and README's tables, against it);
//   - a set NCCL_* or CHORUS_* variable that is not in the table, or that asks for what
//     Chorus cannot do, gets one WARN at the first communicator's init (NCCL ignores both
//     silently; a typo such as NCCL_SOCKET_IFNAMES would otherwise go unnoticed);
//   - NCCL_DEBUG_SUBSYS naming ENV prints the whole table with each value and its source;
//   - the ncclParam* API (NCCL 2.30) reads the table: the types are the ones NCCL gives
//     the same names, and a getter takes exactly its parameter's type.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace chorus {

enum class SettingType : uint8_t {
  kBool,        // 1/0, true/false, yes/no, on/off; printed TRUE/FALSE
  kInt64,       // a number (decimal, 0x hex)
  kString,      // text
  kDebugLevel,  // NCCL_DEBUG: VERSION, WARN, INFO, ABORT, TRACE (an int32 enum)
  kSubsysMask,  // NCCL_DEBUG_SUBSYS: a list of subsystem names (uint64 bits)
  kLevelMask,   // NCCL_DEBUG_TIMESTAMP_LEVELS: a list of level names (uint32 bits, 1 << level)
};

enum class SettingUse : uint8_t {
  kHonoured,       // the library reads and obeys it
  kNotHonoured,    // NCCL's; set to anything but `inertValues`, it gets one WARN naming why
  kOtherSoftware,  // read by PyTorch and the like, not by NCCL or Chorus: never warned about
  kTools,          // read by Chorus' own tools and tests, not by the library
};

struct Setting {
  const char* name;
  SettingType type;
  const char* defaultValue;  // as text, in the setting's own syntax
  SettingUse use;
  const char* meaning;                // for kNotHonoured: why it cannot be honoured
  const char* inertValues = nullptr;  // kNotHonoured: comma-separated values that ask for nothing
};

std::span<const Setting> allSettings();
const Setting* findSetting(std::string_view name);

// The C++ type name NCCL's registry dump prints for a setting type ("uint64_t", ...).
const char* settingTypeName(SettingType type);

// A setting's value as text in its canonical form (TRUE/FALSE, subsystem names, ...):
// the environment's or conf file's value where set and valid, else the default.
std::string settingText(const Setting& setting);

// The value's bytes as ncclParamGet returns them (bool 1 byte, level 4, masks 4 or 8,
// int64 8, a string with its NUL).
std::string settingBytes(const Setting& setting);

// Checks the environment once per process, at the first communicator's init: one WARN
// for each set NCCL_* / CHORUS_* variable that is unknown (with the closest known name)
// or not honoured; INFO lines (ENV) for the variables set, or for the whole table when
// NCCL_DEBUG_SUBSYS names ENV explicitly.
void reportSettingsOnce();

// Does the setting's value, as the environment gives it, ask for nothing Chorus lacks?
bool settingIsInert(const Setting& setting, const std::string& value);

}  // namespace chorus
