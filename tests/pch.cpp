// The source of kiln_test_pch (tests/CMakeLists.txt): empty, it exists to own the precompiled header that
// the test executables share.
