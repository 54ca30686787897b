#!/usr/bin/python3
"""A Linux guest moves between this series' QEMU and QEMU 11.1 as Debian
ships it, while fio writes and verifies: one TAP line per case.

For each configuration (shadow doorbells in the main loop; the I/O
queues in a polling iothread; over two polling iothreads), boot 1 runs
the fio jobs of tests/guest_e2e.py and live-migrates the VM during each
job, in turns to QEMU 11.1 (the peer, NVME_DP_PEER: what
scripts/stock_qemu.sh prints) and back to this QEMU: the peer runs the
controller without the data plane options, which are host-side and in
neither stream.  Every migration must complete, every job verify, the
guest's kernel log have no nvme timeout, abort or reset, and the last
QEMU exit cleanly; boot 2, on this QEMU again, verifies what was written.
Both sides run pc-i440fx-10.2, which 11.1 has too.

Without a peer every case is a skip that says so (make deps installs
it).  Environment: PEER_CONFIGS (comma list), NVME_DP_PEER, NVME_DP_QEMU,
NVME_DP_GUEST.
"""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import guest_e2e as e2e  # noqa: E402
import nvdp_vm  # noqa: E402
import tap  # noqa: E402

MACHINE = "pc-i440fx-10.2"
CONFIGS = ["nvme-dbbuf", "nvme-iothread-poll", "nvme-iothreads-poll"]
HOST_SIDE = ("iothread", "iothread-vq-mapping", "irq-eventfd")


def peer_args(args):
    """@args of this QEMU for the peer: no iothread objects, and the
    controller without the options that are the host's"""
    out, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == "-object" and args[i + 1].startswith("iothread,"):
            skip = True
            continue
        if i and args[i - 1] == "-device" and a.startswith("{"):
            dev = json.loads(a)
            if dev.get("driver") == "nvme":
                for k in HOST_SIDE:
                    dev.pop(k, None)
                a = json.dumps(dev)
        elif i and args[i - 1] == "-device" and a.startswith("nvme,"):
            a = ",".join(p for p in a.split(",")
                         if p.split("=")[0] not in HOST_SIDE)
        out.append(a)
    return out


def main():
    peer = os.environ.get("NVME_DP_PEER")
    names = os.environ.get("PEER_CONFIGS")
    names = names.split(",") if names else CONFIGS
    logs = os.environ.get("E2E_LOGS", tempfile.gettempdir())
    os.makedirs(logs, exist_ok=True)
    if not peer:
        for name in names:
            tap.case(True, "peer %s" % name,
                     skip="no QEMU 11.1 to migrate with (make deps "
                     "installs Debian's, scripts/stock_qemu.sh)")
        return tap.finish()

    # every other migration goes to the peer, with its own arguments
    hops = {"n": 0}
    own_migrate_to = e2e.migrate_to

    def migrate_to(src, args, tmp):
        hops["n"] += 1
        to_peer = hops["n"] % 2
        print("# migration %d: to %s" % (hops["n"],
              "QEMU 11.1 (%s)" % peer if to_peer else "this QEMU"),
              flush=True)
        if to_peer:
            return own_migrate_to(src, peer_args(args), tmp, qemu=peer)
        return own_migrate_to(src, args, tmp)
    e2e.migrate_to = migrate_to

    for name in names:
        devopts, dbbuf, extra, backend, smp = e2e.CONFIGS[name]
        extra = ["-machine", MACHINE] + list(extra)
        fd, img = tempfile.mkstemp(prefix="nvdp-peer-", suffix=".raw")
        os.ftruncate(fd, e2e.IMG_SIZE)
        os.close(fd)
        try:
            for phase, verify_only in (("write+verify", False),
                                       ("reverify-after-reboot", True)):
                log = os.path.join(logs, "peer-%s-%s.log" % (name, phase))
                hops["n"] = 0
                r = e2e.boot(img, devopts, extra, verify_only, log, backend,
                             smp, migrate=not verify_only)
                if not verify_only:
                    jobs = len(e2e.jobs_for(smp))
                    ok = [m for m in r["migrations"]
                          if m.get("status") == "completed"]
                    tap.case(len(ok) == jobs,
                             "peer %s: %d of %d live migrations, one during "
                             "each fio job, in turns to QEMU 11.1 and back, "
                             "completed (downtime ms: %s)" %
                             (name, len(ok), jobs,
                              [m.get("downtime") for m in ok]),
                             r["error"] or "see " + log)
                    tap.case(r["timeouts"] == 0 and r["rc"] == 0,
                             "peer %s: no nvme timeout, abort or reset in "
                             "the guest's log (%s), QEMU exits cleanly "
                             "(status %s)" % (name, r["timeouts"], r["rc"]),
                             r["error"] or "see " + log)
                for job, _ in e2e.jobs_for(smp):
                    res = r["fio"].get(job)
                    ok = res is not None and res["rc"] == "0" and \
                        res["bad"] == "0"
                    tap.case(ok, "peer %s: %s %s, 0 mismatches" %
                             (name, phase, job),
                             r["error"] or "fio %s (see %s)" % (res, log))
        finally:
            os.unlink(img)
    return tap.finish()


if __name__ == "__main__":
    sys.exit(main())
