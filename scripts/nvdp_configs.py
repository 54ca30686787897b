"""The device configurations, one name each, for every tool that runs them.

make bench (scripts/bench.py), make bench-device (scripts/bench_device.py),
the guest end-to-end tests (tests/guest_e2e.py) and the KVM test guest
(tests/kvm_guest.py) each run a subset of this table, under these names,
adding only what is theirs: the drive, the device's id and serial, the
poll parameters of a polling iothread.
"""

import collections
import json
import os

# kind: "nvme" or "virtio-blk"; opts: -device options beyond drive, id and
# serial; iothread: None, "nopoll" (poll-max-ns=0) or "poll" (the tool's
# poll parameters); about: what it is, for tables and help; backend: None
# (the tool's own disk: null-co in the benchmark, a raw image file in the
# guest tests) or "file" (a raw image file read through the host's I/O
# path with aio=FILE_AIO, O_DIRECT where its filesystem has it:
# file_blockdev()); iothreads: 1, or "many": the queues spread over
# IOTHREADS iothreads (or the tool's count) with iothread-vq-mapping,
# round-robin.
Config = collections.namedtuple("Config",
                                "kind opts iothread about backend iothreads",
                                defaults=(None, 1))

# How a "file" backend's requests reach the host: io_uring, which QEMU 10.2
# submits through the iothread's own fd monitor (aio_add_sqe()).
FILE_AIO = "io_uring"

IOTHREAD_ID = "iot0"
_IOT = ",iothread=" + IOTHREAD_ID
# how many iothreads a "many" configuration has unless the tool says
IOTHREADS = 2

CONFIGS = {
    "nvme-mmio": Config("nvme", "dbcs=off,ioeventfd=off", None,
                        "plain doorbells (dbcs=off, ioeventfd=off)"),
    "nvme-dbbuf": Config("nvme", "dbcs=on,ioeventfd=off", None,
                         "shadow doorbells (dbcs=on, ioeventfd=off): "
                         "upstream's default"),
    "nvme-ioeventfd": Config("nvme", "dbcs=on,ioeventfd=on", None,
                             "shadow doorbells and ioeventfd (dbcs=on, "
                             "ioeventfd=on)"),
    "nvme-irqfd": Config("nvme", "dbcs=on,ioeventfd=on,irq-eventfd=on", None,
                         "shadow doorbells, ioeventfd, interrupts through "
                         "per-vector eventfds (irq-eventfd=on)"),
    "nvme-iothread": Config("nvme", "dbcs=on,ioeventfd=on" + _IOT, "nopoll",
                            "shadow doorbells, ioeventfd, I/O queues in an "
                            "iothread (poll-max-ns=0)"),
    "nvme-iothread-mmio": Config("nvme", "dbcs=off,ioeventfd=on" + _IOT,
                                 "poll", "I/O queues in a polling iothread "
                                 "without shadow doorbells (dbcs=off)"),
    "nvme-iothread-irqfd": Config("nvme", "dbcs=on,ioeventfd=on,"
                                  "irq-eventfd=on" + _IOT, "nopoll",
                                  "as nvme-iothread, with irq-eventfd=on "
                                  "(KVM irqfd where available)"),
    "nvme-iothread-poll": Config("nvme", "dbcs=on,ioeventfd=on" + _IOT,
                                 "poll", "as nvme-iothread, the iothread "
                                 "polling the SQs (@POLL_NS@)"),
    "nvme-iothread-poll-irqfd": Config("nvme", "dbcs=on,ioeventfd=on,"
                                       "irq-eventfd=on" + _IOT, "poll",
                                       "as nvme-iothread-poll, with "
                                       "irq-eventfd=on (@POLL_NS@)"),
    "nvme-iothread-poll-file": Config("nvme", "dbcs=on,ioeventfd=on" + _IOT,
                                      "poll", "as nvme-iothread-poll, on a "
                                      "raw image file (aio=io_uring)",
                                      "file"),
    "nvme-iothreads-poll": Config("nvme", "dbcs=on,ioeventfd=on", "poll",
                                  "as nvme-iothread-poll, the I/O queue "
                                  "pairs over @IOTHREADS@ iothreads "
                                  "(iothread-vq-mapping, round-robin)",
                                  None, "many"),
    "virtio-blk": Config("virtio-blk", "", None, "virtio-blk, its defaults"),
    "virtio-blk-iothread": Config("virtio-blk", "iothread=" + IOTHREAD_ID,
                                  "nopoll", "virtio-blk in an iothread, "
                                  "poll-max-ns=0"),
    "virtio-blk-iothread-poll": Config("virtio-blk",
                                       "iothread=" + IOTHREAD_ID, "poll",
                                       "virtio-blk in an iothread, polling "
                                       "(@POLL_NS@)"),
    "virtio-blk-iothread-poll-file": Config("virtio-blk",
                                            "iothread=" + IOTHREAD_ID, "poll",
                                            "as virtio-blk-iothread-poll, on "
                                            "a raw image file (aio=io_uring)",
                                            "file"),
    "virtio-blk-iothreads-poll": Config("virtio-blk", "", "poll",
                                        "virtio-blk, its virtqueues over "
                                        "@IOTHREADS@ iothreads "
                                        "(iothread-vq-mapping, "
                                        "round-robin), polling (@POLL_NS@)",
                                        None, "many"),
}


def iothread_ids(name, count=None):
    """The ids of @name's iothreads: none, IOTHREAD_ID, or for a "many"
    configuration iot0 .. iot<@count - 1> (@count: default IOTHREADS)."""
    c = CONFIGS[name]
    if c.iothread is None:
        return []
    if c.iothreads != "many":
        return [IOTHREAD_ID]
    return ["iot%d" % i for i in range(count or IOTHREADS)]


def iothread_objects(name, poll, count=None):
    """The -object arguments of @name's iothreads, as a list of strings;
    @poll is the poll parameters ("poll-max-ns=...,poll-shrink=...") of a
    polling one."""
    c = CONFIGS[name]
    return ["iothread,id=%s,%s" % (i, "poll-max-ns=0"
                                   if c.iothread == "nopoll" else poll)
            for i in iothread_ids(name, count)]


def iothread_object(name, poll):
    """The -object argument of @name's one iothread, or None."""
    assert CONFIGS[name].iothreads != "many"
    objs = iothread_objects(name, poll)
    return objs[0] if objs else None


def _json_value(v):
    if v in ("on", "off"):
        return v == "on"
    if v.isdigit():
        return int(v)
    return v


def device(name, base, count=None):
    """-device argument of @name: @base (driver, drive, id...) + its opts;
    for a "many" configuration, in JSON, with iothread-vq-mapping (and, for
    virtio-blk, one virtqueue per iothread)."""
    c = CONFIGS[name]
    args = base + ("," + c.opts if c.opts else "")
    if c.iothreads != "many":
        return args
    parts = args.split(",")
    dev = {"driver": parts[0]}
    for p in parts[1:]:
        k, v = p.split("=", 1)
        dev[k] = _json_value(v)
    ids = iothread_ids(name, count)
    dev["iothread-vq-mapping"] = [{"iothread": i} for i in ids]
    if c.kind == "virtio-blk":
        dev["num-queues"] = len(ids)
    return json.dumps(dev, separators=(",", ":"))


def about(name, count=None):
    """What @name is, with its iothread count."""
    return CONFIGS[name].about.replace("@IOTHREADS@",
                                       str(count or IOTHREADS))


def qemu_args(name, base, poll, count=None):
    """-object (if any) and -device arguments of @name, as a list."""
    args = []
    for obj in iothread_objects(name, poll, count):
        args += ["-object", obj]
    return args + ["-device", device(name, base, count)]


def o_direct_works(path):
    """Whether @path (an existing file) can be opened with O_DIRECT (not
    on tmpfs, for one)."""
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
        return True
    except OSError:
        return False


def file_blockdev(img, aio=FILE_AIO):
    """-blockdev arguments of node d0: the raw image @img, read with @aio,
    cache.direct=on where @img's filesystem supports O_DIRECT."""
    direct = "on" if o_direct_works(img) else "off"
    return ["-blockdev", "driver=file,node-name=f0,filename=%s,aio=%s,"
            "cache.direct=%s" % (img, aio, direct),
            "-blockdev", "driver=raw,node-name=d0,file=f0"]
