"""Run the nvme-dataplane guest under QEMU: launch, QMP, serial protocol.

QEMU runs as a QEMUMachine of the pinned tree's own python/qemu (launch,
QMP, events), its serial console on a socket.  The guest's /init
(guest/init.sh) runs a shell job handed in through fw_cfg and writes lines
starting with "NVDP " on the serial console; a job's nvdp_mark (guest/lib.sh)
asks the host to act or sample and waits for its "ack" on the console.
"""

import os
import select
import shutil
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUEST = os.environ.get("NVME_DP_GUEST", os.path.join(TOP, "build", "guest"))
QEMU = os.environ.get("NVME_DP_QEMU", os.path.join(TOP, "build", "qemu-build",
                                                   "qemu-system-x86_64"))
APPEND = "console=ttyS0 quiet tsc=reliable panic=-1 mitigations=off"


def qemu_python(qemu=None):
    """The python/ directory of the QEMU tree @qemu was built from (its
    build directory's config-host.mak names it): the pinned tree's own
    qemu.machine and qemu.qmp, whatever tree the binary comes from."""
    mak = os.path.join(os.path.dirname(os.path.abspath(qemu or QEMU)),
                       "config-host.mak")
    with open(mak) as f:
        for line in f:
            if line.startswith("SRC_PATH="):
                return os.path.join(line.split("=", 1)[1].strip(), "python")
    raise RuntimeError("%s names no SRC_PATH" % mak)


def machine(args, qemu=None, tmp=None):
    """A QEMUMachine (python/qemu/machine of the pinned tree) for @qemu with
    @args, its serial console on a socket; not launched yet."""
    # python/qemu of this tree, also for a QEMU built elsewhere (a peer)
    own = qemu and os.path.exists(os.path.join(os.path.dirname(qemu),
                                               "config-host.mak"))
    path = qemu_python(qemu if own else None)
    if path not in sys.path:
        sys.path.insert(0, path)
    from qemu.machine import QEMUMachine  # pylint: disable=import-error
    vm = QEMUMachine(qemu or QEMU, args=args, name="nvdp",
                     base_temp_dir=tmp or tempfile.gettempdir())
    vm.set_console()
    return vm


def died(vm):
    """If @vm's QEMU was killed by a signal (an assertion, a crash), print
    the end of what it wrote to stderr: the TAP line only says it is gone.
    Call it after its shutdown."""
    code = vm.exitcode()
    if code is None or code >= 0:
        return
    sys.stderr.write("# QEMU %s died on signal %d; the end of its output:\n"
                     % (vm.binary, -code))
    for line in (vm.get_log() or "").splitlines()[-40:]:
        sys.stderr.write("#   %s\n" % line)


def qmp_cmd(vm, name, **args):
    """QMP command @name on @vm; RuntimeError when it fails or QEMU is gone."""
    try:
        return vm.cmd(name, args_dict=args)
    except Exception as e:                   # qemu.qmp's errors, closed sockets
        raise RuntimeError("QMP %s: %s" % (name, e)) from e


class Qmp:
    """The QMP side of a Guest: cmd() and wait_event()."""

    def __init__(self, vm):
        self.vm = vm

    def cmd(self, name, **args):
        return qmp_cmd(self.vm, name, **args)

    def wait_event(self, name, timeout, **data):
        """The first event @name whose data has @data, waiting up to
        @timeout seconds; None if none came or QEMU went away."""
        try:
            return self.vm.event_wait(name, timeout=timeout,
                                      match={"data": data} if data else None)
        except Exception:                    # the connection went away
            return None


def console_lines(sock, timeout, log=None):
    """Lines of a serial console socket until QEMU closes it; raises
    TimeoutError past @timeout seconds.  Each line is copied to @log."""
    end = time.monotonic() + timeout
    buf = b""
    while True:
        left = end - time.monotonic()
        if left <= 0:
            raise TimeoutError("guest did not finish in %d s" % timeout)
        r, _, _ = select.select([sock], [], [], min(left, 1.0))
        if not r:
            continue
        try:
            chunk = sock.recv(65536)
        except OSError:
            chunk = b""
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            text = line.decode("utf-8", "replace").rstrip("\r")
            if log:
                log.write(text + "\n")
                log.flush()
            yield text
    if buf and log:
        log.write(buf.decode("utf-8", "replace"))


def thread_cpu(pid):
    """CPU seconds of a QEMU process: (vcpu, iothread, total)."""
    hz = os.sysconf("SC_CLK_TCK")
    vcpu = iot = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            comm = open("/proc/%d/task/%s/comm" % (pid, tid)).read().strip()
            stat = open("/proc/%d/task/%s/stat" % (pid, tid)).read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        t = (int(fields[11]) + int(fields[12])) / hz
        if comm.startswith("CPU "):
            vcpu += t
        elif comm.startswith("IO "):
            iot += t
    stat = open("/proc/%d/stat" % pid).read()
    fields = stat[stat.rindex(")") + 2:].split()
    total = (int(fields[11]) + int(fields[12])) / hz
    return vcpu, iot, total


def thread_cpu_ns(pid):
    """CPU time of each thread of a process, in nanoseconds, from
    /proc/PID/task/TID/schedstat: a list of (tid, comm, ns)."""
    out = []
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            comm = open("/proc/%d/task/%s/comm" % (pid, tid)).read().strip()
            ns = int(open("/proc/%d/task/%s/schedstat" %
                          (pid, tid)).read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        out.append((int(tid), comm, ns))
    return out


class Guest:
    """One boot of the guest with a job; yields serial lines as they come.
    QEMU runs as a QEMUMachine of the pinned tree's python/qemu."""

    def __init__(self, job, devargs, accel="tcg", smp=1, mem=1024,
                 name="nvdp", log=None, extra=()):
        self.tmp = tempfile.mkdtemp(prefix="nvdp-")
        jobf = os.path.join(self.tmp, "job.sh")
        with open(jobf, "w") as f:
            f.write(job)
        cpu = "host" if accel == "kvm" else "max"
        accel_opt = "kvm" if accel == "kvm" else "tcg,thread=multi"
        self.args = ["-nodefaults", "-no-user-config",
                     "-name", name + ",debug-threads=on",
                     "-machine", "pc", "-accel", accel_opt, "-cpu", cpu,
                     "-smp", str(smp), "-m", str(mem),
                     "-kernel", os.path.join(GUEST, "vmlinuz"),
                     "-initrd", os.path.join(GUEST, "initramfs.gz"),
                     "-append", APPEND, "-no-reboot",
                     "-fw_cfg", "name=opt/nvdp/job,file=%s" % jobf]
        self.args += list(extra) + list(devargs)
        self.log = open(log, "w") if log else None
        self.vm = None
        self.qmp = None

    def start(self):
        self.t0 = time.monotonic()
        self.vm = machine(self.args, tmp=self.tmp)
        try:
            self.vm.launch()
        except Exception as e:               # VMLaunchFailure: QEMU refused
            raise RuntimeError("QEMU did not start: %s" % e) from e
        self.qmp = Qmp(self.vm)
        return self

    @property
    def pid(self):
        return self.vm.get_pid()

    @property
    def returncode(self):
        """QEMU's exit status once it exited by itself, else None."""
        return self.vm.exitcode()

    def lines(self, timeout):
        """Serial lines until QEMU exits; raises TimeoutError past timeout."""
        yield from console_lines(self.vm.console_socket, timeout, self.log)
        # the guest powered off: QEMU exits by itself.  QEMUMachine's own
        # errors (it did not exit, it was killed) reach the callers as the
        # RuntimeError they handle, not as an unexpected exception.
        try:
            self.vm.wait(timeout=30)
        except Exception as e:
            raise RuntimeError("QEMU did not exit cleanly: %s" % e) from e

    def ack(self, name):
        """Answer the guest's "NVDP mark @name" (its nvdp_mark waits for
        it): a line on the serial console's input."""
        self.vm.console_socket.sendall(("ack %s\n" % name).encode())

    def stop(self):
        if self.vm:
            try:
                self.vm.shutdown(hard=True)
            except Exception:                # already gone
                pass
            died(self.vm)
        if self.log:
            self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def parse_mark(line):
    """'NVDP mark start qd=4 ios=10' -> ('start', {'qd': '4', 'ios': '10'})"""
    parts = line.split()[2:]
    kv = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
    return parts[0], kv


def kvm_runs_linux(timeout=20):
    """Does -accel kvm boot our Linux guest to /init within @timeout s?"""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "no usable /dev/kvm"
    g = Guest("echo NVDP probe-ok\n", [], accel="kvm")
    try:
        g.start()
        for line in g.lines(timeout):
            if line.startswith("NVDP init"):
                return True, "guest reached /init in %.1f s under KVM" % (
                    time.monotonic() - g.t0)
    except (TimeoutError, OSError, EOFError, RuntimeError) as e:
        return False, "guest did not reach /init under KVM in %d s (%s)" % (
            timeout, e)
    finally:
        g.stop()
    return False, "QEMU exited before the guest reached /init under KVM"
