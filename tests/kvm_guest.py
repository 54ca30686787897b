#!/usr/bin/python3
"""Run the freestanding NVMe test guest (tests/kvm-guest) under TCG and KVM.

The guest programs MSI-X, creates an I/O queue pair, writes and reads back
blocks one at a time and waits for every completion interrupt with hlt;
then it masks the vector, completes a write while masked, retargets the
entry and unmasks it.  Under TCG it checks the device end to end.  Under
KVM (where /dev/kvm can run it) it also checks, from QMP query-stats
sampled at the guest's marks, that with shadow doorbells and ioeventfd the
I/O loop makes no MMIO exit to userspace.  With irq-eventfd it checks from
QEMU's trace who raised the interrupts: under KVM the irqfd (the main-loop
handler runs only for the completion made while the vector was masked, the
route follows the retargeted entry), under TCG the main-loop handler.
With the I/O queues in an iothread, it also samples the device's SQ
doorbell counter at the marks: without polling the guest must ring for
every submission; with the iothread polling (poll-max-ns=1 ms,
poll-shrink=2) the figure is printed, not checked: the disk is a file read
through the io_uring fd monitor, and while a read is in the kernel the
AioContext leaves poll mode to wait for it, so how many submissions find
the device polling is timing (from almost none ringing to all of them
seen here under TCG).
Where KVM cannot run it, the KVM cases are reported as skipped.  On a
KVM that emulates every instruction in software (module kvm_pvm, or no
vmx/svm flag in /proc/cpuinfo) the measured loop runs and is checked, and
the masking step is reported as skipped: there the interrupt left pending
while the vector was masked never reaches the guest's local APIC.  The
guest bounds every wait with its LAPIC timer, so a lost interrupt fails in
seconds and names its step.

TAP on stdout.  Environment: NVME_DP_QEMU, KVM_GUEST_IOS.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import case, finish  # noqa: E402
sys.path.insert(0, os.path.join(TOP, "scripts"))
import nvdp_configs  # noqa: E402
import nvdp_vm  # noqa: E402

SRC = os.path.join(TOP, "tests", "kvm-guest")
OUT = os.path.join(TOP, "build", "kvm-guest")
ELF = os.path.join(OUT, "nvme-kvm-guest.elf")
IOS = int(os.environ.get("KVM_GUEST_IOS", "200"))

# The NVMe configurations of the shared table the test guest runs: name,
# -device nvme options, guest options ("dbbuf": it sets up Doorbell Buffer
# Config), -object (an iothread, polling with a window that covers the
# guest's gaps under TCG)
POLL = "poll-max-ns=1000000,poll-shrink=2"
CASES = [(n, nvdp_configs.CONFIGS[n].opts,
          "dbbuf" if "dbcs=on" in nvdp_configs.CONFIGS[n].opts else "",
          nvdp_configs.iothread_object(n, POLL))
         for n in ["nvme-mmio", "nvme-ioeventfd", "nvme-irqfd",
                   "nvme-iothread", "nvme-iothread-poll"]]



TRACES = ("pci_nvme_irq_vector_read", "pci_nvme_irqfd_attach",
          "pci_nvme_irqfd_detach", "pci_nvme_irq_route_add",
          "pci_nvme_irq_route_update", "pci_nvme_irq_route_release")


def trace_counts(path):
    """Per trace event, how many times it fired for MSI-X vector 1."""
    counts = dict.fromkeys(TRACES, 0)
    with open(path, errors="replace") as f:
        for line in f:
            for ev in TRACES:
                if ev + " " in line and re.search(r"vector 1\b", line):
                    counts[ev] += 1
    return counts


def run(accel, devopts, append, img, timeout, obj=None):
    """Boot the guest; returns (exit status, lines, samples at marks).

    samples["trace"] holds trace_counts() of the run."""
    tmp = tempfile.mkdtemp(prefix="nvdp-kg-")
    trace_path = os.path.join(tmp, "trace.log")
    argv = ["-nodefaults", "-no-user-config", "-machine", "pc",
            "-accel", accel,
            "-kernel", ELF, "-append", "ios=%d sync %s" % (IOS, append),
            "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
            "-blockdev", "driver=file,node-name=d0,filename=%s" % img,
            "-device", "nvme,id=nvme0,drive=d0,serial=kvm-guest," + devopts,
            "-D", trace_path]
    if obj:
        argv += ["-object", obj]
    for ev in TRACES:
        argv += ["-trace", ev]
    vm = nvdp_vm.machine(argv, tmp=tmp)
    lines, samples = [], {}
    try:
        vm.launch()
        for line in nvdp_vm.console_lines(vm.console_socket, timeout):
            line = line.strip()
            lines.append(line)
            if line.startswith("NVDP mark "):
                name = line.split()[2]
                samples[name] = {"sq_db": nvdp_vm.qmp_cmd(
                    vm, "qom-get", path="/machine/peripheral/nvme0",
                    property="x-sq-doorbell-writes")}
                if accel == "kvm":
                    stats = nvdp_vm.qmp_cmd(vm, "query-stats", target="vcpu")
                    samples[name].update({
                        k: sum(st["value"] for v in stats
                               for st in v["stats"] if st["name"] == k)
                        for k in ("exits", "mmio_exits")})
                vm.console_socket.sendall(b"g")
        vm.wait(timeout=30)
    except Exception as e:           # launch, QMP, console: all reported
        lines.append("ERROR %s" % e)
    finally:
        try:
            vm.shutdown(hard=True)
        except Exception:
            pass
        if os.path.exists(trace_path):
            samples["trace"] = trace_counts(trace_path)
        shutil.rmtree(tmp, ignore_errors=True)
    return vm.exitcode(), lines, samples


def result(lines):
    """(ios, irqs, retargeted) from the guest's last line."""
    for line in lines:
        if line.startswith("NVDP ok "):
            kv = dict(p.split("=") for p in line.split()[2:])
            return int(kv["ios"]), int(kv["irqs"]), int(kv["retargeted"])
    return None, None, None


def irq_path(accel, devopts, tr):
    """'' if the trace shows the interrupt path expected, else why not."""
    if not tr:
        return "no trace log"
    iothread = "iothread=" in devopts
    if "irq-eventfd=on" not in devopts and not iothread:
        fired = [ev for ev in TRACES if tr.get(ev)]
        return "irq-eventfd off, yet %s" % fired if fired else ""
    reads, attach = tr["pci_nvme_irq_vector_read"], tr["pci_nvme_irqfd_attach"]
    if accel == "kvm-nomask" and "irq-eventfd=on" in devopts:
        # no masking step: the irqfd carries every interrupt
        if reads > 2 or attach < 1:
            return "trace %s" % tr
        return ""
    if accel == "tcg" or "irq-eventfd=on" not in devopts:
        # under TCG, or in an iothread without irq-eventfd (its eventfds, no
        # irqfd binding), every completion interrupt goes through the
        # main-loop handler
        if attach or reads < IOS:
            return "handler ran %d times for %d I/Os, irqfd attached %d" % (
                reads, IOS, attach)
        return ""
    # KVM: the irqfd carries the I/O loop; the handler only sees the write
    # completed while vector 1 was masked; unmasking re-attaches the irqfd
    # with the retargeted message
    if reads > 2 or attach < 2 or tr["pci_nvme_irqfd_detach"] < 1 or \
            tr["pci_nvme_irq_route_update"] < 1:
        return "trace %s" % tr
    return ""


def doorbells(name, s, ios):
    """'' if the SQ doorbells per I/O of an iothread case are as expected."""
    if "iothread" not in name:
        return ""
    if "start" not in s or "end" not in s:
        return "no doorbell samples"
    db = (s["end"]["sq_db"] - s["start"]["sq_db"]) / ios
    if name.endswith("-poll"):
        return ""   # printed only, see the docstring
    return "" if db >= 0.9 else "SQ doorbells/IO %.3f without polling" % db


def sq_db_per_io(s, ios):
    if "start" not in s or "end" not in s or not ios:
        return -1
    return (s["end"]["sq_db"] - s["start"]["sq_db"]) / ios


def software_kvm():
    """Why /dev/kvm is a software KVM, or None for hardware virtualisation."""
    if os.path.exists("/sys/module/kvm_pvm"):
        return "KVM is software virtualisation here (kvm_pvm)"
    try:
        with open("/proc/cpuinfo") as f:
            flags = set()
            for line in f:
                if line.startswith("flags"):
                    flags.update(line.split(":", 1)[1].split())
    except OSError:
        return None
    if not flags & {"vmx", "svm"}:
        return "KVM is software virtualisation here (no vmx/svm in /proc/cpuinfo)"
    return None


def kvm_usable(img):
    """None when -accel kvm runs the guest, else why not."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "no usable /dev/kvm on this host"
    rc, lines, _ = run("kvm", "ioeventfd=off", "", img, 60)
    if not any(line.startswith("NVDP start") for line in lines):
        return "-accel kvm does not run the guest (%s)" % " | ".join(lines[-2:])
    return None


def main():
    subprocess.run(["make", "-s", "-C", SRC, "OUT=" + OUT], check=True,
                   stdout=sys.stderr)
    fd, img = tempfile.mkstemp(prefix="nvdp-kg-", suffix=".raw")
    os.ftruncate(fd, 64 << 20)
    os.close(fd)
    try:
        for name, devopts, append, obj in CASES:
            rc, lines, s = run("tcg", devopts, append, img, 120, obj)
            ios, irqs, moved = result(lines)
            ok = rc == 1 and ios == IOS and irqs is not None and irqs >= ios
            why = "exit %s: %s" % (rc, " | ".join(lines[-4:]))
            if ok:
                why = irq_path("tcg", devopts, s.get("trace", {})) or \
                    doorbells(name, s, ios)
                ok = not why
            case(ok, "kvm-guest tcg %s: %s verified I/Os, one interrupt each "
                 "(irqs=%s), masked vector pending then retargeted (%s)%s%s" % (
                     name, IOS, irqs, moved,
                     ", main-loop handler raised them"
                     if "irq-eventfd=on" in devopts or obj else "",
                     ", SQ doorbells/IO %.3f%s" % (
                         sq_db_per_io(s, ios), " (printed, not checked)"
                         if name.endswith("-poll") else " (about 1 expected)")
                     if obj else ""), why)

        no_kvm = kvm_usable(img)
        soft = None if no_kvm else software_kvm()
        for name, devopts, append, obj in CASES:
            title = "kvm-guest kvm %s: verified I/Os%s%s" % (
                name, ", no MMIO exit to userspace per I/O"
                if "ioeventfd=on" in devopts else "",
                ", interrupts through the irqfd, not the main loop"
                if "irq-eventfd=on" in devopts else "")
            if no_kvm:
                case(False, title, skip=no_kvm)
                continue
            if soft:
                append += " nomask"
            rc, lines, s = run("kvm", devopts, append, img, 300, obj)
            ios, irqs, moved = result(lines)
            ok = rc == 1 and ios == IOS and "start" in s and "end" in s
            detail, why = "", "exit %s: %s" % (rc, " | ".join(lines[-4:]))
            if ok:
                mmio = (s["end"]["mmio_exits"] - s["start"]["mmio_exits"]) / ios
                exits = (s["end"]["exits"] - s["start"]["exits"]) / ios
                tr = s.get("trace", {})
                detail = " (exits/IO %.2f, mmio_exits/IO %.3f, " \
                    "SQ doorbells/IO %.3f, main-loop irq handler runs %d)" % (
                        exits, mmio, sq_db_per_io(s, ios),
                        tr.get("pci_nvme_irq_vector_read", -1))
                if "ioeventfd=on" in devopts and mmio >= 0.05:
                    ok, why = False, "mmio_exits/IO %.3f" % mmio
                elif irq_path("kvm-nomask" if soft else "kvm", devopts, tr):
                    ok, why = False, irq_path("kvm-nomask" if soft else "kvm",
                                              devopts, tr)
                elif doorbells(name, s, ios):
                    ok, why = False, doorbells(name, s, ios)
            case(ok, title + detail, why)
            if soft:
                case(False, "kvm-guest kvm %s: masked vector pending, then "
                     "retargeted" % name, skip=soft + ": a pending MSI-X "
                     "interrupt does not reach the guest after unmasking")
    finally:
        os.unlink(img)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
