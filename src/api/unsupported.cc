// Entry points of NCCL (2.28 to 2.31) that Chorus does not implement yet. Each returns an
// error (or an empty value where the signature has no ncclResult_t) with a WARN
// naming it, never a silent success. README lists them.
#include "core/debug.h"
#include "src/api/export.h"
#include "src/api/validate.h"

using namespace chorus;

namespace {

ncclResult_t unsupported(const char* func, const char* why) {
  WARN("%s is not supported by Chorus yet (%s)", func, why);
  return ncclInvalidUsage;
}

// A device-pointer query that has no pointer to give: NULL, and the refusal.
ncclResult_t noPointer(void** outPtr, const char* func, const char* why) {
  if (outPtr != nullptr) *outPtr = nullptr;
  return unsupported(func, why);
}

}  // namespace

// Device-side API types (nccl_device.h); only their host entry points are exported.
struct ncclTeam {
  int nRanks, rank, stride;
};
struct ncclDevComm;
struct ncclDevCommRequirements;
struct ncclDevResourceRequirements;
struct ncclLsaBarrierHandle;
struct ncclGinBarrierHandle;
struct ncclLLA2AHandle;
struct ncclGinOutboxHandle;
struct ncclGinInboxA2AHandle;
struct ncclMultimemHandle {  // passed by value: its layout decides the calling convention
  void* mcBasePtr;
};

extern "C" {

ncclResult_t pncclDevCommCreate(ncclComm_t, const ncclDevCommRequirements*, ncclDevComm*) {
  return unsupported("ncclDevCommCreate", "the device-side API needs the CUDA executor");
}

ncclResult_t pncclDevCommDestroy(ncclComm_t, const ncclDevComm*) {
  return unsupported("ncclDevCommDestroy", "the device-side API needs the CUDA executor");
}

ncclResult_t pncclLsaBarrierCreateRequirement(ncclTeam, int, ncclLsaBarrierHandle*, ncclDevResourceRequirements*) {
  return unsupported("ncclLsaBarrierCreateRequirement", "the device-side API needs the CUDA executor");
}

ncclResult_t pncclGinBarrierCreateRequirement(ncclComm_t, ncclTeam, int, ncclGinBarrierHandle*,
                                              ncclDevResourceRequirements*) {
  return unsupported("ncclGinBarrierCreateRequirement", "the device-side API needs the CUDA executor");
}

ncclResult_t pncclLLA2ACreateRequirement(int, int, ncclLLA2AHandle*, ncclDevResourceRequirements*) {
  return unsupported("ncclLLA2ACreateRequirement", "the device-side API needs the CUDA executor");
}

int pncclLLA2ACalcSlots(int, int) {
  unsupported("ncclLLA2ACalcSlots", "the device-side API needs the CUDA executor");
  return 0;
}

ncclResult_t pncclGinOutboxCreateRequirement(int, int, ncclGinOutboxHandle*, ncclDevResourceRequirements*) {
  return unsupported("ncclGinOutboxCreateRequirement", "the device-side API needs the CUDA executor");
}

ncclResult_t pncclGinInboxA2ACreateRequirement(ncclTeam, int, int, ncclGinInboxA2AHandle*,
                                               ncclDevResourceRequirements*) {
  return unsupported("ncclGinInboxA2ACreateRequirement", "the device-side API needs the CUDA executor");
}

// Device pointers into a window's memory: Chorus' windows are reached through messages
// (src/rma), never mapped into a peer, so there is no pointer to give.
ncclResult_t pncclGetLsaMultimemDevicePointer(ncclWindow_t, size_t, void** outPtr) {
  return noPointer(outPtr, "ncclGetLsaMultimemDevicePointer", "windows are not mapped into peers; no multicast memory");
}

ncclResult_t pncclGetMultimemDevicePointer(ncclWindow_t, size_t, ncclMultimemHandle, void** outPtr) {
  return noPointer(outPtr, "ncclGetMultimemDevicePointer", "windows are not mapped into peers; no multicast memory");
}

ncclResult_t pncclGetLsaDevicePointer(ncclWindow_t, size_t, int, void** outPtr) {
  return noPointer(outPtr, "ncclGetLsaDevicePointer", "windows are not mapped into peers");
}

ncclResult_t pncclGetPeerDevicePointer(ncclWindow_t, size_t, int, void** outPtr) {
  return noPointer(outPtr, "ncclGetPeerDevicePointer", "windows are not mapped into peers");
}

ncclTeam pncclTeamWorld(ncclComm_t) {
  unsupported("ncclTeamWorld", "the device-side API needs the CUDA executor");
  return ncclTeam{0, 0, 0};
}

ncclTeam pncclTeamLsa(ncclComm_t) {
  unsupported("ncclTeamLsa", "the device-side API needs the CUDA executor");
  return ncclTeam{0, 0, 0};
}

ncclTeam pncclTeamRail(ncclComm_t) {
  unsupported("ncclTeamRail", "the device-side API needs the CUDA executor");
  return ncclTeam{0, 0, 0};
}

int pncclTeamRankToWorld(ncclComm_t, ncclTeam, int) {
  unsupported("ncclTeamRankToWorld", "the device-side API needs the CUDA executor");
  return -1;
}

int pncclTeamRankToLsa(ncclComm_t, ncclTeam, int) {
  unsupported("ncclTeamRankToLsa", "the device-side API needs the CUDA executor");
  return -1;
}

// The device API entry points are not declared in nccl.h, so their nccl* names are
// declared here for the aliases below.
ncclResult_t ncclDevCommCreate(ncclComm_t, const ncclDevCommRequirements*, ncclDevComm*);
ncclResult_t ncclDevCommDestroy(ncclComm_t, const ncclDevComm*);
ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam, int, ncclLsaBarrierHandle*, ncclDevResourceRequirements*);
ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t, ncclTeam, int, ncclGinBarrierHandle*,
                                             ncclDevResourceRequirements*);
ncclResult_t ncclLLA2ACreateRequirement(int, int, ncclLLA2AHandle*, ncclDevResourceRequirements*);
int ncclLLA2ACalcSlots(int, int);
ncclResult_t ncclGinOutboxCreateRequirement(int, int, ncclGinOutboxHandle*, ncclDevResourceRequirements*);
ncclResult_t ncclGinInboxA2ACreateRequirement(ncclTeam, int, int, ncclGinInboxA2AHandle*, ncclDevResourceRequirements*);
ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t, size_t, void**);
ncclResult_t ncclGetMultimemDevicePointer(ncclWindow_t, size_t, ncclMultimemHandle, void**);
ncclResult_t ncclGetLsaDevicePointer(ncclWindow_t, size_t, int, void**);
ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t, size_t, int, void**);
ncclTeam ncclTeamWorld(ncclComm_t);
ncclTeam ncclTeamLsa(ncclComm_t);
ncclTeam ncclTeamRail(ncclComm_t);
int ncclTeamRankToWorld(ncclComm_t, ncclTeam, int);
int ncclTeamRankToLsa(ncclComm_t, ncclTeam, int);

}  // extern "C"

CHORUS_EXPORT_ALIAS(ncclDevCommCreate)
CHORUS_EXPORT_ALIAS(ncclDevCommDestroy)
CHORUS_EXPORT_ALIAS(ncclLsaBarrierCreateRequirement)
CHORUS_EXPORT_ALIAS(ncclGinBarrierCreateRequirement)
CHORUS_EXPORT_ALIAS(ncclLLA2ACreateRequirement)
CHORUS_EXPORT_ALIAS(ncclLLA2ACalcSlots)
CHORUS_EXPORT_ALIAS(ncclGinOutboxCreateRequirement)
CHORUS_EXPORT_ALIAS(ncclGinInboxA2ACreateRequirement)
CHORUS_EXPORT_ALIAS(ncclGetLsaMultimemDevicePointer)
CHORUS_EXPORT_ALIAS(ncclGetMultimemDevicePointer)
CHORUS_EXPORT_ALIAS(ncclGetLsaDevicePointer)
CHORUS_EXPORT_ALIAS(ncclGetPeerDevicePointer)
CHORUS_EXPORT_ALIAS(ncclTeamWorld)
CHORUS_EXPORT_ALIAS(ncclTeamLsa)
CHORUS_EXPORT_ALIAS(ncclTeamRail)
CHORUS_EXPORT_ALIAS(ncclTeamRankToWorld)
CHORUS_EXPORT_ALIAS(ncclTeamRankToLsa)
