// The hang report: what a rank writes when one of its calls timed out (CHORUS_TIMEOUT),
// when a call stuck for over a second is aborted or revoked, and on demand (the signal
// CHORUS_REPORT_SIGNAL names). For each communicator: who it is, its last calls (the flight
// record, src/comm/flight_record.h) with their numbers, states and times, and for a stuck
// call the wait it is in (the peer, the step, and the call that peer is in). The lines go
// to the log as WARNs; with NCCL_DEBUG unset, to stderr, so that a hang is never silent.
#pragma once

#include <string>

struct ncclComm;

namespace chorus {

// One communicator's report: `why` heads it ("timed out"), `stuck` says what the stuck call
// waits for ("" when none is known).
void writeHangReport(const ncclComm& comm, const char* why, const std::string& stuck);

// Every live communicator's report (the on-demand report).
void writeHangReportsOfAllComms(const char* why);

// Installs the handler of CHORUS_REPORT_SIGNAL (USR1, USR2 or a number) once per process;
// a thread of its own writes the reports, since a signal handler may only wake it.
void armReportSignal();

}  // namespace chorus
