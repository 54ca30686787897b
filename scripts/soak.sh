#!/usr/bin/env bash
# make soak: the seeded, model-checked soak of the NVMe controller
# (tests/qtest/nvme-soak) over every data-plane mode.
#
#   soak.sh [--no-build] [--asan] [--tree DIR] [--builddir DIR] [--logs DIR]
#
# Environment (passed to nvme-soak): SOAK_SECONDS (per configuration,
# default 60 here), SOAK_CONFIGS (all 42 by default: mmio, ioeventfd,
# irq-eventfd, iothread, iothread-poll, iothreads, each with shadow
# doorbells and without, MSI-X and pin-based, and 18 with device options,
# exclbar, cmb, cmb-legacy, pmr, mdts, mqes, pi and zoned, in mmio and
# iothread, and vf (the host drives an SR-IOV VF) in mmio and ioeventfd;
# an entry may name a part, "iothread" or "pin"), SOAK_SEED (a new one by default, printed),
# SOAK_STEPS, SOAK_STALL_S, SOAK_SKIP, SOAK_QEMU_ARGS, SOAK_DEBUG, SOAK_GDB.
#
# --asan builds into build/asan-build (as make check-asan) and fails on any
# AddressSanitizer or UBSan report of QEMU or the driver.
#
# Writes LOGS/soak.tap (one test case per configuration), LOGS/soak.err
# (what QEMU and the driver printed: a failure's trace and replay line),
# LOGS/soak.json (each configuration's figures) and prints a table:
# steps, steps per second, commands, interrupts, migrations, werror stops
# per configuration, and the operations of each kind over all of them.
# Exits 1 if a configuration failed.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
tree=$top/build/qemu
bdir=
logs=
build=1
asan=
while [ $# -gt 0 ]; do
	case $1 in
	--no-build) build=; shift ;;
	--asan) asan=1; shift ;;
	--tree) tree=$2; shift 2 ;;
	--builddir) bdir=$2; shift 2 ;;
	--logs) logs=$2; shift 2 ;;
	*) echo "soak: unknown argument $1" >&2; exit 2 ;;
	esac
done
if [ -n "$asan" ]; then
	bdir=${bdir:-$top/build/asan-build}
	logs=${logs:-$top/build/asan-logs}
else
	bdir=${bdir:-$top/build/qemu-build}
	logs=${logs:-$top/build/soak}
fi

if [ -n "$build" ]; then
	"$top/scripts/build.sh" --tree "$tree" --builddir "$bdir" ${asan:+--asan} \
		qemu-system-x86_64 tests/qtest/nvme-soak || exit 1
fi
bin=$bdir/tests/qtest/nvme-soak
[ -x "$bin" ] && [ -x "$bdir/qemu-system-x86_64" ] ||
	{ echo "soak: no nvme-soak in $bdir: run make soak (or make build)" >&2; exit 1; }

mkdir -p "$logs"
export QTEST_QEMU_BINARY=$bdir/qemu-system-x86_64
export SOAK_SECONDS=${SOAK_SECONDS:-60}
# QEMU's exit paths are not leaks worth failing on; every other report is
# (the driver's too)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
start=$(date +%s)
"$bin" >"$logs/soak.tap" 2>"$logs/soak.err"
rc=$?
secs=$(($(date +%s) - start))

grep -E '^(ok|not ok) ' "$logs/soak.tap" | sed 's/^/# soak: /'
grep '^# FAIL' "$logs/soak.err" | sed 's/^/# soak: /'
grep '^# replay:' "$logs/soak.err" | sed 's/^/# soak: /'
sanitizer=
if grep -q -E 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$logs/soak.err"; then
	sanitizer=1
	echo "# soak: sanitizer reports in $logs/soak.err:"
	grep -E 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$logs/soak.err" |
		head -n 5 | sed 's/^/# soak:   /'
fi

# The figures: the JSON line after each "ok" of the TAP
grep -E '^# \{' "$logs/soak.tap" | sed 's/^# //' >"$logs/soak.json"
python3 - "$logs/soak.json" "$secs" "${SOAK_STEPS:-}" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
if not rows:
    sys.exit(0)
print("# soak: %-28s %6s %8s %8s %9s %8s %5s %5s %5s" %
      ("configuration", "secs", "steps", "steps/s", "commands", "irqs",
       "migr", "stops", "torn"))
tot = {}
for r in rows:
    print("# soak: %-28s %6.0f %8d %8.1f %9d %8d %5d %5d %5d" %
          (r["config"], r["seconds"], r["steps"], r["steps_per_second"],
           r["commands"], r["interrupts"], r["migrations"],
           r["werror_stops"], r["torn_reads"]))
    for k, v in r["ops"].items():
        tot[k] = tot.get(k, 0) + v
steps = sum(r["steps"] for r in rows)
secs = sum(r["seconds"] for r in rows)
print("# soak: %d configurations, %d steps in %.0f s (%.1f steps/s), "
      "%d commands, wall %s s" % (len(rows), steps, secs, steps / secs,
                                  sum(r["commands"] for r in rows),
                                  sys.argv[2]))
print("# soak: operations: " +
      ", ".join("%s %d" % (k, v) for k, v in sorted(tot.items(),
                                                     key=lambda kv: -kv[1])))
# The counts are of operations executed (one that does not apply to its
# configuration runs as another and counts as that): a run in which a
# kind never executed did not test it.  A replay (SOAK_STEPS) stops
# early by design.
never = sorted(k for k, v in tot.items() if v == 0)
# zone operations run only on a zoned namespace; a VF has no pin-based
# interrupt to switch to and, on q35, no slot to unplug from
if not any("zoned" in r["config"] for r in rows):
    never = [k for k in never if k != "zone"]
if all(r["config"].endswith(".vf") for r in rows):
    never = [k for k in never if k not in ("msix-toggle", "unplug")]
if never and not sys.argv[3]:
    print("# soak: not ok: never executed over the whole run: " +
          ", ".join(never))
    sys.exit(1)
EOF
figures=$?
[ "$rc" -eq 0 ] && [ -z "$sanitizer" ] && [ "$figures" -eq 0 ]
