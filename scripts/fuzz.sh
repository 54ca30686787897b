#!/usr/bin/env bash
# Build QEMU's generic-fuzz target for the NVMe controller (clang with
# libFuzzer, AddressSanitizer and UBSan; build/fuzz-build) and run a
# time-boxed campaign on each NVMe config of generic_fuzz_configs.h.
#
#   fuzz.sh [--no-build] [CONFIG...]
#   (default: nvme nvme-eventfd nvme-iothread nvme-iothread-poll
#   nvme-iothreads nvme-coalescing)
#
# Environment: FUZZ_SECONDS (per config, default 300), FUZZ_DIR (default
# build/fuzz), FUZZ_BIN (the fuzzer; default build/fuzz-build/qemu-fuzz-x86_64,
# with --no-build only).  Each config keeps its corpus in FUZZ_DIR/corpus/CONFIG
# (so campaigns add up), its crash reproducers in FUZZ_DIR/crashes/CONFIG
# and libFuzzer's log in FUZZ_DIR/CONFIG.log.  A crash does not end the
# config's time box: libFuzzer starts again, up to FUZZ_SECONDS in all.
# Prints one line per config: seconds, executions, coverage, crashes;
# exits 1 if a run crashed.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bdir=$top/build/fuzz-build
out=${FUZZ_DIR:-$top/build/fuzz}
secs=${FUZZ_SECONDS:-300}
build=1
configs=()
for a in "$@"; do
	case $a in
	--no-build) build= ;;
	-*) echo "fuzz: unknown option $a" >&2; exit 2 ;;
	*) configs+=("$a") ;;
	esac
done
[ ${#configs[@]} -gt 0 ] || configs=(nvme nvme-eventfd nvme-iothread nvme-iothread-poll nvme-iothreads
	nvme-coalescing nvme-options nvme-options-pmr nvme-iothread-options
	nvme-iothread-options-pmr nvme-sriov)

if [ -n "$build" ]; then
	"$top/scripts/build.sh" --fuzz --builddir "$bdir" qemu-fuzz-x86_64 || exit 1
fi
bin=$bdir/qemu-fuzz-x86_64
[ -n "$build" ] || bin=${FUZZ_BIN:-$bin}
[ -x "$bin" ] || { echo "fuzz: no $bin: run make fuzz" >&2; exit 1; }

# QEMU's own exit paths are not leaks worth failing on; libFuzzer reports
# crashes, ASan and UBSan errors (UBSan made fatal).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}

status=0
printf '%-14s %8s %12s %8s %8s %8s\n' config seconds executions cov ft crashes
for c in "${configs[@]}"; do
	corpus=$out/corpus/$c crashes=$out/crashes/$c log=$out/$c.log
	mkdir -p "$corpus" "$crashes"
	: >"$log"
	start=$(date +%s) execs=0 runs=0
	while :; do
		left=$((secs - ($(date +%s) - start)))
		[ $left -gt 0 ] || break
		runs=$((runs + 1))
		"$bin" --fuzz-target="generic-fuzz-$c" -max_total_time="$left" \
			-print_final_stats=1 -artifact_prefix="$crashes/" \
			"$corpus" >>"$log" 2>&1
		rc=$?
		n=$(grep -a 'stat::number_of_executed_units' "$log" | tail -n 1 | awk '{print $2}')
		execs=$((execs + ${n:-0}))
		# A run that ended by a crash stops on its own; one that ended
		# for any other reason without using its time is broken.
		if [ $rc -ne 0 ] && ! ls "$crashes" | grep -q .; then
			echo "fuzz: $c: libFuzzer exited $rc without a reproducer; see $log" >&2
			status=1
			break
		fi
	done
	last=$(grep -aE '^#[0-9]+' "$log" | tail -n 1)
	cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
	ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
	ncrash=$(find "$crashes" -type f | wc -l)
	[ "$ncrash" -eq 0 ] || status=1
	printf '%-14s %8d %12d %8s %8s %8d\n' "$c" "$(($(date +%s) - start))" \
		"$execs" "${cov:--}" "${ft:--}" "$ncrash"
done
exit $status
