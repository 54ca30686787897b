# The AioContext unit tests the project builds and runs beside the NVMe
# qtests (the series changes util/aio-posix.c); sourced by build.sh (the
# pseudo-target "unit") and qtest.sh.  test-aio-poll-io-uring is the
# series' own; meson defines it only where QEMU has liburing.
NVDP_UNIT_TESTS=(test-aio test-aio-multithread test-nested-aio-poll test-aio-poll-io-uring)
