"""The device configurations, one name each, for every tool that runs them.

make bench (scripts/bench.py), make bench-device (scripts/bench_device.py),
the guest end-to-end tests (tests/guest_e2e.py) and the KVM test guest
(tests/kvm_guest.py) each run a subset of this table, under these names,
adding only what is theirs: the drive, the device's id and serial, the
poll parameters of a polling iothread.
"""

import collections
import os

# kind: "nvme" or "virtio-blk"; opts: -device options beyond drive, id and
# serial; iothread: None, "nopoll" (poll-max-ns=0) or "poll" (the tool's
# poll parameters); about: what it is, for tables and help; backend: None
# (the tool's own disk: null-co in the benchmark, a raw image file in the
# guest tests) or "file" (a raw image file read through the host's I/O
# path with aio=FILE_AIO, O_DIRECT where its filesystem has it:
# file_blockdev()).
Config = collections.namedtuple("Config", "kind opts iothread about backend",
                                defaults=(None,))

# How a "file" backend's requests reach the host: io_uring, which QEMU 10.2
# submits through the iothread's own fd monitor (aio_add_sqe()).
FILE_AIO = "io_uring"

IOTHREAD_ID = "iot0"
_IOT = ",iothread=" + IOTHREAD_ID

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
}


def iothread_object(name, poll):
    """The -object argument of @name's iothread, or None; @poll is the
    poll parameters ("poll-max-ns=...,poll-shrink=...") of a polling one."""
    c = CONFIGS[name]
    if c.iothread is None:
        return None
    return "iothread,id=%s,%s" % (IOTHREAD_ID, "poll-max-ns=0"
                                  if c.iothread == "nopoll" else poll)


def device(name, base):
    """-device argument of @name: @base (driver, drive, id...) + its opts."""
    opts = CONFIGS[name].opts
    return base + ("," + opts if opts else "")


def qemu_args(name, base, poll):
    """-object (if any) and -device arguments of @name, as a list."""
    obj = iothread_object(name, poll)
    return (["-object", obj] if obj else []) + ["-device", device(name, base)]


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
