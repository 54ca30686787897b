#!/usr/bin/python3
"""make bench: fio in a Linux guest, emulated NVMe against virtio-blk.

For each configuration, one boot of the guest runs fio (randread, 4k,
libaio, direct) at each queue depth against a null-co disk (the "-file"
configurations: a 1 GiB raw image written in full, in BENCH_FILE_DIR,
default build/bench-img/, read with aio=io_uring and O_DIRECT where the
filesystem has it; on tmpfs, through the page cache): first a
warm-up run (BENCH_RAMP seconds, not measured), then the measured run
(BENCH_RUNTIME seconds, no ramp inside it).  Around the measured run the
guest prints a mark and waits for the host's answer; on each mark the
host samples the QEMU process: doorbell counters, each thread's CPU time
(schedstat, ns) and, under KVM, the vCPU exit counters.  Per-IO figures
divide the host's deltas over that window by the I/Os the guest's disk
completed in it (window_ios, from /sys/block/DEV/stat; each record says
so in per_io_divisor), so the window holds only the measured run.

Figures: IOPS from fio; latency is fio's total latency (submission to
completion, lat_*), with completion latency (clat_*) beside it; SQ-side
doorbells per IO are NVMe SQ tail doorbell writes or virtio-blk
notifications, so the two compare like with like; CQ head doorbells are
NVMe's alone.  CPU per IO: the vCPU threads, the device's iothread (the
thread named "IO iot0"), the main loop (the process's main thread), and
the rest; iothread_cores is the iothread's CPU time over the window's
length (in polling rows most of it is spin).

Polling configurations (nvme and virtio-blk alike) use the same iothread
poll parameters: BENCH_POLL_NS and BENCH_POLL_SHRINK, by default QEMU's
(poll-max-ns=32768, poll-shrink=0) under KVM, and poll-max-ns=1000000,
poll-shrink=2 under TCG.  The TCG guest submits so slowly (a QD1 I/O takes
150-200 us of emulated guest, and the vCPU thread is descheduled for
milliseconds on a 2-core host) that with QEMU's defaults the poll window
ends between submissions, and one long gap resets it to zero: measured
here with nvme-iothread-poll, poll-max-ns=200000 left 0.24-0.63 SQ
doorbells per IO, 1000000 0.04-0.06, 1000000 with poll-shrink=2 (halve
the window after a long gap instead of zeroing it) 0.009-0.025.

Environment: BENCH_CONFIGS (comma list), BENCH_QD (comma list),
BENCH_RUNTIME (s, measured), BENCH_RAMP (s, the warm-up run before the
window), BENCH_JOBS (numjobs), BENCH_SMP
(vCPUs), BENCH_REPEAT (runs of everything; the table shows medians,
results.json's "summary" min, median and max), BENCH_FILE_DIR (where
the "-file" configurations' image goes), BENCH_QUICK=1 (a short
run for CI), BENCH_ACCEL (kvm|tcg, to override the probe), BENCH_OUT
(results directory), BENCH_IOTHREADS (how many iothreads the
"-iothreads" configurations spread their queues over, default 2; they
are not in the default run and need BENCH_SMP and BENCH_JOBS above 1 to
use more than one), BENCH_FILE_AIO (io_uring, native or threads: the
"-file" configurations' aio= mode), BENCH_IDLE (s: after the last run,
the guest does no I/O for this long and the host measures the device's
threads over it: results.json's "idle", the last table), BENCH_COALESCE
(the Interrupt Coalescing value of the "+ic" configurations, default
0x107).

"NAME+ic", for each NVMe configuration NAME: the same, with the guest
setting Interrupt Coalescing (Feature 08h) with nvme-cli before the runs,
to BENCH_COALESCE: bits 7:0 the Aggregation Threshold (0's based), bits
15:8 the Aggregation Time in 100 us; the default is 8 entries or 100 us.
The guest reads the value back and the run fails if the device did not
take it.  Not in the default run: name them in BENCH_CONFIGS, beside
NAME, for a side-by-side comparison.
"""

import datetime
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nvdp_configs  # noqa: E402
import nvdp_vm  # noqa: E402

# The device's iothreads (-object iothread,id=iot0 and, in the
# "-iothreads" configurations, iot1...; debug-threads=on names them)
IOTHREAD_COMM_PREFIX = "IO iot"
# how many iothreads the "-iothreads" configurations spread the queues over
IOTHREADS = int(os.environ.get("BENCH_IOTHREADS",
                               str(nvdp_configs.IOTHREADS)))

BACKEND = ["-blockdev", "driver=null-co,node-name=d0,read-zeroes=on,size=8589934592"]
NVME = "nvme,id=nvme0,drive=d0,serial=nvdp"
VBLK = "virtio-blk-pci,id=vblk0,drive=d0"

# name -> (kind, QEMU arguments, what it is), from the shared table; a
# polling iothread's parameters are filled in per accelerator (@POLL@)
BENCH_NAMES = ["nvme-mmio", "nvme-dbbuf", "nvme-ioeventfd", "nvme-irqfd",
               "nvme-iothread", "nvme-iothread-irqfd", "nvme-iothread-poll",
               "nvme-iothread-poll-irqfd", "virtio-blk", "virtio-blk-iothread",
               "virtio-blk-iothread-poll", "nvme-iothread-poll-file",
               "virtio-blk-iothread-poll-file", "nvme-iothreads-poll",
               "virtio-blk-iothreads-poll"]

# The raw image of the "file" configurations: written in full (a read of
# a hole or an unwritten extent never reaches the disk), on the build disk
# unless BENCH_FILE_DIR says otherwise, O_DIRECT where its filesystem has it
FILE_DIR = os.environ.get("BENCH_FILE_DIR",
                          os.path.join(nvdp_vm.TOP, "build", "bench-img"))
FILE_SIZE = 1 << 30
# ... and how QEMU reads it: io_uring (the default), native (Linux AIO,
# which needs O_DIRECT) or threads (the thread pool)
FILE_AIO = os.environ.get("BENCH_FILE_AIO", nvdp_configs.FILE_AIO)
CONFIGS = {n: ("nvme" if nvdp_configs.CONFIGS[n].kind == "nvme" else "virtio",
               nvdp_configs.qemu_args(n, NVME if nvdp_configs.CONFIGS[n].kind
                                      == "nvme" else VBLK, "@POLL@",
                                      IOTHREADS),
               nvdp_configs.about(n, IOTHREADS)) for n in BENCH_NAMES}
# the "-iothreads" configurations need BENCH_SMP and BENCH_JOBS above 1 to
# use more than one queue: not in the default run
MANY = [n for n in BENCH_NAMES if nvdp_configs.CONFIGS[n].iothreads == "many"]
# "NAME+ic": NAME with the guest setting Interrupt Coalescing
COALESCE = int(os.environ.get("BENCH_COALESCE", "0x107"), 0)
for _n in BENCH_NAMES:
    if CONFIGS[_n][0] == "nvme":
        CONFIGS[_n + "+ic"] = (CONFIGS[_n][0], CONFIGS[_n][1],
                               CONFIGS[_n][2] + "; the guest sets Interrupt "
                               "Coalescing (Feature 08h) to 0x%x" % COALESCE)
DEFAULT_CONFIGS = [n for n in BENCH_NAMES if n not in MANY]
QUICK_CONFIGS = ["nvme-mmio", "nvme-dbbuf", "nvme-ioeventfd", "virtio-blk"]

JOB = r"""
set -u
dev=@DEV@
kind=@KIND@
nvdp_wait_disk $dev
ios() { set -- $(cat /sys/block/$dev/stat); echo $(($1 + $5)); }
irqs() {
	awk -v p='@IRQ@' '$0 ~ p { for (i = 2; i <= NF; i++)
		if ($i ~ /^[0-9]+$/) s += $i; else break } END { print s + 0 }' \
		/proc/interrupts
}
notifies() { echo 0; }
if [ "$kind" = virtio ]; then
	t=/sys/kernel/tracing
	mount -t tracefs nodev $t
	echo 0 > $t/tracing_on
	echo 'p:nvdp_notify vp_notify' > $t/kprobe_events
	echo 1 > $t/events/kprobes/nvdp_notify/enable
	notifies() { awk '$1 == "nvdp_notify" { print $2 }' $t/kprobe_profile; }
fi
# "NVDP mark NAME qd=QD ...": the host samples QEMU, then answers
# "ack NAME-QD"; the guest goes on only then.
mark() {
	nvdp_mark "$1-$qd" "$@" irqs=$(irqs) notifies=$(notifies) ios=$(ios) ||
		exit 1
}
echo "NVDP info kernel=$(uname -r) fio=$(fio --version)"
if [ -n "@COALESCE@" ]; then
	# Interrupt Coalescing, as an operator sets it; read back
	nvme set-feature /dev/nvme0 --feature-id=8 --value=@COALESCE@ \
		> /dev/null 2>&1
	rc=$?
	v=$(nvme get-feature /dev/nvme0 --feature-id=8 --sel=0 2>&1 |
		sed -n 's/.*Current value:\(0x[0-9a-fA-F]*\).*/\1/p')
	echo "NVDP coalesce rc=$rc value=${v:-none}"
fi
fio_run() { # fio_run NAME SECONDS ARGS...
	name=$1 secs=$2
	shift 2
	fio --name=$name --filename=/dev/$dev --rw=randread --bs=4k \
		--ioengine=libaio --direct=1 --numjobs=@JOBS@ --iodepth=$qd \
		--time_based=1 --runtime=$secs --norandommap=1 --randrepeat=0 \
		--group_reporting=1 --eta=never "$@"
}
for qd in @QDS@; do
	fio_run warm @RAMP@ --output=/dev/null
	mark start qd=$qd
	fio_run bench @RUNTIME@ --lat_percentiles=1 \
		--output-format=json --output=/tmp/fio.json
	rc=$?
	mark end qd=$qd rc=$rc
	echo "NVDP fio-json qd=$qd $(tr -d '\n' < /tmp/fio.json)"
done
# The idle window: no I/O for @IDLE@ s after the last run; the host
# measures what the device's threads spend meanwhile.
qd=idle
mark idle-start qd=$qd
sleep @IDLE@
mark idle-end qd=$qd
echo "NVDP idle-done"
"""


def env_list(name, default):
    v = os.environ.get(name)
    return [x.strip() for x in v.split(",") if x.strip()] if v else default


def say(msg):
    print(msg, flush=True)


class Sampler:
    def __init__(self, guest, kind, accel):
        self.g, self.kind, self.accel = guest, kind, accel

    def sample(self):
        s = {"t": time.monotonic()}
        pid = self.g.pid
        s["cpu_vcpu"] = s["cpu_iothread"] = s["cpu_main"] = 0
        s["cpu_total"] = 0
        s["cpu_iothreads"] = {}
        for tid, comm, ns in nvdp_vm.thread_cpu_ns(pid):
            s["cpu_total"] += ns
            if tid == pid:
                s["cpu_main"] += ns
            elif comm.startswith("CPU "):
                s["cpu_vcpu"] += ns
            elif comm.startswith(IOTHREAD_COMM_PREFIX):
                s["cpu_iothread"] += ns
                s["cpu_iothreads"][comm[3:]] = ns
        if self.kind == "nvme":
            q = self.g.qmp
            s["sq_db"] = q.cmd("qom-get", path="/machine/peripheral/nvme0",
                               property="x-sq-doorbell-writes")
            s["cq_db"] = q.cmd("qom-get", path="/machine/peripheral/nvme0",
                               property="x-cq-doorbell-writes")
            try:
                s["admin_db"] = q.cmd("qom-get",
                                      path="/machine/peripheral/nvme0",
                                      property="x-admin-doorbell-writes")
            except RuntimeError:
                # a build from before the admin queue was counted apart
                # (its x-sq/x-cq counts include the admin queue's)
                s["admin_db"] = None
        if self.accel == "kvm":
            stats = self.g.qmp.cmd("query-stats", target="vcpu")
            for key in ("exits", "mmio_exits"):
                s[key] = sum(st["value"] for v in stats
                             for st in v["stats"] if st["name"] == key)
        return s


def fio_figures(text):
    """IOPS and latencies of fio's JSON: lat_* is the total latency
    (submission to completion, --lat_percentiles=1), clat_* completion
    latency only."""
    data = json.loads(text[text.index("{"):])
    rd = data["jobs"][0]["read"]
    fig = {"iops": round(rd["iops"], 1), "fio_ios": rd["total_ios"],
           "fio_version": data.get("fio version")}
    for kind in ("lat", "clat"):
        pct = rd.get(kind + "_ns", {}).get("percentile", {})
        mean = rd.get(kind + "_ns", {}).get("mean")
        fig[kind + "_mean_us"] = round(mean / 1000, 1) if mean else None
        fig[kind + "_p50_us"] = round(pct.get("50.000000", 0) / 1000, 1)
        fig[kind + "_p99_us"] = round(pct.get("99.000000", 0) / 1000, 1)
    return fig


def poll_ns(accel):
    return os.environ.get("BENCH_POLL_NS",
                          "32768" if accel == "kvm" else "1000000")


def poll_shrink(accel):
    return os.environ.get("BENCH_POLL_SHRINK", "0" if accel == "kvm" else "2")


def poll_opts(accel):
    return "poll-max-ns=%s,poll-shrink=%s" % (poll_ns(accel),
                                              poll_shrink(accel))


def qemu_version():
    try:
        out = subprocess.run([nvdp_vm.QEMU, "--version"], text=True,
                             stdout=subprocess.PIPE, timeout=30).stdout
        return out.splitlines()[0] if out else None
    except (OSError, subprocess.SubprocessError):
        return None


def series_id():
    """patches/series and a sha256 over it and every patch it lists (a
    series directory: its cover letter and patches, in name order)"""
    pdir = os.path.join(nvdp_vm.TOP, "patches")
    h = hashlib.sha256()
    count = 0
    try:
        entries = [n.split("#")[0].strip()
                   for n in open(os.path.join(pdir, "series"))]
        h.update(open(os.path.join(pdir, "series"), "rb").read())
        for e in filter(None, entries):
            if e.endswith(".patch"):
                files = [e]
            else:
                d = e.rstrip("/")
                files = [os.path.join(d, f) for f in
                         sorted(os.listdir(os.path.join(pdir, d)))
                         if f.endswith(".patch")]
            for f in files:
                h.update(open(os.path.join(pdir, f), "rb").read())
                if not f.endswith("0000-cover-letter.patch"):
                    count += 1
    except OSError:
        return None
    return {"patches": count, "sha256": h.hexdigest()}


def host_info():
    model = None
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu_model": model, "cpus": os.cpu_count(),
            "kernel": os.uname().release}


def describe(name, accel):
    return CONFIGS[name][2].replace("@POLL_NS@", poll_opts(accel))


def file_image():
    """The path of the "file" configurations' image, FILE_SIZE bytes of
    data, written once and reused."""
    img = os.path.join(FILE_DIR, "bench.raw")
    if os.path.exists(img) and os.path.getsize(img) == FILE_SIZE:
        return img
    say("bench: writing %d MiB to %s" % (FILE_SIZE >> 20, img))
    os.makedirs(FILE_DIR, exist_ok=True)
    chunk = bytes(range(256)) * 4096
    with open(img + ".tmp", "wb") as f:
        for _ in range(FILE_SIZE // len(chunk)):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    os.rename(img + ".tmp", img)
    return img


def backend_args(name):
    """-blockdev arguments of node d0 for @name."""
    if nvdp_configs.CONFIGS[name.split("+")[0]].backend == "file":
        img = file_image()
        if FILE_AIO == "native" and not nvdp_configs.o_direct_works(img):
            sys.exit("bench: BENCH_FILE_AIO=native needs O_DIRECT, which "
                     "%s's filesystem does not have" % img)
        return nvdp_configs.file_blockdev(img, aio=FILE_AIO)
    return BACKEND


def run_config(name, accel, qds, opts, outdir, progress):
    kind, devargs, _ = CONFIGS[name]
    backend = backend_args(name)
    devargs = [a.replace("@POLL@", poll_opts(accel)) for a in devargs]
    job = JOB
    for k, v in {"@DEV@": "nvme0n1" if kind == "nvme" else "vda",
                 "@KIND@": kind,
                 "@IRQ@": "nvme0q[1-9]" if kind == "nvme" else "virtio0-req",
                 "@COALESCE@": "0x%x" % COALESCE if name.endswith("+ic")
                               else "",
                 "@QDS@": " ".join(str(q) for q in qds),
                 "@JOBS@": str(opts["jobs"]),
                 "@RUNTIME@": str(opts["runtime"]),
                 "@RAMP@": str(opts["ramp"]),
                 "@IDLE@": str(opts["idle"])}.items():
        job = job.replace(k, v)
    g = nvdp_vm.Guest(job, backend + devargs, accel=accel, smp=opts["smp"],
                      log=os.path.join(outdir, "%s.console.log" % name))
    sampler = Sampler(g, kind, accel)
    records, marks, boot, info, idle = [], {}, None, {}, None
    budget = 120 + opts["idle"] + len(qds) * (opts["runtime"] +
                                              opts["ramp"] + 60)
    try:
        g.start()
        for line in g.lines(budget):
            if line.startswith("NVDP job-start"):
                boot = round(time.monotonic() - g.t0, 2)
                say("bench: %s: guest booted to its job in %.1f s" %
                    (name, boot))
            elif line.startswith("NVDP error"):
                say("  guest: " + line)
            elif line.startswith("NVDP info"):
                info = dict(p.split("=", 1) for p in line.split()[2:]
                            if "=" in p)
            elif line.startswith("NVDP coalesce"):
                kv = dict(p.split("=", 1) for p in line.split()[2:])
                if kv.get("rc") != "0" or kv.get("value") == "none" or \
                        int(kv["value"], 16) != COALESCE:
                    raise RuntimeError("%s: the guest could not set "
                                       "Interrupt Coalescing: %s" %
                                       (name, line))
                say("bench: %s: Interrupt Coalescing 0x%x set and read "
                    "back" % (name, COALESCE))
            elif line.startswith("NVDP mark"):
                what, kv = nvdp_vm.parse_mark(line)
                marks[(what, kv["qd"])] = (sampler.sample(), kv)
                g.ack("%s-%s" % (what, kv["qd"]))
                if what == "start":
                    progress(name, kv["qd"])
                elif what == "idle-end":
                    idle = make_idle(name, kind, marks[("idle-start",
                                                        "idle")][0],
                                     marks[("idle-end", "idle")][0])
            elif line.startswith("NVDP fio-json"):
                qd = line.split()[2].split("=")[1]
                text = line.split(" ", 3)[3]
                rec = make_record(name, kind, accel, int(qd), opts,
                                  marks[("start", qd)], marks[("end", qd)],
                                  text, boot)
                rec["device_args"] = " ".join(devargs)
                rec["backend_args"] = " ".join(backend)
                rec["poll"] = poll_opts(accel) if "@POLL@" in \
                    " ".join(CONFIGS[name][1]) else None
                rec["guest_kernel"] = info.get("kernel")
                rec["interrupt_coalescing"] = "0x%x" % COALESCE \
                    if name.endswith("+ic") else None
                records.append(rec)
    finally:
        g.stop()
    if idle is None:
        raise RuntimeError("%s: the guest never reached its idle window" %
                           name)
    idle["backend_args"] = " ".join(backend)
    return records, idle


def make_idle(name, kind, s0, s1):
    """What the device's threads cost with no I/O: CPU time over the idle
    window, as a percentage of one core, and the doorbells in it."""
    window = s1["t"] - s0["t"]
    pct = lambda k: round((s1[k] - s0[k]) / (window * 1e9) * 100, 3)  # noqa
    rec = {"config": name, "window_s": round(window, 3),
           "iothread_pct": pct("cpu_iothread"), "main_pct": pct("cpu_main"),
           "vcpu_pct": pct("cpu_vcpu"), "total_pct": pct("cpu_total"),
           "iothread_ns": s1["cpu_iothread"] - s0["cpu_iothread"]}
    if kind == "nvme":
        rec["sq_doorbells"] = s1["sq_db"] - s0["sq_db"]
    return rec


def iothreads_table(records):
    """Each iothread's CPU per IO in the rows with more than one."""
    rows = [r for r in records
            if len(r.get("cpu_iothreads_us_per_io") or {}) > 1]
    if not rows:
        return ""
    out = ["%-29s  %4s  %4s  %s" % ("per iothread", "qd", "run",
                                    "iothread: CPU us/IO")]
    for r in rows:
        out.append("%-29s  %4d  %4s  %s" % (
            r["config"], r["qd"], r.get("run", 1), "  ".join(
                "%s: %.1f" % (k, v) for k, v in
                r["cpu_iothreads_us_per_io"].items() if v is not None)))
    return "\n".join(out)


def idle_table(idles):
    out = ["%-29s  %4s  %10s  %12s  %8s  %8s" % (
        "idle (no I/O)", "run", "window s", "iothread us", "iothr %",
        "main %")]
    for r in idles:
        out.append("%-29s  %4s  %10.2f  %12.1f  %8.3f  %8.3f" % (
            r["config"], r.get("run", 1), r["window_s"],
            r["iothread_ns"] / 1e3, r["iothread_pct"], r["main_pct"]))
    return "\n".join(out)


def make_record(name, kind, accel, qd, opts, start, end, fio_text, boot):
    s0, g0 = start
    s1, g1 = end
    if g1.get("rc") != "0":
        raise RuntimeError("%s qd=%d: fio failed (rc=%s)" % (name, qd,
                                                           g1.get("rc")))
    ios = int(g1["ios"]) - int(g0["ios"])
    window = s1["t"] - s0["t"]
    rec = {"config": name, "accel": accel, "qd": qd, "numjobs": opts["jobs"],
           "runtime_s": opts["runtime"], "warmup_s": opts["ramp"],
           "vcpus": opts["smp"], "boot_to_job_s": boot, "window_ios": ios,
           "window_s": round(window, 3),
           "per_io_divisor": "window_ios: I/Os the guest's disk completed "
                             "between the acknowledged marks"}
    rec.update(fio_figures(fio_text))
    per = (lambda d: round(d / ios, 4)) if ios else (lambda d: None)
    raw = {"ios": ios, "irqs": int(g1["irqs"]) - int(g0["irqs"]),
           "window_ns": round(window * 1e9)}
    if kind == "nvme":
        raw["sq_doorbells"] = s1["sq_db"] - s0["sq_db"]
        raw["cq_doorbells"] = s1["cq_db"] - s0["cq_db"]
        raw["admin_doorbells"] = None if s1["admin_db"] is None else \
            s1["admin_db"] - s0["admin_db"]
        rec["cq_doorbells_per_io"] = per(raw["cq_doorbells"])
    else:
        raw["sq_doorbells"] = int(g1["notifies"]) - int(g0["notifies"])
        rec["cq_doorbells_per_io"] = None
    rec["sq_doorbells_per_io"] = per(raw["sq_doorbells"])
    rec["doorbells_per_io"] = per(raw["sq_doorbells"] +
                                  raw.get("cq_doorbells", 0))
    rec["irqs_per_io"] = per(raw["irqs"])
    for k in ("cpu_vcpu", "cpu_iothread", "cpu_main", "cpu_total"):
        raw[k + "_ns"] = s1[k] - s0[k]
    other = (raw["cpu_total_ns"] - raw["cpu_vcpu_ns"] -
             raw["cpu_iothread_ns"] - raw["cpu_main_ns"])
    us = lambda ns: per(ns / 1e3)  # noqa: E731
    rec["cpu_vcpu_us_per_io"] = us(raw["cpu_vcpu_ns"])
    rec["cpu_iothread_us_per_io"] = us(raw["cpu_iothread_ns"])
    rec["cpu_main_us_per_io"] = us(raw["cpu_main_ns"])
    rec["cpu_other_us_per_io"] = us(other)
    rec["iothread_cores"] = round(raw["cpu_iothread_ns"] / raw["window_ns"],
                                  3) if window > 0 else None
    # each iothread's CPU per IO, by id (several in "-iothreads" rows)
    raw["cpu_iothreads_ns"] = {k: s1["cpu_iothreads"][k] -
                               s0["cpu_iothreads"].get(k, 0)
                               for k in sorted(s1["cpu_iothreads"])}
    rec["cpu_iothreads_us_per_io"] = {k: us(v) for k, v in
                                      raw["cpu_iothreads_ns"].items()}
    if accel == "kvm":
        raw["exits"] = s1["exits"] - s0["exits"]
        raw["mmio_exits"] = s1["mmio_exits"] - s0["mmio_exits"]
        rec["exits_per_io"] = per(raw["exits"])
        rec["mmio_exits_per_io"] = per(raw["mmio_exits"])
    rec["raw"] = raw
    return rec


SPREAD = ["iops", "lat_p50_us", "lat_p99_us", "clat_p50_us", "clat_p99_us",
          "doorbells_per_io", "sq_doorbells_per_io", "cq_doorbells_per_io",
          "irqs_per_io", "cpu_vcpu_us_per_io", "cpu_iothread_us_per_io",
          "cpu_main_us_per_io", "cpu_other_us_per_io", "iothread_cores",
          "exits_per_io", "mmio_exits_per_io"]


def summarize(records):
    """One entry per configuration and depth: min, median and max of each
    figure over the runs (BENCH_REPEAT)."""
    out = []
    keys = []
    for r in records:
        if (r["config"], r["qd"]) not in keys:
            keys.append((r["config"], r["qd"]))
    for c, qd in keys:
        rs = [r for r in records if r["config"] == c and r["qd"] == qd]
        e = {"config": c, "qd": qd, "accel": rs[0]["accel"], "runs": len(rs)}
        for k in SPREAD:
            vals = sorted(r[k] for r in rs if r.get(k) is not None)
            if vals:
                e[k] = {"min": vals[0], "median": statistics.median(vals),
                        "max": vals[-1]}
        out.append(e)
    return out


def table(records):
    cols = [("config", "config", "%-29s"), ("qd", "qd", "%4d"),
            ("IOPS", "iops", "%9.0f"), ("lat50us", "lat_p50_us", "%7.1f"),
            ("lat99us", "lat_p99_us", "%7.1f"),
            ("sqdb/IO", "sq_doorbells_per_io", "%7.3f"),
            ("cqdb/IO", "cq_doorbells_per_io", "%7.3f"),
            ("irq/IO", "irqs_per_io", "%6.3f"),
            ("vcpu us/IO", "cpu_vcpu_us_per_io", "%10.1f"),
            ("iothr us/IO", "cpu_iothread_us_per_io", "%11.1f"),
            ("main us/IO", "cpu_main_us_per_io", "%10.1f"),
            ("other us/IO", "cpu_other_us_per_io", "%11.1f"),
            ("iothr cores", "iothread_cores", "%11.2f")]
    if any(r["accel"] == "kvm" for r in records):
        cols += [("exits/IO", "exits_per_io", "%8.2f"),
                 ("mmio/IO", "mmio_exits_per_io", "%7.2f")]
    out = []
    head = []
    for title, _, fmt in cols:
        width = int("".join(c for c in fmt.split(".")[0] if c.isdigit()))
        head.append(title.ljust(width) if "-" in fmt else title.rjust(width))
    out.append("  ".join(head))
    for r in records:
        row = []
        for _, key, fmt in cols:
            v = r.get(key)
            if v is None:
                width = int("".join(c for c in fmt.split(".")[0]
                                    if c.isdigit()))
                row.append("-".rjust(width))
            else:
                row.append(fmt % v)
        out.append("  ".join(row))
    return "\n".join(out)


def plot(records, path, accel):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("bench: python3-matplotlib missing: no plot (make deps installs it)")
        return
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    configs = []
    for r in records:
        if r["config"] not in configs:
            configs.append(r["config"])
    for ax, key, title in zip(axes, ["iops", "doorbells_per_io",
                                     "irqs_per_io"],
                              ["IOPS", "doorbell writes per IO",
                               "interrupts per IO"]):
        for c in configs:
            rs = sorted((r for r in records if r["config"] == c),
                        key=lambda r: r["qd"])
            ax.plot([r["qd"] for r in rs], [r[key] or 0 for r in rs],
                    marker="o", label=c)
        ax.set_xscale("log", base=2)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("iodepth")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("fio randread 4k, null-co backend, accel=%s%s" %
                 (accel, " (TCG: IOPS measure the emulator)"
                  if accel == "tcg" else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main():
    quick = os.environ.get("BENCH_QUICK") == "1"
    configs = env_list("BENCH_CONFIGS",
                       QUICK_CONFIGS if quick else DEFAULT_CONFIGS)
    if FILE_AIO not in ("io_uring", "native", "threads"):
        sys.exit("bench: BENCH_FILE_AIO=%s: io_uring, native or threads" %
                 FILE_AIO)
    for c in configs:
        if c not in CONFIGS:
            sys.exit("bench: unknown config %s (known: %s)" %
                     (c, ", ".join(CONFIGS)))
    qds = [int(q) for q in env_list("BENCH_QD",
                                    ["1", "16"] if quick else
                                    ["1", "4", "16", "64"])]
    opts = {"runtime": int(os.environ.get("BENCH_RUNTIME",
                                          "3" if quick else "10")),
            "ramp": int(os.environ.get("BENCH_RAMP", "1" if quick else "2")),
            "jobs": int(os.environ.get("BENCH_JOBS", "1")),
            "smp": int(os.environ.get("BENCH_SMP", "1")),
            "idle": int(os.environ.get("BENCH_IDLE", "2"))}

    accel = os.environ.get("BENCH_ACCEL")
    if accel:
        why = "BENCH_ACCEL=%s" % accel
    else:
        ok, why = nvdp_vm.kvm_runs_linux()
        accel = "kvm" if ok else "tcg"
    say("bench: accel=%s (%s)" % (accel, why))
    if accel == "tcg":
        say("bench: " + "=" * 66)
        say("bench: TCG: IOPS and latencies measure QEMU's CPU emulator, not")
        say("bench: the device. Doorbells/IO and irqs/IO carry over to KVM only")
        say("bench: where suppression is structural; see docs/benchmark.md.")
        say("bench: " + "=" * 66)
    say("bench: polling configurations: iothread %s%s" % (
        poll_opts(accel), "" if os.environ.get("BENCH_POLL_NS") else
        " (covers the TCG guest's submission gap)" if accel == "tcg" else
        " (QEMU's defaults)"))

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = os.environ.get("BENCH_OUT", os.path.join(nvdp_vm.TOP, "results"))
    outdir = os.path.join(base, stamp)
    os.makedirs(outdir)
    repeat = int(os.environ.get("BENCH_REPEAT", "1"))
    total = len(configs) * len(qds) * repeat
    done = [0]
    t0 = time.monotonic()

    def progress(name, qd):
        done[0] += 1
        el = time.monotonic() - t0
        left = el / max(done[0] - 1, 1) * (total - done[0] + 1) \
            if done[0] > 1 else None
        say("bench: [%d/%d] %s qd=%s%s" % (
            done[0], total, name, qd,
            "  (about %d min left)" % round(left / 60) if left else ""))

    records, idles = [], []
    for run in range(repeat):
        for c in configs:
            say("bench: %s: %s%s" % (c, describe(c, accel),
                                      " (run %d of %d)" % (run + 1, repeat)
                                      if repeat > 1 else ""))
            recs, idle = run_config(c, accel, qds, opts, outdir, progress)
            for r in recs:
                r["run"] = run + 1
                records.append(r)
            idle["run"] = run + 1
            idles.append(idle)
    summary = summarize(records)

    meta = {"date": stamp, "accel": accel, "accel_reason": why,
            "tcg_note": "IOPS are TCG figures: they measure the emulator"
            if accel == "tcg" else None,
            "configs": {c: describe(c, accel) for c in configs},
            "poll_max_ns": int(poll_ns(accel)),
            "poll_shrink": int(poll_shrink(accel)),
            "file_aio": FILE_AIO,
            "iothreads": IOTHREADS if any(c in MANY for c in configs)
            else None,
            "qemu": nvdp_vm.QEMU, "qemu_version": qemu_version(),
            "series": series_id(), "host": host_info(),
            "series_note": "the patches/ of this checkout; the QEMU binary "
            "came from NVME_DP_QEMU and may hold another series"
            if os.environ.get("NVME_DP_QEMU") else None,
            "guest_cpu": "host" if accel == "kvm" else "max",
            "guest_kernel": sorted({r.get("guest_kernel") for r in records
                                    if r.get("guest_kernel")}),
            "fio_version": sorted({r.get("fio_version") for r in records
                                   if r.get("fio_version")}),
            "options": opts,
            "command": "make bench " + " ".join(
                "%s=%s" % (k, os.environ[k]) for k in sorted(os.environ)
                if k.startswith("BENCH_"))}
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump({"meta": meta, "records": records, "summary": summary,
                   "idle": idles}, f, indent=1)
    rows = records if repeat == 1 else [
        dict((k, v["median"] if isinstance(v, dict) else v)
             for k, v in r.items()) for r in summary]
    plot(rows, os.path.join(outdir, "bench.png"), accel)
    text = table(rows)
    if repeat > 1:
        text += "\n(medians of %d runs; min and max in results.json " \
                "\"summary\")" % repeat
    per = iothreads_table(records)
    if per:
        text += "\n\n" + per
    text += "\n\n" + idle_table(idles)
    with open(os.path.join(outdir, "table.txt"), "w") as f:
        f.write(text + "\n")
    latest = os.path.join(base, "latest")
    if os.path.islink(latest):
        os.unlink(latest)
    os.symlink(stamp, latest)
    say("")
    if accel == "tcg":
        say("accel=tcg: IOPS below are TCG figures (they measure the emulator)")
    say(text)
    say("")
    say("bench: %s (results.json, table.txt, bench.png) in %.0f s" %
        (outdir, time.monotonic() - t0))


if __name__ == "__main__":
    main()
