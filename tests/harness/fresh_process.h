// A test of once-per-process behaviour (the settings table printed at the first init, the
// report signal armed at the first communicator) holds only in a process where no other
// test ran first; a forked child inherits what ran. Such a test starts with
//
//     if (!inFreshProcess()) return;
//
// In any other process this runs the test binary again with only this test (by
// --gtest_filter, marked by an environment variable), waits for it under `timeout`, and
// records a failure with the new process' output when it failed, ran no test, or timed
// out; it returns false, and the body runs only in the new process, where it returns true.
#pragma once

#include <chrono>

namespace chorus_test {

bool inFreshProcess(std::chrono::seconds timeout = std::chrono::seconds(120));

}  // namespace chorus_test
