// Exported names: nccl* is a weak alias of pnccl*, as in NCCL, so a profiling
// library can interpose nccl* and still reach the implementation through pnccl*.
// An alias must sit in the translation unit that defines its target, and no
// template can declare one, hence this one macro.
#pragma once

#define CHORUS_EXPORT_ALIAS(name) \
  extern "C" __attribute__((weak, alias("p" #name), visibility("default"))) decltype(p##name) name;
