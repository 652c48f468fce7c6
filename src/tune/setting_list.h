// NCCL_ALGO / NCCL_PROTO lists: "Ring,Tree" enables those, "^LL" enables all but those,
// names are case-insensitive, an empty string enables everything.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chorus {

// A name the list may contain. bit < 0: NCCL has it, Chorus does not (accepted, ignored).
struct SettingName {
  const char* name;
  int bit;
};

struct SettingList {
  enum class Outcome {
    Ok,           // mask holds what the list asked for
    Unset,        // empty text: everything enabled
    UnknownName,  // `problem` is the token nobody knows; everything enabled
    Unsupported,  // NCCL's per-collective "coll:list;..." form; everything enabled
    NothingLeft,  // the list enabled nothing Chorus has; everything enabled
  };
  uint32_t mask = 0;
  Outcome outcome = Outcome::Ok;
  std::string problem;
  std::vector<std::string> foreignNames;  // NCCL names Chorus lacks, as written
  int names = 0;                          // names the text gave, Chorus' and NCCL's: 0 for "^" alone or ", ,"
};

// Pure parse; `allMask` is what "everything" means.
SettingList parseSettingList(std::string_view text, std::span<const SettingName> names, uint32_t allMask);

// Parses and logs: a WARN naming `variable` for each outcome that ignores the setting, an
// INFO for names Chorus lacks. Returns the enabled mask (never 0).
uint32_t enabledMaskFromSetting(const char* variable, std::string_view text, std::span<const SettingName> names,
                                uint32_t allMask);

}  // namespace chorus
