#!/usr/bin/python3
"""A CI-sized benchmark run (BENCH_QUICK=1) and checks of what it wrote.

TAP on stdout.  Besides the files and fields, two figures are structural
and so exact even under TCG: with plain doorbells a Linux guest rings twice
per I/O at iodepth 1 (SQ tail, then CQ head), and with ioeventfd the same
writes land in eventfds and must still be counted.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import case, finish  # noqa: E402
FIELDS = ["config", "accel", "qd", "numjobs", "iops", "lat_p50_us",
          "lat_p99_us", "clat_p50_us", "clat_p99_us", "doorbells_per_io",
          "sq_doorbells_per_io", "cq_doorbells_per_io", "irqs_per_io",
          "cpu_vcpu_us_per_io", "cpu_iothread_us_per_io",
          "cpu_main_us_per_io", "cpu_other_us_per_io", "iothread_cores",
          "per_io_divisor", "window_ios", "device_args", "raw"]
META = ["qemu_version", "series", "host", "guest_kernel", "fio_version",
        "guest_cpu"]



def main():
    out = tempfile.mkdtemp(prefix="nvdp-bench-")
    env = dict(os.environ, BENCH_QUICK="1", BENCH_OUT=out, BENCH_RUNTIME="2",
               BENCH_RAMP="1",
               BENCH_CONFIGS="nvme-mmio,nvme-dbbuf,nvme-ioeventfd,virtio-blk,"
               "nvme-iothread-poll-file,nvme-iothread+ic")
    p = subprocess.run([os.path.join(TOP, "scripts", "bench.py")], env=env,
                       text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    sys.stderr.write(p.stdout)
    case(p.returncode == 0, "bench: BENCH_QUICK=1 run exits 0",
         p.stdout[-2000:])
    latest = os.path.join(out, "latest")
    case(os.path.isdir(latest), "bench: results/latest points at the run")
    files = ["results.json", "table.txt", "bench.png"]
    have = [f for f in files if os.path.exists(os.path.join(latest, f))]
    case(have == files, "bench: writes %s" % ", ".join(files),
         "has only %s" % have)
    try:
        data = json.load(open(os.path.join(latest, "results.json")))
        recs = data["records"]
    except (OSError, ValueError, KeyError) as e:
        case(False, "bench: results.json parses", str(e))
        recs = []
    want = {(c, q) for c in env["BENCH_CONFIGS"].split(",") for q in (1, 16)}
    got = {(r["config"], r["qd"]) for r in recs}
    case(want == got, "bench: one record per config and queue depth",
         "missing %s" % sorted(want - got))
    missing = sorted({f for r in recs for f in FIELDS if f not in r})
    case(recs and not missing, "bench: every record has %s" %
         ", ".join(FIELDS), "missing %s" % missing)
    case(all(r["iops"] > 0 and r["irqs_per_io"] for r in recs),
         "bench: IOPS and interrupts counted in every record")
    tcg = all(r["accel"] == "tcg" for r in recs)
    case(not tcg or data["meta"].get("tcg_note"),
         "bench: results.json says when IOPS are TCG figures")
    case(not tcg or "TCG" in p.stdout, "bench: the output says TCG")
    meta = data.get("meta", {}) if recs else {}
    lack = [k for k in META if not meta.get(k)]
    case(recs and not lack, "bench: results.json names %s" % ", ".join(META),
         "missing %s" % lack)
    case(all(r["lat_p50_us"] >= r["clat_p50_us"] > 0 for r in recs),
         "bench: total latency (submission to completion) is reported and "
         "is at least the completion latency")
    case(all(r["raw"]["ios"] == r["window_ios"] > 0 and
             r["cpu_main_us_per_io"] > 0 for r in recs),
         "bench: raw counts and the main loop's CPU are recorded")
    runtime = float(env["BENCH_RUNTIME"])
    wide = [(r["config"], r["qd"], r["window_ios"], r.get("fio_ios"))
            for r in recs if not (r.get("fio_ios") and
                                  r["fio_ios"] <= r["window_ios"] <=
                                  r["fio_ios"] * 1.1 + 16)]
    case(recs and not wide, "bench: the window holds the measured run and "
         "not the warm-up (the disk's I/Os in it are fio's, within 10%)",
         "config, qd, window_ios, fio_ios: %s" % wide)
    case(all(r["window_s"] >= runtime for r in recs),
         "bench: the window covers the measured %g s" % runtime)
    case("no ack" not in p.stdout and "NVDP error" not in p.stdout,
         "bench: every mark was acknowledged by the host")
    nvme = [r for r in recs if r["config"].startswith("nvme")]
    case(nvme and all(isinstance(r["raw"].get("admin_doorbells"), int)
                      for r in nvme),
         "bench: admin queue doorbells are recorded apart (raw)")
    by = {(r["config"], r["qd"]): r for r in recs}
    mmio = by.get(("nvme-mmio", 1), {}).get("doorbells_per_io")
    case(mmio == 2.0, "bench: nvme-mmio rings exactly 2 doorbells per IO "
         "at QD1", "got %s" % mmio)
    evfd = by.get(("nvme-ioeventfd", 1), {}).get("doorbells_per_io")
    case(evfd is not None and evfd >= 1.0,
         "bench: nvme-ioeventfd doorbells are counted through the "
         "eventfds (>= 1 per IO at QD1)", "got %s" % evfd)
    vblk = by.get(("virtio-blk", 1), {}).get("doorbells_per_io")
    case(vblk is not None and 0.9 <= vblk <= 1.1,
         "bench: virtio-blk notifies once per IO at QD1", "got %s" % vblk)
    vrec = by.get(("virtio-blk", 1), {})
    case(vrec.get("sq_doorbells_per_io") == vblk and
         vrec.get("cq_doorbells_per_io") is None,
         "bench: virtio-blk's notifications are its SQ-side doorbells")
    frec = by.get(("nvme-iothread-poll-file", 16), {})
    fargs = frec.get("backend_args", "")
    case("driver=file," in fargs and ",aio=io_uring," in fargs and
         frec.get("window_ios", 0) > 0,
         "bench: nvme-iothread-poll-file reads a raw image with "
         "aio=io_uring", "backend_args: %r" % fargs)
    ic = [r for r in recs if r["config"] == "nvme-iothread+ic"]
    case(len(ic) == 2 and
         all(r.get("interrupt_coalescing") == "0x107" for r in ic) and
         "Interrupt Coalescing 0x107 set and read back" in p.stdout and
         all(r.get("interrupt_coalescing") is None for r in recs
             if r["config"] != "nvme-iothread+ic"),
         "bench: nvme-iothread+ic: the guest sets Interrupt Coalescing with "
         "nvme-cli and reads it back; the records say so, and only theirs",
         "%s" % [(r["config"], r.get("interrupt_coalescing")) for r in recs])
    idles = data.get("idle", []) if recs else []
    idle_cfgs = sorted(r["config"] for r in idles)
    case(idle_cfgs == sorted(env["BENCH_CONFIGS"].split(",")),
         "bench: one idle window per config", "got %s" % idle_cfgs)
    case(idles and all(r["window_s"] >= 2 and r["iothread_pct"] >= 0 and
                       r["main_pct"] > 0 for r in idles),
         "bench: the idle window covers BENCH_IDLE (2 s) and records the "
         "threads' CPU in it", "%s" % idles)
    fidle = [r for r in idles if r["config"] == "nvme-iothread-poll-file"]
    case(fidle and isinstance(fidle[0]["iothread_ns"], int) and
         fidle[0]["sq_doorbells"] == 0,
         "bench: nvme-iothread-poll-file's idle window has its iothread's "
         "CPU time and no SQ doorbell", "%s" % fidle)
    case("idle (no I/O)" in p.stdout, "bench: the output has the idle table")
    shutil.rmtree(out, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
