#!/usr/bin/python3
"""End-to-end tests in the Linux guest, one TAP line per case.

For every NVMe configuration of the benchmark, on a file-backed raw image:
boot 1 checks that nvme id-ctrl reports Doorbell Buffer Config (OACS bit 8)
exactly when the configuration has it, then fio writes and verifies
(crc32c) with several block sizes at random offsets, at iodepth 1 and 32;
boot 2, a fresh QEMU on the same image, reads everything back and verifies
it again.  Any fio error or verify mismatch fails the case.

Environment: E2E_CONFIGS (comma list), NVME_DP_QEMU, NVME_DP_GUEST.
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "scripts"))
import nvdp_vm  # noqa: E402

NVME = "nvme,id=nvme0,drive=d0,serial=nvdp-e2e"
CONFIGS = {
    "nvme-mmio": (NVME + ",dbcs=off,ioeventfd=off", False),
    "nvme-dbbuf": (NVME + ",dbcs=on,ioeventfd=off", True),
    "nvme-ioeventfd": (NVME + ",dbcs=on,ioeventfd=on", True),
    "nvme-irqfd": (NVME + ",dbcs=on,ioeventfd=on,irq-eventfd=on", True),
}
IMG_SIZE = 256 << 20

# name -> fio arguments; each job has its own region of the disk
JOBS = [
    ("4k-qd1", "--bs=4k --iodepth=1 --offset=0 --size=8M"),
    ("16k-qd32", "--bs=16k --iodepth=32 --offset=16M --size=32M"),
    ("mixed-qd32", "--bssplit=4k/40:32k/40:128k/20 --iodepth=32 "
                   "--offset=64M --size=32M"),
    ("512b-qd32", "--bs=512 --iodepth=32 --offset=128M --size=2M"),
]

JOB = r"""
set -u
dev=/dev/nvme0n1
n=0
while [ ! -b $dev ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
[ -b $dev ] || { echo "NVDP error no $dev"; exit 1; }
echo "NVDP oacs $(nvme id-ctrl /dev/nvme0 | awk '$1 == "oacs" { print $3 }')"
run() {
	name=$1; shift
	fio --name=$name --filename=$dev --ioengine=libaio --direct=1 \
		--rw=randwrite --verify=crc32c --verify_fatal=1 --randseed=4242 \
		--eta=never @MODE@ "$@" > /tmp/$name.out 2>&1
	rc=$?
	bad=$(grep -c -i -E 'verify.*fail|bad magic|mismatch|bad header' \
		/tmp/$name.out)
	echo "NVDP fio $name rc=$rc bad=$bad"
	[ $rc -eq 0 ] || sed 's/^/NVDP-out /' /tmp/$name.out | tail -n 20
}
@RUNS@
"""


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def case(self, ok, name, why=""):
        self.n += 1
        if not ok:
            self.failed += 1
        print("%s %d - %s%s" % ("ok" if ok else "not ok", self.n, name,
                                "" if ok else "  # " + why), flush=True)


def boot(img, devopts, verify_only, log):
    runs = "\n".join("run %s %s" % (name, args) for name, args in JOBS)
    job = JOB.replace("@RUNS@", runs).replace(
        "@MODE@", "--verify_only=1" if verify_only else "--do_verify=1")
    devargs = ["-blockdev", "driver=file,node-name=f0,filename=%s" % img,
               "-blockdev", "driver=raw,node-name=d0,file=f0",
               "-device", devopts]
    g = nvdp_vm.Guest(job, devargs, log=log)
    out = {"oacs": None, "fio": {}, "error": None}
    try:
        g.start()
        for line in g.lines(300):
            if line.startswith("NVDP oacs "):
                out["oacs"] = line.split()[2]
            elif line.startswith("NVDP fio "):
                parts = line.split()
                kv = dict(p.split("=") for p in parts[3:])
                out["fio"][parts[2]] = kv
            elif line.startswith("NVDP error"):
                out["error"] = line
    except (TimeoutError, RuntimeError, EOFError, OSError) as e:
        out["error"] = str(e)
    finally:
        g.stop()
    return out


def main():
    names = os.environ.get("E2E_CONFIGS")
    names = names.split(",") if names else list(CONFIGS)
    logs = os.environ.get("E2E_LOGS", tempfile.gettempdir())
    os.makedirs(logs, exist_ok=True)
    tap = Tap()
    for name in names:
        devopts, dbbuf = CONFIGS[name]
        fd, img = tempfile.mkstemp(prefix="nvdp-e2e-", suffix=".raw")
        os.ftruncate(fd, IMG_SIZE)
        os.close(fd)
        try:
            for phase, verify_only in (("write+verify", False),
                                       ("reverify-after-reboot", True)):
                log = os.path.join(logs, "e2e-%s-%s.log" % (name, phase))
                r = boot(img, devopts, verify_only, log)
                if phase == "write+verify":
                    oacs = r["oacs"]
                    ok = oacs is not None and \
                        bool(int(oacs, 16) & 0x100) == dbbuf
                    tap.case(ok, "e2e %s: nvme id-ctrl OACS %s has Doorbell "
                             "Buffer Config %s" % (name, oacs,
                                                   "set" if dbbuf else "clear"),
                             r["error"] or "see " + log)
                for job, _ in JOBS:
                    res = r["fio"].get(job)
                    ok = res is not None and res["rc"] == "0" and \
                        res["bad"] == "0"
                    tap.case(ok, "e2e %s: %s %s, 0 mismatches" %
                             (name, phase, job),
                             r["error"] or "fio %s (see %s)" % (res, log))
        finally:
            os.unlink(img)
    # Control: the same verify on an image nobody wrote must fail, or the
    # cases above prove nothing.
    fd, img = tempfile.mkstemp(prefix="nvdp-e2e-", suffix=".raw")
    os.ftruncate(fd, IMG_SIZE)
    os.close(fd)
    try:
        log = os.path.join(logs, "e2e-control.log")
        r = boot(img, CONFIGS[names[0]][0], True, log)
        bad = [j for j, _ in JOBS
               if r["fio"].get(j, {}).get("rc", "0") != "0"]
        tap.case(len(bad) == len(JOBS), "e2e control: reverify of a "
                 "never-written image fails in every job (%s)" %
                 ", ".join(bad), r["error"] or "see " + log)
    finally:
        os.unlink(img)
    print("1..%d" % tap.n)
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
