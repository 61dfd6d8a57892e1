#!/usr/bin/env bash
# Builds vrdma and runs every test: the unit suites under AddressSanitizer and
# UndefinedBehaviorSanitizer, then the whole suite (unit and end-to-end, which
# create network namespaces and so need root) in the normal build. Docs:
# docs/testing.md
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

if [ "$(id -u)" -ne 0 ]; then
  echo "test.sh: run as root (the end-to-end tests create network namespaces)" >&2
  exit 1
fi

echo "== sanitizer build (ASan + UBSan): unit tests"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DVRDMA_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs" --target unit_tests
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j"$jobs" -LE e2e)

echo "== fuzzing the control-message decoder, the directory's entry checks, the router's frame decoder, the metrics request parser and a library's direct connection (libFuzzer, 20 s each)"
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DVRDMA_FUZZ=ON >/dev/null
cmake --build build-fuzz -j"$jobs" --target fuzz_decode fuzz_directory fuzz_router_frames \
  fuzz_http_request fuzz_direct_frames
for target in fuzz_decode fuzz_directory fuzz_router_frames fuzz_http_request fuzz_direct_frames; do
  mkdir -p "build-fuzz/corpus-$target"
  if ! (cd build-fuzz && "tests/fuzz/$target" -max_total_time=20 -print_final_stats=1 \
      "corpus-$target" > "$target.log" 2>&1); then
    tail -50 "build-fuzz/$target.log"
    echo "test.sh: $target found a failure (input saved in build-fuzz)" >&2
    exit 1
  fi
  grep -E "^Done [0-9]+ runs" "build-fuzz/$target.log"
done

echo "== release build: all tests"
# With the tests, also where scripts/setup.sh configured this directory without them.
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVRDMA_TESTS=ON >/dev/null
cmake --build build -j"$jobs"
build/src/ctl/vrdma sandbox down >/dev/null 2>&1 || true
cd build && ctest --output-on-failure
