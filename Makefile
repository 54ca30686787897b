# nvme-dataplane: a patch queue for QEMU's hw/nvme, and its tooling.
# Each target is a thin call into one script; see README.md.

.PHONY: all deps tree export build qtest guest check check-guest check-series check-asan check-tsan soak fuzz bench bench-device libvirt-check clean help

all: build

help:
	@echo "make deps    install the Debian packages the project needs"
	@echo "make tree    build/qemu: pinned upstream + patches/series (git am)"
	@echo "make export  build/qemu commits since 'upstream' -> patches/ (a directory per series)"
	@echo "make build   configure and build build/qemu into build/qemu-build"
	@echo "make qtest   run the NVMe qtests against build/qemu-build"
	@echo "make guest   build/guest: the Linux guest (kernel + initramfs) from Debian packages"
	@echo "make check   every test that boots no guest, from patches/ as committed (CI)"
	@echo "make check-guest  the tests that boot a guest under TCG (Linux: fio, migration, libvirt)"
	@echo "make check-series  the NVMe qtests at the last patch of every topic series"
	@echo "make check-asan  the NVMe qtests against an AddressSanitizer build"
	@echo "make check-tsan  the threaded NVMe qtests against a ThreadSanitizer build (TSAN_TOPICS)"
	@echo "make soak    the seeded, model-checked soak of every data-plane mode (SOAK_SECONDS each)"
	@echo "make fuzz    generic-fuzz campaign on the NVMe configs (FUZZ_SECONDS each)"
	@echo "make bench   the benchmark"
	@echo "make bench-device  the device benchmark without a guest (blk-bench)"
	@echo "make libvirt-check  a private libvirt daemon runs the guest on nvme.rst's libvirt example"

deps:
	@scripts/deps.sh

tree: deps
	@scripts/tree.sh

export:
	@scripts/export.sh

build: tree
	@scripts/build.sh

qtest: build
	@scripts/qtest.sh

guest: deps
	@scripts/guest_image.py

check: deps
	@scripts/check.sh

check-guest: deps
	@scripts/check_guest.sh

check-series: deps
	@scripts/check_series.sh $(SERIES)

check-asan: tree
	@scripts/build.sh --asan --builddir build/asan-build \
		qemu-system-x86_64 tests/qtest/qos-test tests/qtest/nvme-io-test \
		tests/qtest/nvme-soak unit
	@scripts/qtest.sh --builddir build/asan-build --logs build/asan-logs --check
	@SOAK_SECONDS=$${SOAK_SECONDS:-3} scripts/soak.sh --asan --no-build

check-tsan: tree
	@scripts/tsan.sh

soak: tree
	@scripts/soak.sh

fuzz: tree
	@scripts/fuzz.sh

bench: build guest
	@scripts/bench.py

bench-device: build
	@scripts/bench_device.py

libvirt-check: build guest
	@scripts/libvirt_check.py

clean:
	rm -rf build
