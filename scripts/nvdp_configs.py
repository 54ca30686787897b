"""The device configurations, one name each, for every tool that runs them.

make bench (scripts/bench.py), make bench-device (scripts/bench_device.py),
the guest end-to-end tests (tests/guest_e2e.py) and the KVM test guest
(tests/kvm_guest.py) each run a subset of this table, under these names,
adding only what is theirs: the drive, the device's id and serial, the
poll parameters of a polling iothread.
"""

import collections

# kind: "nvme" or "virtio-blk"; opts: -device options beyond drive, id and
# serial; iothread: None, "nopoll" (poll-max-ns=0) or "poll" (the tool's
# poll parameters); about: what it is, for tables and help.
Config = collections.namedtuple("Config", "kind opts iothread about")

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
    "virtio-blk": Config("virtio-blk", "", None, "virtio-blk, its defaults"),
    "virtio-blk-iothread": Config("virtio-blk", "iothread=" + IOTHREAD_ID,
                                  "nopoll", "virtio-blk in an iothread, "
                                  "poll-max-ns=0"),
    "virtio-blk-iothread-poll": Config("virtio-blk",
                                       "iothread=" + IOTHREAD_ID, "poll",
                                       "virtio-blk in an iothread, polling "
                                       "(@POLL_NS@)"),
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
