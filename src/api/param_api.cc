// The parameter API of NCCL 2.30 (ncclParam*), over Chorus' settings table
// (core/settings.h). A handle is a setting's entry, so a key binds to the same handle
// every time; values are read live (environment, then conf files, then the default).
// A typed getter takes exactly its parameter's type, as in NCCL; every refusal WARNs.
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/debug.h"
#include "core/settings.h"
#include "nccl.h"
#include "src/api/export.h"

using namespace chorus;

struct ncclParamHandle {
  const Setting* setting;
  std::mutex mutex;
  std::string text;  // what ncclParamGetStr last handed out; kept while unchanged
};

namespace {

// One handle per setting, never freed: NCCL's handles live as long as the library.
std::vector<ncclParamHandle>& handles() {
  static auto* all = [] {
    auto settings = allSettings();
    auto* v = new std::vector<ncclParamHandle>(settings.size());
    for (size_t i = 0; i < settings.size(); ++i) (*v)[i].setting = &settings[i];
    return v;
  }();
  return *all;
}

ncclParamHandle* handleOf(const char* key) {
  if (key == nullptr) return nullptr;
  for (ncclParamHandle& h : handles())
    if (strcmp(h.setting->name, key) == 0) return &h;
  return nullptr;
}

// The settings NCCL would list: the library's own; NCCL_PARAM_DUMP_ALL adds the rest.
std::vector<const Setting*> listedSettings() {
  const bool all = settingText(*findSetting("NCCL_PARAM_DUMP_ALL")) == "TRUE";
  std::vector<const Setting*> listed;
  for (const Setting& s : allSettings())
    if (all || s.use == SettingUse::kHonoured || s.use == SettingUse::kNotHonoured) listed.push_back(&s);
  return listed;
}

template <typename T>
ncclResult_t typedGet(const char* func, ncclParamHandle_t h, T* out, SettingType type, const char* typeName) {
  if (h == nullptr || out == nullptr) {
    WARN("%s: %s is NULL", func, h == nullptr ? "handle" : "out");
    return ncclInvalidArgument;
  }
  if (h->setting->type != type || typeName == nullptr) {
    WARN("%s: %s is %s, not %s", func, h->setting->name, settingTypeName(h->setting->type),
         typeName ? typeName : "readable by this getter");
    return ncclInvalidArgument;
  }
  const std::string bytes = settingBytes(*h->setting);
  memcpy(out, bytes.data(), sizeof(T));
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t pncclParamBind(ncclParamHandle_t* out, const char* key) {
  if (out == nullptr || key == nullptr) {
    WARN("ncclParamBind: %s is NULL", out == nullptr ? "out" : "key");
    return ncclInvalidArgument;
  }
  ncclParamHandle* h = handleOf(key);
  if (h == nullptr) {
    WARN("ncclParamBind: no parameter named \"%s\" (names are case-sensitive)", key);
    return ncclInvalidArgument;
  }
  *out = h;
  return ncclSuccess;
}

// No setting has these types: the getters exist for NCCL's ABI and always refuse.
ncclResult_t pncclParamGetI8(ncclParamHandle_t h, int8_t* out) {
  return typedGet("ncclParamGetI8", h, out, SettingType::kInt64, nullptr);
}
ncclResult_t pncclParamGetI16(ncclParamHandle_t h, int16_t* out) {
  return typedGet("ncclParamGetI16", h, out, SettingType::kInt64, nullptr);
}
ncclResult_t pncclParamGetI32(ncclParamHandle_t h, int32_t* out) {
  return typedGet("ncclParamGetI32", h, out, SettingType::kInt64, nullptr);
}
ncclResult_t pncclParamGetU8(ncclParamHandle_t h, uint8_t* out) {
  return typedGet("ncclParamGetU8", h, out, SettingType::kInt64, nullptr);
}
ncclResult_t pncclParamGetU16(ncclParamHandle_t h, uint16_t* out) {
  return typedGet("ncclParamGetU16", h, out, SettingType::kInt64, nullptr);
}

ncclResult_t pncclParamGetI64(ncclParamHandle_t h, int64_t* out) {
  return typedGet("ncclParamGetI64", h, out, SettingType::kInt64, "int64_t");
}
ncclResult_t pncclParamGetU32(ncclParamHandle_t h, uint32_t* out) {
  return typedGet("ncclParamGetU32", h, out, SettingType::kLevelMask, "uint32_t");
}
ncclResult_t pncclParamGetU64(ncclParamHandle_t h, uint64_t* out) {
  return typedGet("ncclParamGetU64", h, out, SettingType::kSubsysMask, "uint64_t");
}

ncclResult_t pncclParamGetStr(ncclParamHandle_t h, const char** out) {
  if (h == nullptr || out == nullptr) {
    WARN("ncclParamGetStr: %s is NULL", h == nullptr ? "handle" : "out");
    return ncclInvalidArgument;
  }
  if (h->setting->type != SettingType::kString) {
    WARN("ncclParamGetStr: %s is %s, not a string", h->setting->name, settingTypeName(h->setting->type));
    return ncclInvalidArgument;
  }
  std::lock_guard<std::mutex> lock(h->mutex);
  std::string now = settingText(*h->setting);
  if (now != h->text) h->text = std::move(now);  // the pointer handed out stays valid while unchanged
  *out = h->text.c_str();
  return ncclSuccess;
}

ncclResult_t pncclParamGet(ncclParamHandle_t h, void* out, int maxLen, int* len) {
  if (h == nullptr || out == nullptr || len == nullptr || maxLen <= 0) {
    WARN("ncclParamGet: %s", h == nullptr     ? "handle is NULL"
                             : out == nullptr ? "out is NULL"
                             : len == nullptr ? "len is NULL"
                                              : "maxLen must be positive");
    return ncclInvalidArgument;
  }
  const std::string bytes = settingBytes(*h->setting);
  if (bytes.size() > static_cast<size_t>(maxLen)) {
    WARN("ncclParamGet: %s needs %zu bytes, maxLen is %d", h->setting->name, bytes.size(), maxLen);
    *len = 0;
    return ncclInvalidArgument;
  }
  memcpy(out, bytes.data(), bytes.size());
  *len = static_cast<int>(bytes.size());
  return ncclSuccess;
}

ncclResult_t pncclParamGetParameter(const char* key, const char** value, int* valueLen) {
  thread_local std::string text;  // valid until this thread's next call, as NCCL documents
  if (value) *value = nullptr;
  if (valueLen) *valueLen = 0;
  if (key == nullptr || value == nullptr || valueLen == nullptr) {
    WARN("ncclParamGetParameter: %s is NULL", key == nullptr ? "key" : value == nullptr ? "value" : "valueLen");
    return ncclInvalidArgument;
  }
  const ncclParamHandle* h = handleOf(key);
  if (h == nullptr) {
    WARN("ncclParamGetParameter: no parameter named \"%s\"", key);
    return ncclInvalidArgument;
  }
  text = settingText(*h->setting);
  *value = text.c_str();
  *valueLen = static_cast<int>(text.size());
  return ncclSuccess;
}

ncclResult_t pncclParamGetAllParameterKeys(const char*** table, int* tableLen) {
  thread_local std::vector<const char*> keys;  // valid until this thread's next call
  if (table == nullptr || tableLen == nullptr) {
    WARN("ncclParamGetAllParameterKeys: %s is NULL", table == nullptr ? "table" : "tableLen");
    return ncclInvalidArgument;
  }
  keys.clear();
  for (const Setting* s : listedSettings()) keys.push_back(s->name);
  *table = keys.data();
  *tableLen = static_cast<int>(keys.size());
  return ncclSuccess;
}

void pncclParamDumpAll(void) {
  printf("=== ncclParam Registry Dump ===\n");
  for (const Setting* s : listedSettings()) {
    printf("%s (%s): Current value=%s default=%s -- %s%s\n", s->name, settingTypeName(s->type), settingText(*s).c_str(),
           s->defaultValue, s->meaning, s->use == SettingUse::kNotHonoured ? " [not honoured by Chorus]" : "");
  }
  printf("=== End of ncclParam Registry Dump ===\n");
  fflush(stdout);
}

}  // extern "C"

CHORUS_EXPORT_ALIAS(ncclParamBind)
CHORUS_EXPORT_ALIAS(ncclParamGetI8)
CHORUS_EXPORT_ALIAS(ncclParamGetI16)
CHORUS_EXPORT_ALIAS(ncclParamGetI32)
CHORUS_EXPORT_ALIAS(ncclParamGetI64)
CHORUS_EXPORT_ALIAS(ncclParamGetU8)
CHORUS_EXPORT_ALIAS(ncclParamGetU16)
CHORUS_EXPORT_ALIAS(ncclParamGetU32)
CHORUS_EXPORT_ALIAS(ncclParamGetU64)
CHORUS_EXPORT_ALIAS(ncclParamGetStr)
CHORUS_EXPORT_ALIAS(ncclParamGet)
CHORUS_EXPORT_ALIAS(ncclParamGetParameter)
CHORUS_EXPORT_ALIAS(ncclParamGetAllParameterKeys)
CHORUS_EXPORT_ALIAS(ncclParamDumpAll)
