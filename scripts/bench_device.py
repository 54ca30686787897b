#!/usr/bin/python3
"""make bench-device: what the device model costs per command, no guest.

Runs build/qemu-build/tests/qtest/blk-bench (a patch of the series) for
each configuration, backend and queue depth: QEMU under -accel qtest with
its RAM in a shared file, and a host driver in a thread of blk-bench that
runs the data path in that memory as Linux's nvme and virtio-blk drivers
do (EventIdx rule for every doorbell; a doorbell is a qtest MMIO write).
Writes results.json (one record per configuration, backend and depth),
table.txt and, with python3-matplotlib, bench-device.png, to
build/bench-device/ (or BENCH_OUT).

Figures per record: commands per second; QEMU CPU time per command
(microseconds, from /proc, by thread: main loop, iothread, other: worker
threads, io_uring workers); SQ doorbells, CQ doorbells and interrupts per
command.  The driver is a separate process: its CPU is not QEMU's.

BENCH_VALGRIND=1 adds a deterministic figure to each record: instructions
per command of QEMU's threads (main loop, iothread, other) for
BENCH_VG_COUNT commands (default 2000) under callgrind, collected only
between blk-bench's start and end marks, and the backend-neutral
figure: those minus what the backend itself does for every device alike
(null-co's qemu_iovec_memset; instr_backend_per_cmd,
instr_neutral_per_cmd, "neutral" in the table).  It runs a second build,
build/valgrind-build (scripts/build.sh --valgrind: no io_uring, which
valgrind 3.19 cannot run QEMU with), so the io_uring backends have no
such figure; it takes about 10 s a record.  BENCH_VG_KEEP=DIR keeps the
callgrind dumps in DIR/CONFIG-QD/ for callgrind_annotate.

Environment: BENCH_CONFIGS, BENCH_BACKENDS, BENCH_QD (comma lists),
BENCH_COUNT (commands per run and queue, default 20000), BENCH_BS (bytes
each command moves, 4096 to 262144 in 4 KiB pages, default 4096: a
buffer of contiguous guest pages, a PRP list for NVMe, one descriptor
for virtio-blk), BENCH_QUEUES
(queue pairs, a driver thread each, default 1), BENCH_IOTHREADS (the
iothreads of the "-iothreads" configurations, default 2; not in the
default run), BENCH_OUT, NVME_DP_BUILD (the build directory, default
build/qemu-build), NVME_DP_VG_BUILD and NVME_DP_TREE (the valgrind build
and the tree it builds, to compare two trees' instructions).  Each
record has every iothread's CPU per command
(cpu_iothreads_us_per_cmd); "iothr" in the table is their sum.
make check runs a short version: tests/bench_device_smoke.py.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nvdp_configs  # noqa: E402

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("NVME_DP_BUILD",
                       os.path.join(TOP, "build", "qemu-build"))
BENCH = os.path.join(BUILD, "tests", "qtest", "blk-bench")
QEMU = os.environ.get("NVME_DP_QEMU",
                      os.path.join(BUILD, "qemu-system-x86_64"))

# As make bench under TCG: here a doorbell (a qtest round trip, tens of
# microseconds) outlasts QEMU's default 32 us window, which then never
# covers the host's next batch (one doorbell per batch at every depth).
POLL = "poll-max-ns=1000000,poll-shrink=2"

# Configurations of the shared table that blk-bench drives (it sets up
# Doorbell Buffer Config itself): name -> (device, -device options, extra
# QEMU arguments, blk-bench options)
NAMES = ["nvme-ioeventfd", "nvme-irqfd", "nvme-iothread", "nvme-iothread-irqfd",
         "nvme-iothread-poll", "virtio-blk", "virtio-blk-iothread",
         "virtio-blk-iothread-poll", "nvme-iothreads-poll",
         "virtio-blk-iothreads-poll"]
# The "-iothreads" configurations: over BENCH_IOTHREADS iothreads; they
# are not in the default run, and show something with BENCH_QUEUES > 1
IOTHREADS = int(os.environ.get("BENCH_IOTHREADS",
                               str(nvdp_configs.IOTHREADS)))
MANY = [n for n in NAMES if nvdp_configs.CONFIGS[n].iothreads == "many"]
CONFIGS = {}
for _n in NAMES:
    _c = nvdp_configs.CONFIGS[_n]
    _objs = nvdp_configs.iothread_objects(_n, POLL, IOTHREADS)
    _opts = _c.opts
    if _n in MANY:
        # JSON members for blk-bench, which adds driver, addr and drive
        _dev = json.loads(nvdp_configs.device(
            _n, "nvme" if _c.kind == "nvme" else "virtio-blk-pci", IOTHREADS))
        del _dev["driver"]
        _opts = json.dumps(_dev, separators=(",", ":"))
    CONFIGS[_n] = (_c.kind, _opts, " ".join("-object " + o for o in _objs),
                   [])
# "NAME+ic": an NVMe configuration with Interrupt Coalescing set by the
# driver (Feature 08h = BENCH_COALESCE, default 0x107: 8 entries or
# 100 us); blk-bench then moves the VM clock on with real time while it
# waits, so that the Aggregation Time runs.  Not in the default run.
COALESCE = int(os.environ.get("BENCH_COALESCE", "0x107"), 0)
for _n in NAMES:
    if CONFIGS[_n][0] == "nvme":
        CONFIGS[_n + "+ic"] = CONFIGS[_n][:3] + (["--coalesce",
                                                  str(COALESCE)],)

TMPFS = "/dev/shm"
IMG_BLOCKS = 16384                      # 64 MiB of 4 KiB blocks

BACKENDS = {
    "null": "driver=null-co,read-zeroes=on,size=1073741824",
    "file-io_uring": "driver=file,filename=%s,aio=io_uring,"
                     "cache.direct=off",
    "file-io_uring-direct": "driver=file,filename=%s,aio=io_uring,"
                            "cache.direct=on",
    "file-native": "driver=file,filename=%s,aio=native,cache.direct=on",
    "file-threads": "driver=file,filename=%s,aio=threads,cache.direct=on",
}
QDS = [1, 4, 16, 64, 128]


def say(msg):
    print(msg, file=sys.stderr, flush=True)


# bytes each command moves (blk-bench --bs)
BS = int(os.environ.get("BENCH_BS", "4096"))


def bs_opts():
    """blk-bench's --bs, left out at its default for older builds"""
    return [] if BS == 4096 else ["--bs", str(BS)]


def env_list(name, default):
    v = os.environ.get(name)
    return [x for x in v.split(",") if x] if v else default


def image(backend, outdir):
    """The file a file backend uses, written in full (a read of a hole
    never reaches the disk): on tmpfs for file-io_uring, in @outdir (the
    build disk) for the cache.direct=on backends."""
    if backend == "null":
        return None
    d = TMPFS if backend == "file-io_uring" else outdir
    path = os.path.join(d, "bench-device-%s.img" % backend)
    chunk = bytes(range(256)) * 4096
    with open(path, "wb") as f:
        for _ in range(IMG_BLOCKS * 4096 // len(chunk)):
            f.write(chunk)
    if "cache.direct=on" in BACKENDS[backend]:
        try:
            fd = os.open(path, os.O_RDWR | os.O_DIRECT)
            os.close(fd)
        except OSError as e:
            os.unlink(path)
            raise RuntimeError("%s: no O_DIRECT (%s)" % (d, e.strerror))
    return path


def run(config, drive, qd, count, rw="read", warmup=None, queues=1):
    dev, devopts, extra, opts = CONFIGS[config]
    if dev == "virtio-blk" and queues > 1:
        # a virtqueue per driver thread (its default: one per vCPU, 1)
        if devopts.startswith("{"):
            d = json.loads(devopts)
            d["num-queues"] = queues
            devopts = json.dumps(d, separators=(",", ":"))
        else:
            devopts += "%snum-queues=%d" % ("," if devopts else "", queues)
    cmd = [BENCH, "--device", dev, "--devopts", devopts, "--extra", extra,
           "--drive", drive, "--qd", str(qd), "--count", str(count),
           "--rw", rw, "--blocks", str(IMG_BLOCKS)] + opts + bs_opts()
    if queues > 1:
        cmd += ["--queues", str(queues)]
    if warmup is not None:
        cmd += ["--warmup", str(warmup)]
    env = dict(os.environ, QTEST_QEMU_BINARY=QEMU)
    p = subprocess.run(cmd, env=env, text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=600)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError("blk-bench failed (%d): %s" %
                           (p.returncode, p.stderr.strip()[-800:]))
    return json.loads(lines[-1])


VG_BUILD = os.environ.get("NVME_DP_VG_BUILD",
                          os.path.join(TOP, "build", "valgrind-build"))
VG_TREE = os.environ.get("NVME_DP_TREE", os.path.join(TOP, "build", "qemu"))


def callgrind(config, drive, qd, count):
    """Instructions per command by thread, from callgrind's dumps."""
    dev, devopts, extra, opts = CONFIGS[config]
    out = tempfile.mkdtemp(prefix="bench-vg-")
    prefix = ("valgrind --tool=callgrind --instr-atstart=no "
              "--separate-threads=yes --callgrind-out-file=%s/cg.%%p" % out)
    cmd = [os.path.join(VG_BUILD, "tests", "qtest", "blk-bench"),
           "--device", dev, "--devopts", devopts, "--extra", extra,
           "--drive", drive, "--qd", str(qd), "--count", str(count),
           "--warmup", "200", "--blocks", str(IMG_BLOCKS), "--pause",
           "--qemu-prefix", prefix] + opts + bs_opts()
    env = dict(os.environ, QTEST_QEMU_BINARY=os.path.join(
        VG_BUILD, "qemu-system-x86_64"))
    p = subprocess.Popen(cmd, env=env, text=True, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    for line in p.stdout:
        word = line.split()
        if word[:1] == ["start"]:
            subprocess.run(["callgrind_control", "-i", "on", word[1]],
                           stdout=subprocess.DEVNULL, check=True)
        elif word[:1] == ["end"]:
            subprocess.run(["callgrind_control", "-d", "measured", word[1]],
                           stdout=subprocess.DEVNULL, check=True)
        else:
            continue
        p.stdin.write("\n")
        p.stdin.flush()
    if p.wait():
        raise RuntimeError("blk-bench under callgrind failed (%d)" %
                           p.returncode)
    instr = {"main": 0, "iothread": 0, "other": 0}
    keep = os.environ.get("BENCH_VG_KEEP")
    if keep:
        dest = os.path.join(keep, "%s-%d" % (config, qd))
        os.makedirs(dest, exist_ok=True)
        for f in glob.glob(os.path.join(out, "cg.*.1-*")):
            shutil.copy(f, dest)
    backend = 0
    for f in glob.glob(os.path.join(out, "cg.*.1-*")):
        with open(f) as fh:
            text = fh.read()
        n = int(re.search(r"^summary: (\d+)", text, re.M).group(1))
        if "iothread_run" in text:
            instr["iothread"] += n
        elif "main_loop_wait" in text:
            instr["main"] += n
        else:
            instr["other"] += n
        backend += backend_instr(f)
    for f in glob.glob(os.path.join(out, "*")):
        os.unlink(f)
    os.rmdir(out)
    per_cmd = {k: v / count for k, v in instr.items()}
    per_cmd["backend"] = backend / count
    return per_cmd


# What the backend itself does, which every device pays alike: null-co's
# read-zeroes fills each buffer (qemu_iovec_memset, inclusive)
BACKEND_WORK = ["qemu_iovec_memset"]


def backend_instr(path):
    """Inclusive instructions of BACKEND_WORK in one callgrind dump."""
    p = subprocess.run(["callgrind_annotate", "--inclusive=yes",
                        "--threshold=100", path], text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    total = 0
    for fn in BACKEND_WORK:
        m = re.search(r"^\s*([\d,]+) .*:%s(?:'\d+)? " % re.escape(fn),
                      p.stdout, re.M)
        if m:
            total += int(m.group(1).replace(",", ""))
    return total


def record(config, backend, qd, r):
    c = r["commands"]
    cpu = r["thread_cpu"]
    main = sum(v for k, v in cpu.items() if k.startswith("qemu-system"))
    # the device's iothreads: iot0, and iot1... of the "-iothreads" ones
    iothreads = {k[3:]: v for k, v in sorted(cpu.items())
                 if k.startswith("IO iot")}
    io = sum(iothreads.values())
    other = max(0.0, sum(cpu.values()) - main - io)
    return {
        "config": config, "device": CONFIGS[config][0], "backend": backend,
        "interrupt_coalescing": "0x%x" % COALESCE
                                if config.endswith("+ic") else None,
        "qd": qd, "bs": BS, "queues": r.get("queues", 1),
        "iothreads": len(iothreads), "commands": c, "seconds": r["seconds"],
        "cpu_iothreads_us_per_cmd": {k: v * 1e6 / c
                                     for k, v in iothreads.items()},
        "cmds_per_s": c / r["seconds"],
        "cpu_us_per_cmd": (main + io + other) * 1e6 / c,
        "cpu_main_us_per_cmd": main * 1e6 / c,
        "cpu_iothread_us_per_cmd": io * 1e6 / c,
        "cpu_other_us_per_cmd": other * 1e6 / c,
        "sq_doorbells_per_cmd": r["sq_doorbells"] / c,
        "cq_doorbells_per_cmd": r["cq_doorbells"] / c,
        "irqs_per_cmd": r["interrupts"] / c,
        "errors": r["errors"], "bad_data": r["bad_data"],
        "thread_cpu_s": cpu,
    }


def table(records):
    cols = [("config", "%-25s", "config"), ("backend", "%-13s", "backend"),
            ("qd", "%4d", "qd"), ("cmds_per_s", "%9.0f", "cmd/s"),
            ("cpu_us_per_cmd", "%7.2f", "cpu/cmd"),
            ("cpu_main_us_per_cmd", "%7.2f", "main"),
            ("cpu_iothread_us_per_cmd", "%7.2f", "iothr"),
            ("cpu_other_us_per_cmd", "%7.2f", "other"),
            ("sq_doorbells_per_cmd", "%6.3f", "sq-db"),
            ("cq_doorbells_per_cmd", "%6.3f", "cq-db"),
            ("irqs_per_cmd", "%6.3f", "irqs")]
    width = [len(f % (0 if f[-1] in "df" else "")) for _, f, _ in cols]
    out = ["  ".join(h.ljust(w) if f.startswith("%-") else h.rjust(w)
                     for (_, f, h), w in zip(cols, width))]
    for r in records:
        line = "  ".join(f % r[k] for k, f, _ in cols)
        if "instr_per_cmd" in r:
            line += "  %8.0f  %8.0f" % (r["instr_per_cmd"],
                                        r["instr_neutral_per_cmd"])
        out.append(line)
    if any("instr_per_cmd" in r for r in records):
        out[0] += "  %8s  %8s" % ("instr", "neutral")
    out.append("(cpu: microseconds of QEMU thread time per command: main "
               "loop, iothread, other threads; commands of %d bytes)" % BS)
    many = [r for r in records if len(r.get("cpu_iothreads_us_per_cmd")
                                      or {}) > 1]
    if many:
        out.append("")
        out.append("per iothread (us of CPU per command), queues:")
        for r in many:
            out.append("%-25s %-13s qd %3d, %d queues: %s" % (
                r["config"], r["backend"], r["qd"], r["queues"], "  ".join(
                    "%s %.2f" % kv for kv in
                    r["cpu_iothreads_us_per_cmd"].items())))
    return "\n".join(out)


def plot(records, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("bench-device: python3-matplotlib missing: no plot")
        return
    backends = sorted({r["backend"] for r in records})
    keys = [("cmds_per_s", "commands/s"), ("cpu_us_per_cmd", "CPU us/cmd"),
            ("sq_doorbells_per_cmd", "SQ doorbells/cmd"),
            ("irqs_per_cmd", "interrupts/cmd")]
    fig, axes = plt.subplots(len(backends), len(keys),
                             figsize=(5 * len(keys), 4 * len(backends)),
                             squeeze=False)
    for row, b in enumerate(backends):
        for col, (key, title) in enumerate(keys):
            ax = axes[row][col]
            for c in CONFIGS:
                rs = sorted((r for r in records
                             if r["config"] == c and r["backend"] == b),
                            key=lambda r: r["qd"])
                if rs:
                    ax.plot([r["qd"] for r in rs], [r[key] for r in rs],
                            marker="o", label=c)
            ax.set_xscale("log", base=2)
            ax.set_ylim(bottom=0)
            ax.set_title("%s (%s)" % (title, b))
            ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main():
    if not os.path.exists(BENCH):
        say("bench-device: %s missing: make build" % BENCH)
        return 2
    outdir = os.environ.get("BENCH_OUT",
                            os.path.join(TOP, "build", "bench-device"))
    os.makedirs(outdir, exist_ok=True)
    configs = env_list("BENCH_CONFIGS", [c for c in CONFIGS
                                         if c not in MANY and
                                         not c.endswith("+ic")])
    queues = int(os.environ.get("BENCH_QUEUES", "1"))
    backends = env_list("BENCH_BACKENDS", list(BACKENDS))
    qds = [int(q) for q in env_list("BENCH_QD", [str(q) for q in QDS])]
    count = int(os.environ.get("BENCH_COUNT", "20000"))
    valgrind = os.environ.get("BENCH_VALGRIND") == "1"
    vg_count = int(os.environ.get("BENCH_VG_COUNT", "2000"))
    if valgrind:
        say("bench-device: building %s (no io_uring, for valgrind)" %
            VG_BUILD)
        subprocess.run([os.path.join(TOP, "scripts", "build.sh"),
                        "--valgrind", "--tree", VG_TREE,
                        "--builddir", VG_BUILD,
                        "qemu-system-x86_64", "tests/qtest/blk-bench"],
                       stdout=subprocess.DEVNULL, check=True)
    records = []
    start = time.time()
    for b in backends:
        try:
            img = image(b, outdir)
        except RuntimeError as e:
            say("bench-device: backend %s skipped: %s" % (b, e))
            continue
        drive = BACKENDS[b] % img if img else BACKENDS[b]
        for c in configs:
            for qd in qds:
                r = record(c, b, qd, run(c, drive, qd, count,
                                         queues=queues))
                if valgrind and "aio=io_uring" not in drive:
                    vg = callgrind(c, drive, qd, vg_count)
                    r["instr_per_cmd"] = (vg["main"] + vg["iothread"] +
                                          vg["other"])
                    r["instr_main_per_cmd"] = vg["main"]
                    r["instr_iothread_per_cmd"] = vg["iothread"]
                    r["instr_other_per_cmd"] = vg["other"]
                    # the backend-neutral figure: the device's and the
                    # block layer's, not the backend's own work
                    r["instr_backend_per_cmd"] = vg["backend"]
                    r["instr_neutral_per_cmd"] = (r["instr_per_cmd"] -
                                                  vg["backend"])
                    say("bench-device: %-25s %-13s qd %3d: %.0f "
                        "instructions/cmd" % (c, b, qd, r["instr_per_cmd"]))
                records.append(r)
                say("bench-device: %-25s %-13s qd %3d: %8.0f cmd/s, "
                    "%6.2f us CPU/cmd, sq-db %.3f, irqs %.3f" %
                    (c, b, qd, r["cmds_per_s"], r["cpu_us_per_cmd"],
                     r["sq_doorbells_per_cmd"], r["irqs_per_cmd"]))
        if img:
            os.unlink(img)
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump({"command": "make bench-device", "count": count,
                   "host_cpus": os.cpu_count(), "records": records}, f,
                  indent=1)
    t = table(records)
    with open(os.path.join(outdir, "table.txt"), "w") as f:
        f.write(t + "\n")
    plot(records, os.path.join(outdir, "bench-device.png"))
    print(t)
    say("bench-device: %d runs in %.0f s; results.json, table.txt in %s" %
        (len(records), time.time() - start, outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
