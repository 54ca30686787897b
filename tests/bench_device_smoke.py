#!/usr/bin/python3
"""make check's short run of the guest-less device benchmark (blk-bench).

TAP on stdout.  Asserts only what is exact whatever the host's speed:
  - every command completes with the data it should: each device writes
    a pattern over a file on tmpfs and reads it back, nvme also over
    aio=native (and the check can fail: the same read-back against
    null-co, which reads zeros, must find every block wrong);
  - nvme with shadow doorbells and no polling, queue depth 1: one SQ
    doorbell per command (the EventIdx rule asks for each one) and no CQ
    doorbell (the CQ never fills); virtio-blk likewise one notification
    per command;
  - nvme-iothread-poll at depths 4 and 16: at most 0.02 SQ doorbells
    per command (a second run decides if the first misses: scheduling);
  - nvme-iothread with Interrupt Coalescing (blk-bench --coalesce): the
    data read back right at depth 16 (how many interrupts it saves is not
    exact here, where the driver reaps by polling: the qtests count them);
  - make bench-device's own files (BENCH_CONFIGS/QD/COUNT cut down).
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
sys.path.insert(0, os.path.join(TOP, "scripts"))
import bench_device as bd  # noqa: E402


def run(name, config, drive, qd, count, rw="read"):
    try:
        return bd.run(config, drive, qd, count, rw=rw)
    except Exception as e:              # noqa: BLE001
        case(False, name, str(e)[-300:])
        return None


def main():
    if not os.path.exists(bd.BENCH):
        case(False, "blk-bench built", bd.BENCH + " missing")
        return finish()
    tmp = tempfile.mkdtemp(prefix="nvdp-bd-", dir=bd.TMPFS)
    img = os.path.join(tmp, "verify.img")
    with open(img, "wb") as f:
        f.truncate(bd.IMG_BLOCKS * 4096)
    filedrive = bd.BACKENDS["file-io_uring"] % img
    tmp2 = tempfile.mkdtemp(prefix="nvdp-bd-native-", dir=bd.BUILD)
    null = bd.BACKENDS["null"]

    for config in ["nvme-ioeventfd", "nvme-iothread", "nvme-iothread-poll",
                   "virtio-blk", "virtio-blk-iothread"]:
        name = "%s: 4000 blocks written and read back at depth 16" % config
        r = run(name, config, filedrive, 16, 4000, rw="verify")
        if r:
            case(r["errors"] == 0 and r["bad_data"] == 0 and
                 r["commands"] == 4000, name,
                 "errors %d, bad data %d" % (r["errors"], r["bad_data"]))

    # two queues, a driver thread each, over two iothreads: the data is
    # right and both iothreads worked
    for config in ["nvme-iothreads-poll", "virtio-blk-iothreads-poll"]:
        name = "%s: 2 queues over 2 iothreads, 4000 blocks each written " \
               "and read back at depth 16, both iothreads busy" % config
        try:
            r = bd.run(config, filedrive, 16, 4000, rw="verify", queues=2)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            case(False, name, str(e))
            continue
        cpu = r["thread_cpu"]
        case(r["errors"] == 0 and r["bad_data"] == 0 and
             r["commands"] == 8000 and r.get("queues") == 2 and
             cpu.get("IO iot0", 0) > 0 and cpu.get("IO iot1", 0) > 0, name,
             "errors %d, bad data %d, commands %d, iothread CPU %s" %
             (r["errors"], r["bad_data"], r["commands"],
              {k: v for k, v in cpu.items() if k.startswith("IO ")}))

    # aio=native (linux-aio, O_DIRECT): in an iothread nvme batches an SQ
    # pass's submissions, and completions reaped at submission are posted
    # at once
    try:
        native = bd.BACKENDS["file-native"] % bd.image("file-native", tmp2)
    except RuntimeError as e:
        native = None
        print("# aio=native not checked: %s" % e)
    if native:
        for config in ["nvme-ioeventfd", "nvme-iothread"]:
            name = "%s, aio=native: 4000 blocks written and read back at " \
                   "depth 16" % config
            r = run(name, config, native, 16, 4000, rw="verify")
            if r:
                case(r["errors"] == 0 and r["bad_data"] == 0 and
                     r["commands"] == 4000, name,
                     "errors %d, bad data %d" % (r["errors"], r["bad_data"]))

    name = "the read-back check finds wrong data (null-co reads zeros)"
    r = run(name, "nvme-ioeventfd", null, 4, 500, rw="verify")
    if r:
        case(r["bad_data"] == 500, name, "bad data %d of 500" % r["bad_data"])

    name = "nvme, shadow doorbells, depth 1: 1 SQ doorbell per command, " \
           "no CQ doorbell"
    r = run(name, "nvme-ioeventfd", null, 1, 2000)
    if r:
        case(r["sq_doorbells"] == 2000 and r["cq_doorbells"] == 0, name,
             "sq %d, cq %d for 2000" % (r["sq_doorbells"],
                                        r["cq_doorbells"]))

    name = "virtio-blk, event index, depth 1: 1 notification per command"
    r = run(name, "virtio-blk", null, 1, 2000)
    if r:
        case(r["sq_doorbells"] == 2000, name,
             "%d for 2000" % r["sq_doorbells"])

    # Polling, depth >= 4: the SQ is polled and the host rings only when
    # a poll window ended with no work, which takes the host's thread
    # being off its CPU for the whole window (1 ms here): issue 14's
    # target, at most 0.02 SQ doorbells per command.  A second run decides
    # when the first missed it (another process took the CPU); a device
    # that stops polling rings for every batch and fails both.
    for qd in (4, 16):
        name = "nvme-iothread-poll, depth %d: at most 0.02 SQ doorbells " \
               "per command" % qd
        ratios = []
        for attempt in range(2):
            r = run(name, "nvme-iothread-poll", null, qd, 20000)
            if not r:
                break
            ratios.append(r["sq_doorbells"] / r["commands"])
            if r["errors"] or ratios[-1] <= 0.02:
                break
        if r:
            case(r["errors"] == 0 and ratios[-1] <= 0.02, name,
                 "errors %d, SQ doorbells/cmd %s" %
                 (r["errors"], ", ".join("%.4f" % x for x in ratios)))

    # Interrupt Coalescing: threshold 7 (8 entries), time 255 (25.5 ms)
    bd.CONFIGS["nvme-iothread+ic"] = (bd.CONFIGS["nvme-iothread"][:3] +
                                      (["--coalesce", str(0xff07)],))
    name = ("nvme-iothread+ic: 4000 blocks written and read back at depth 16 "
            "with Interrupt Coalescing")
    r = run(name, "nvme-iothread+ic", filedrive, 16, 4000, rw="verify")
    if r:
        case(r["errors"] == 0 and r["bad_data"] == 0 and
             r["commands"] == 4000, name,
             "errors %d, bad data %d" % (r["errors"], r["bad_data"]))
    out = tempfile.mkdtemp(prefix="nvdp-bd-out-")
    env = dict(os.environ, BENCH_OUT=out, BENCH_COUNT="2000",
               BENCH_QD="1,16", BENCH_BACKENDS="null",
               BENCH_CONFIGS="nvme-ioeventfd,nvme-iothread-poll,virtio-blk")
    p = subprocess.run([os.path.join(TOP, "scripts", "bench_device.py")],
                       env=env, text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    name = "make bench-device writes results.json and table.txt"
    try:
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        recs = res["records"]
        ok = (p.returncode == 0 and len(recs) == 6 and
              os.path.exists(os.path.join(out, "table.txt")) and
              all(r["cmds_per_s"] > 0 and r["cpu_us_per_cmd"] > 0
                  for r in recs))
        case(ok, name, "rc %d, %d records" % (p.returncode, len(recs)))
    except (OSError, ValueError, KeyError) as e:
        case(False, name, "%s; %s" % (e, p.stderr[-300:]))

    os.unlink(img)
    os.rmdir(tmp)
    shutil.rmtree(tmp2, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
