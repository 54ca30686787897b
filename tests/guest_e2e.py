#!/usr/bin/python3
"""End-to-end tests in the Linux guest, one TAP line per case.

For every NVMe configuration of the benchmark, on a file-backed raw image
(read with the file driver's default aio=threads; nvme-iothread-poll-file
with aio=io_uring and O_DIRECT where the filesystem has it):
boot 1 checks that nvme id-ctrl reports Doorbell Buffer Config (OACS bit 8)
exactly when the configuration has it, then fio writes and verifies
(crc32c) with several block sizes at random offsets, at iodepth 1 and 32;
boot 2, a fresh QEMU on the same image, reads everything back and verifies
it again.  Any fio error or verify mismatch fails the case.

With the I/O queues in an iothread (nvme-iothread, poll-max-ns=0,
nvme-iothread-poll, polling, and nvme-iothread-poll-file, polling with
io_uring completions; nvme-iothread-mmio polls too but, without
shadow doorbells, is never polled), two more boots: the
stress boot resets the controller (/sys/class/nvme/nvme0/reset_controller)
repeatedly while fio writes and verifies, verifies again once the resets
are over, then runs fio verify while a blockdev-backup job (rate-limited,
so that it overlaps) copies the disk; the unplug boot removes the
controller with QMP device_del while fio runs: the guest must see it go,
QEMU must delete it (DEVICE_DELETED once the guest ejects the slot), stay
up and exit cleanly.

In boot 1 the host also live-migrates the VM while each fio job runs,
to a second QEMU on this host (-incoming, a unix socket) and on, back and
forth: every migration must complete, every job verify, the guest's
kernel log have no nvme timeout, abort or reset, and the last QEMU exit
cleanly; boot 2 then verifies, on a fresh QEMU, what was written across
the migrations.  The downtime QEMU reports for each migration is in the
case's name.

Environment: E2E_CONFIGS (comma list), NVME_DP_QEMU, NVME_DP_GUEST.
"""

import os
import select
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "scripts"))
import nvdp_configs  # noqa: E402
import nvdp_vm  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tap  # noqa: E402

NVME = "nvme,id=nvme0,drive=d0,serial=nvdp-e2e"
# polling with a window that covers the TCG guest's submission gaps
POLL = "poll-max-ns=1000000,poll-shrink=2"
# The NVMe configurations of the shared table: name -> (-device nvme
# options, has Doorbell Buffer Config, other arguments, backend, vCPUs);
# the ones over several iothreads ("many") get 2 vCPUs, so that Linux
# creates 2 I/O queue pairs, and fio jobs on both
NAMES = [n for n, c in nvdp_configs.CONFIGS.items() if c.kind == "nvme"]
CONFIGS = {}
for _n in NAMES:
    _extra = []
    for _obj in nvdp_configs.iothread_objects(_n, POLL):
        _extra += ["-object", _obj]
    CONFIGS[_n] = (nvdp_configs.device(_n, NVME),
                   "dbcs=on" in nvdp_configs.CONFIGS[_n].opts,
                   _extra, nvdp_configs.CONFIGS[_n].backend,
                   2 if nvdp_configs.CONFIGS[_n].iothreads == "many" else 1)
# the configurations that also get the stress and unplug boots
STRESS_CONFIGS = ["nvme-iothread", "nvme-iothread-poll",
                  "nvme-iothread-poll-file", "nvme-iothreads-poll"]
IMG_SIZE = 256 << 20

# name -> fio arguments; each job has its own region of the disk
JOBS = [
    ("4k-qd1", "--bs=4k --iodepth=1 --offset=0 --size=8M"),
    ("16k-qd32", "--bs=16k --iodepth=32 --offset=16M --size=32M"),
    ("mixed-qd32", "--bssplit=4k/40:32k/40:128k/20 --iodepth=32 "
                   "--offset=64M --size=32M"),
    ("512b-qd32", "--bs=512 --iodepth=32 --offset=128M --size=2M"),
]
# and with 2 vCPUs, one job on each (so on each I/O queue pair)
JOBS_2CPU = [
    ("2jobs-qd16", "--bs=4k --iodepth=16 --numjobs=2 --offset=160M "
                   "--offset_increment=16M --size=16M --cpus_allowed=0-1 "
                   "--cpus_allowed_policy=split"),
]

# The guest's /lib/nvdp.sh (guest/lib.sh) has nvdp_wait_disk, nvdp_mark
# and nvdp_fio_verify.
# With @MIGRATE@ = 1 the host live-migrates the VM while each job runs.
JOB = r"""
set -u
hostdo() { nvdp_mark "$1" "$1"; }
nvdp_wait_disk nvme0n1
echo "NVDP oacs $(nvme id-ctrl /dev/nvme0 | awk '$1 == "oacs" { print $3 }')"
run() {
	name=$1; shift
	if [ @MIGRATE@ = 1 ]; then
		nvdp_fio_verify $name nvme0n1 --randseed=4242 @MODE@ "$@" &
		pid=$!
		sleep 0.5
		hostdo migrate-$name
		wait $pid
	else
		nvdp_fio_verify $name nvme0n1 --randseed=4242 @MODE@ "$@"
	fi
}
@RUNS@
# completions (interrupts) of each I/O queue
echo "NVDP queue-irqs $(awk '$NF ~ /^nvme0q[1-9]/ { s = 0
	for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) s += $i; else break
	printf "%s=%d ", $NF, s }' /proc/interrupts)"
echo "NVDP nvme-timeouts $(dmesg | grep nvme | grep -c -i -E 'timeout|abort|reset')"
"""


# The host acts on "NVDP mark NAME" (starts a job, unplugs, asks QEMU) and
# answers "ack NAME" on the serial console: the guest goes on only then, so
# nothing the host asks QEMU races with the guest powering off.
HOSTDO = r"""
hostdo() { nvdp_mark "$1" "$1"; }
"""

STRESS_JOB = HOSTDO + r"""
set -u
ctrl=/sys/class/nvme/nvme0
nvdp_wait_disk nvme0n1
cpus=$(nproc)
# vfio NAME OFFSET-MiB SIZE-MiB ARGS...: a job per vCPU, each on its own
# part of the region
vfio() {
	name=$1 off=$2 size=$3
	shift 3
	if [ $cpus -gt 1 ]; then
		set -- --numjobs=$cpus --size=$((size / cpus))M \
			--offset_increment=$((size / cpus))M \
			--cpus_allowed=0-$((cpus - 1)) --cpus_allowed_policy=split "$@"
	else
		set -- --size=${size}M "$@"
	fi
	nvdp_fio_verify $name nvme0n1 --bs=4k --iodepth=16 --offset=${off}M "$@"
}
settle() {
	n=0
	while [ "$(cat $ctrl/state)" != live ] && [ $n -lt 300 ]; do
		sleep 0.1; n=$((n + 1))
	done
	echo "NVDP state $(cat $ctrl/state)"
}
# resets while fio writes and verifies
vfio resets 0 64 --randseed=77 --do_verify=1 &
pid=$!
i=0
while kill -0 $pid 2>/dev/null && [ $i -lt 20 ]; do
	sleep 0.3
	kill -0 $pid 2>/dev/null || break
	echo 1 > $ctrl/reset_controller && i=$((i + 1))
done
wait $pid
echo "NVDP resets $i"
settle
vfio reverify 0 64 --randseed=77 --verify_only=1
# a backup job copies the disk while fio writes and verifies
hostdo backup
vfio backup 96 16 --randseed=78 --do_verify=1
vfio backup-reverify 96 16 --randseed=78 --verify_only=1
hostdo backup-done
"""

UNPLUG_JOB = HOSTDO + r"""
set -u
dev=/dev/nvme0n1
nvdp_wait_disk nvme0n1
fio --name=unplug --filename=$dev --ioengine=libaio --direct=1 \
	--rw=randrw --bs=4k --iodepth=16 --time_based=1 --runtime=120 \
	--eta=never > /tmp/unplug.out 2>&1 &
pid=$!
sleep 2
hostdo unplug
n=0
while [ -e /sys/class/nvme/nvme0 ] && [ $n -lt 600 ]; do
	sleep 0.1; n=$((n + 1))
done
if [ -e /sys/class/nvme/nvme0 ]; then
	echo "NVDP unplug still-present"
else
	echo "NVDP unplug gone"
fi
hostdo unplug-seen
kill $pid 2>/dev/null
wait $pid
echo "NVDP fio-after-unplug rc=$?"
"""


def unecho(line):
    """The console echoes the host's "ack NAME" character by character: a
    line a background job prints meanwhile may land inside the echo
    ("ack migrate-5NVDP fio ..."); keep what starts at "NVDP "."""
    i = line.find("NVDP ")
    return line[i:] if i > 0 else line


def drain_console(sock, log):
    """The lines already on a console socket, without waiting for more."""
    buf = b""
    while select.select([sock], [], [], 0.2)[0]:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    for line in buf.decode("utf-8", "replace").splitlines():
        line = line.rstrip("\r")
        if log:
            log.write(line + "\n")
        yield line


def migrate_to(src, args, tmp, qemu=None):
    """Live-migrate @src's VM to a new QEMU (@qemu, or this one) with
    @args; returns it and query-migrate's answer on the source once done."""
    tmp = tempfile.mkdtemp(dir=tmp)         # its own socket paths
    sock = os.path.join(tmp, "mig.sock")
    dst = nvdp_vm.machine(args + ["-incoming", "defer"], qemu=qemu, tmp=tmp)
    dst.launch()
    nvdp_vm.qmp_cmd(dst, "migrate-incoming", uri="unix:" + sock)
    nvdp_vm.qmp_cmd(src, "migrate-set-parameters",
                    **{"max-bandwidth": 8 << 30})
    nvdp_vm.qmp_cmd(src, "migrate", uri="unix:" + sock)
    end = time.monotonic() + 120
    while True:
        info = nvdp_vm.qmp_cmd(src, "query-migrate")
        if info.get("status") in ("completed", "failed", "cancelled"):
            break
        if time.monotonic() > end:
            info["status"] = "timeout"
            break
        time.sleep(0.05)
    if info.get("status") == "completed":
        end = time.monotonic() + 60
        while nvdp_vm.qmp_cmd(dst, "query-status")["status"] != "running":
            if time.monotonic() > end:
                info["status"] = "destination-not-running"
                break
            time.sleep(0.05)
    return dst, info


def run_migrating(g, timeout, on_line):
    """Boot @g, hand each serial line to @on_line until QEMU exits; on
    "NVDP mark migrate..." live-migrate the VM to a new QEMU with the same
    arguments, go on with that one, and answer the mark there.

    Returns (error, exit status, query-migrate of each migration)."""
    done, error, rc = [], None, None
    try:
        g.start()
        vm = g.vm
        end = time.monotonic() + timeout
        reading = True
        while reading:
            reading = False
            for line in nvdp_vm.console_lines(vm.console_socket,
                                              end - time.monotonic(), g.log):
                if line.startswith("NVDP mark migrate"):
                    dst, info = migrate_to(vm, g.args, g.tmp)
                    done.append(info)
                    if info.get("status") != "completed":
                        error = error or "migration %d: %s" % (len(done),
                                                               info)
                        dst.shutdown(hard=True)
                        nvdp_vm.died(dst)
                        break
                    # what the guest printed on the source's console
                    # meanwhile (a fio job that ended)
                    for rest in drain_console(vm.console_socket, g.log):
                        on_line(unecho(rest))
                    vm.shutdown(hard=True)
                    vm = g.vm = dst
                    dst.console_socket.sendall(
                        ("ack %s\n" % line.split()[2]).encode())
                    reading = True
                    break
                if line.startswith("NVDP error"):
                    error = error or line
                else:
                    on_line(unecho(line))
        vm.wait(timeout=30)
        rc = vm.exitcode()
    except (TimeoutError, RuntimeError, EOFError, OSError) as e:
        error = error or str(e)
    finally:
        g.stop()
    return error, rc, done


def drive(g, timeout, on_line):
    """Boot @g, hand each serial line to @on_line until QEMU exits.

    Returns (error, exit status): the first "NVDP error" line or what went
    wrong, and None for a status QEMU did not get to."""
    error = None
    try:
        g.start()
        for line in g.lines(timeout):
            if line.startswith("NVDP error"):
                error = error or line
            else:
                on_line(line)
        return error, g.returncode
    except (TimeoutError, RuntimeError, EOFError, OSError) as e:
        return str(e), None
    finally:
        g.stop()


def stress(tap, name, img, devopts, extra, logs, backend=None, smp=1):
    log = os.path.join(logs, "e2e-%s-stress.log" % name)
    size = os.path.getsize(img)
    args = disk_args(img, devopts, extra, backend) + [
        "-blockdev", "driver=null-co,node-name=bk0,size=%d" % size]
    g = nvdp_vm.Guest(STRESS_JOB, args, log=log, smp=smp)
    fio, got = {}, {"resets": None, "state": None, "job": None}

    def on_line(line):
        if line.startswith("NVDP fio "):
            parts = line.split()
            fio[parts[2]] = dict(p.split("=") for p in parts[3:])
        elif line.startswith("NVDP resets "):
            got["resets"] = int(line.split()[2])
        elif line.startswith("NVDP state "):
            got["state"] = line.split()[2]
        elif line == "NVDP mark backup-done":
            got["job"] = g.qmp.cmd("query-jobs")
            g.ack("backup-done")
        elif line == "NVDP mark backup":
            # 16 MiB/s: the copy lasts while fio runs
            g.qmp.cmd("blockdev-backup", device="d0", target="bk0",
                      sync="full", speed=16 << 20, **{"job-id": "bk"})
            g.ack("backup")

    error, rc = drive(g, 600, on_line)
    resets, state, job = got["resets"], got["state"], got["job"]
    why = error or "see " + log
    tap.case(resets is not None and resets >= 5 and state == "live",
             "e2e %s: %s controller resets while fio ran, controller live "
             "after (%s)" % (name, resets, state), why)
    r = fio.get("resets", {})
    tap.case(r.get("bad") == "0", "e2e %s: no verify mismatch in fio "
             "during the resets (rc=%s)" % (name, r.get("rc")), why)
    r = fio.get("reverify", {})
    tap.case(r.get("rc") == "0" and r.get("bad") == "0", "e2e %s: reverify "
             "once the resets settled, 0 mismatches" % name, why)
    ok = all(fio.get(j, {}).get("rc") == "0" and
             fio.get(j, {}).get("bad") == "0"
             for j in ("backup", "backup-reverify"))
    tap.case(ok and job is not None, "e2e %s: fio verify while "
             "blockdev-backup runs, 0 mismatches (job at the end: %s)" %
             (name, job), why)
    tap.case(rc == 0, "e2e %s: QEMU exits cleanly after the stress boot "
             "(status %s)" % (name, rc), why)


def unplug(tap, name, img, devopts, extra, logs, backend=None, smp=1):
    log = os.path.join(logs, "e2e-%s-unplug.log" % name)
    g = nvdp_vm.Guest(UNPLUG_JOB, disk_args(img, devopts, extra, backend),
                      log=log, smp=smp)
    got = {"seen": None, "left": None, "alive": None, "deleted": None,
           "after": None, "fio": None}

    def on_line(line):
        if line == "NVDP mark unplug":
            g.qmp.cmd("device_del", id="nvme0")
            g.ack("unplug")
        elif line.startswith("NVDP unplug "):
            got["seen"] = line.split()[2]
        elif line == "NVDP mark unplug-seen":
            # the guest's driver lets go of the controller before the
            # guest ejects the slot: QEMU deletes it when the eject comes
            t = time.monotonic()
            ev = g.qmp.wait_event("DEVICE_DELETED", 60, device="nvme0")
            got["deleted"] = ev is not None
            got["after"] = time.monotonic() - t
            got["alive"] = g.qmp.cmd("query-status")["status"]
            got["left"] = [p["name"] for p in
                           g.qmp.cmd("qom-list", path="/machine/peripheral")]
            g.ack("unplug-seen")
        elif line.startswith("NVDP fio-after-unplug "):
            got["fio"] = line.split()[2]

    error, rc = drive(g, 300, on_line)
    seen, left, alive = got["seen"], got["left"], got["alive"]
    why = error or "see " + log
    tap.case(seen == "gone" and got["deleted"] and left is not None and
             "nvme0" not in left,
             "e2e %s: device_del during fio: the guest sees the controller "
             "go (%s), QEMU deletes it (DEVICE_DELETED %s, %s s after the "
             "guest saw it go) and no longer has it" %
             (name, seen, got["deleted"], got["after"] is not None and
              "%.1f" % got["after"]), why)
    tap.case(alive == "running" and got["fio"] is not None and rc == 0,
             "e2e %s: QEMU keeps running after the unplug, the guest's "
             "fio ends (%s) and QEMU exits cleanly (%s, status %s)" %
             (name, got["fio"], alive, rc), why)


def disk_args(img, devopts, extra, backend=None):
    """A "file" @backend reads @img with aio=io_uring (and O_DIRECT where
    it can), the others with the file driver's defaults (aio=threads)."""
    if backend == "file":
        disk = nvdp_configs.file_blockdev(img)
    else:
        disk = ["-blockdev", "driver=file,node-name=f0,filename=%s" % img,
                "-blockdev", "driver=raw,node-name=d0,file=f0"]
    return list(extra) + disk + ["-device", devopts]


def jobs_for(smp):
    return JOBS + (JOBS_2CPU if smp > 1 else [])


def boot(img, devopts, extra, verify_only, log, backend=None, smp=1,
         migrate=False):
    runs = "\n".join("run %s %s" % (name, args)
                     for name, args in jobs_for(smp))
    job = JOB.replace("@RUNS@", runs).replace(
        "@MODE@", "--verify_only=1" if verify_only else "--do_verify=1")
    job = job.replace("@MIGRATE@", "1" if migrate else "0")
    devargs = disk_args(img, devopts, extra, backend)
    g = nvdp_vm.Guest(job, devargs, log=log, smp=smp)
    out = {"oacs": None, "fio": {}, "error": None, "queue_irqs": None,
           "timeouts": None, "migrations": [], "rc": None}

    def on_line(line):
        if line.startswith("NVDP oacs "):
            out["oacs"] = line.split()[2]
        elif line.startswith("NVDP fio "):
            parts = line.split()
            kv = dict(p.split("=") for p in parts[3:])
            out["fio"][parts[2]] = kv
        elif line.startswith("NVDP queue-irqs"):
            out["queue_irqs"] = dict(p.split("=") for p in
                                     line.split()[2:])
        elif line.startswith("NVDP nvme-timeouts "):
            out["timeouts"] = int(line.split()[2])

    out["error"], out["rc"], out["migrations"] = run_migrating(g, 300,
                                                               on_line)
    return out


def main():
    names = os.environ.get("E2E_CONFIGS")
    names = names.split(",") if names else list(CONFIGS)
    logs = os.environ.get("E2E_LOGS", tempfile.gettempdir())
    os.makedirs(logs, exist_ok=True)
    for name in names:
        devopts, dbbuf, extra, backend, smp = CONFIGS[name]
        fd, img = tempfile.mkstemp(prefix="nvdp-e2e-", suffix=".raw")
        os.ftruncate(fd, IMG_SIZE)
        os.close(fd)
        try:
            for phase, verify_only in (("write+verify", False),
                                       ("reverify-after-reboot", True)):
                log = os.path.join(logs, "e2e-%s-%s.log" % (name, phase))
                r = boot(img, devopts, extra, verify_only, log, backend,
                         smp, migrate=not verify_only)
                if phase == "write+verify":
                    ok = [m for m in r["migrations"]
                          if m.get("status") == "completed"]
                    tap.case(len(ok) == len(jobs_for(smp)),
                             "e2e %s: %d of %d live migrations, one during "
                             "each fio job, completed (downtime ms: %s; "
                             "total ms: %s)" %
                             (name, len(ok), len(jobs_for(smp)),
                              [m.get("downtime") for m in ok],
                              [m.get("total-time") for m in ok]),
                             r["error"] or "see " + log)
                    tap.case(r["timeouts"] == 0 and r["rc"] == 0,
                             "e2e %s: no nvme timeout, abort or reset in "
                             "the guest's log after the migrations (%s), "
                             "QEMU exits cleanly (status %s)" %
                             (name, r["timeouts"], r["rc"]),
                             r["error"] or "see " + log)
                    oacs = r["oacs"]
                    ok = oacs is not None and \
                        bool(int(oacs, 16) & 0x100) == dbbuf
                    tap.case(ok, "e2e %s: nvme id-ctrl OACS %s has Doorbell "
                             "Buffer Config %s" % (name, oacs,
                                                   "set" if dbbuf else "clear"),
                             r["error"] or "see " + log)
                if smp > 1:
                    q = r["queue_irqs"] or {}
                    busy = sorted(k for k, v in q.items() if int(v) > 0)
                    tap.case(len(busy) >= 2, "e2e %s: %s: %d vCPUs, "
                             "completions on %d I/O queues (%s)" %
                             (name, phase, smp, len(busy), q),
                             r["error"] or "see " + log)
                for job, _ in jobs_for(smp):
                    res = r["fio"].get(job)
                    ok = res is not None and res["rc"] == "0" and \
                        res["bad"] == "0"
                    tap.case(ok, "e2e %s: %s %s, 0 mismatches" %
                             (name, phase, job),
                             r["error"] or "fio %s (see %s)" % (res, log))
            if name in STRESS_CONFIGS:
                stress(tap, name, img, devopts, extra, logs, backend, smp)
                unplug(tap, name, img, devopts, extra, logs, backend, smp)
        finally:
            os.unlink(img)
    # Control: the same verify on an image nobody wrote must fail, or the
    # cases above prove nothing.
    fd, img = tempfile.mkstemp(prefix="nvdp-e2e-", suffix=".raw")
    os.ftruncate(fd, IMG_SIZE)
    os.close(fd)
    try:
        log = os.path.join(logs, "e2e-control.log")
        r = boot(img, CONFIGS[names[0]][0], CONFIGS[names[0]][2], True, log)
        bad = [j for j, _ in JOBS
               if r["fio"].get(j, {}).get("rc", "0") != "0"]
        tap.case(len(bad) == len(JOBS), "e2e control: reverify of a "
                 "never-written image fails in every job (%s)" %
                 ", ".join(bad), r["error"] or "see " + log)
    finally:
        os.unlink(img)
    return tap.finish()


if __name__ == "__main__":
    sys.exit(main())
