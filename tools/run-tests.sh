#!/usr/bin/env bash
# Runs the whole test suite of the build directory $1 (default: build) the way CI does, and
# when a test fails, prints that test's own output once more at the very end: a CI log is
# often read from its tail, where ctest's --output-on-failure text (printed when the test
# ended, in the middle of a long run) is not. The exit status is ctest's.
set -uo pipefail
build=${1:-build}

ctest --test-dir "$build" -j2 --output-on-failure --timeout 600
status=$?
((status == 0)) && exit 0

failed="$build/Testing/Temporary/LastTestsFailed.log"
log="$build/Testing/Temporary/LastTest.log"
# LastTestsFailed.log lines read "<number>:<name>"; LastTest.log has one section per test,
# from "<n>/<total> Testing: <name>" to the next such line.
failedNames() { cut -d: -f2- "$failed"; }
sectionOf() {
  awk -v name="$1" '/ Testing: / { inside = (substr($0, index($0, " Testing: ") + 10) == name) } inside' "$log"
}
if [[ -r $failed && -r $log ]]; then
  echo
  echo "=== run-tests: the output of each failed test (from $log) ==="
  failedNames | while IFS= read -r name; do
    echo "--- $name (last 200 lines) ---"
    sectionOf "$name" | tail -n 200
  done
  # A digest last, for logs read only from their tail: each failed test's failure lines.
  echo "=== run-tests: digest ==="
  failedNames | while IFS= read -r name; do
    sectionOf "$name" | grep -E 'Failure|WARN|[Ee]rror|[Ff]ailed|Expected|Which is|[Tt]imed out|rank [0-9]' |
      grep -Ev '^(Test Failed|Command: |Directory: |")' | tail -n 6 | sed "s|^|$name: |" | cut -c1-400
  done
  echo "=== run-tests: failed: $(failedNames | tr '\n' ' ')==="
fi
exit "$status"
