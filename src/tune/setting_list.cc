#include "src/tune/setting_list.h"

#include <strings.h>

#include "core/debug.h"

namespace chorus {
namespace {

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

const SettingName* findName(std::string_view token, std::span<const SettingName> names) {
  for (const SettingName& n : names) {
    std::string_view candidate(n.name);
    if (candidate.size() == token.size() && strncasecmp(candidate.data(), token.data(), token.size()) == 0) return &n;
  }
  return nullptr;
}

SettingList everything(uint32_t allMask, SettingList::Outcome why, std::string problem) {
  SettingList list;
  list.mask = allMask;
  list.outcome = why;
  list.problem = std::move(problem);
  return list;
}

}  // namespace

SettingList parseSettingList(std::string_view text, std::span<const SettingName> names, uint32_t allMask) {
  text = trimmed(text);
  if (text.empty()) return everything(allMask, SettingList::Outcome::Unset, "");
  // NCCL 2.24+ also takes "allreduce:tree;broadcast:ring"; Chorus keeps one list for all.
  if (text.find_first_of(";:") != std::string_view::npos)
    return everything(allMask, SettingList::Outcome::Unsupported, std::string(text));

  const bool exclude = text.front() == '^';
  if (exclude) text.remove_prefix(1);
  SettingList list;
  uint32_t named = 0;
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view token = trimmed(text.substr(0, comma));
    if (!token.empty()) {
      const SettingName* name = findName(token, names);
      if (name == nullptr) return everything(allMask, SettingList::Outcome::UnknownName, std::string(token));
      ++list.names;
      if (name->bit < 0) {
        list.foreignNames.emplace_back(token);
      } else {
        named |= uint32_t(1) << name->bit;
      }
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  list.mask = exclude ? (allMask & ~named) : (named & allMask);
  if (list.mask == 0) {
    SettingList all = everything(allMask, SettingList::Outcome::NothingLeft, "");
    all.foreignNames = std::move(list.foreignNames);
    all.names = list.names;
    return all;
  }
  return list;
}

uint32_t enabledMaskFromSetting(const char* variable, std::string_view text, std::span<const SettingName> names,
                                uint32_t allMask) {
  const SettingList list = parseSettingList(text, names, allMask);
  const std::string value(text);
  for (const std::string& foreign : list.foreignNames)
    INFO(kSubsysTuning | kSubsysEnv, "%s: %s is not implemented by Chorus; ignored", variable, foreign.c_str());
  switch (list.outcome) {
    case SettingList::Outcome::Ok:
      INFO(kSubsysTuning | kSubsysEnv, "%s set to %s", variable, value.c_str());
      break;
    case SettingList::Outcome::Unset:
      break;
    case SettingList::Outcome::UnknownName:
      WARN("%s=%s: unknown name '%s'; setting ignored, all enabled", variable, value.c_str(), list.problem.c_str());
      break;
    case SettingList::Outcome::Unsupported:
      WARN("%s=%s: per-collective lists (coll:list;...) are not supported; setting ignored, all enabled", variable,
           value.c_str());
      break;
    case SettingList::Outcome::NothingLeft:
      WARN("%s=%s leaves nothing that Chorus implements enabled; all enabled", variable, value.c_str());
      break;
  }
  return list.mask;
}

}  // namespace chorus
