// Sanitizer defaults for the test programs that make gRPC channels (directory_test,
// config_test), linked into them in the sanitizer build only.
//
// gRPC frees a channel's TLS state (OpenSSL objects) on its own executor threads after the
// channel's last reference goes; a test process that exits while a channel to an etcd that is
// down is still connecting leaves that state behind, and with it the test PKI's keys it holds.
// So leaks with gRPC's code on the stack, and OpenSSL allocations (these programs use OpenSSL
// only through gRPC and the test PKI), are not reported here. The router's own TLS code is
// checked with full leak detection in daemon_test. Full stacks (fast_unwind_on_malloc=0) let
// the suppressions see gRPC's frames under OpenSSL's.
//
// Compiled in rather than set through the environment: the options then hold however the
// program is started (ctest, by hand, under gtest_discover_tests).
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libgrpc.so\n"
         "leak:libgrpc++.so\n"
         "leak:libgpr.so\n"
         "leak:libcrypto.so\n";
}

extern "C" const char* __asan_default_options() {
  return "fast_unwind_on_malloc=0";
}
