"""Run the nvme-dataplane guest under QEMU: launch, QMP, serial protocol.

The guest's /init (guest/init.sh) runs a shell job handed in through fw_cfg
and writes lines starting with "NVDP " on the serial console.  A job asks
the host to take a sample with "NVDP mark <name> key=value..." and waits
for nothing: the host samples as soon as it reads the line.
"""

import json
import os
import select
import socket
import subprocess
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUEST = os.environ.get("NVME_DP_GUEST", os.path.join(TOP, "build", "guest"))
QEMU = os.environ.get("NVME_DP_QEMU", os.path.join(TOP, "build", "qemu-build",
                                                   "qemu-system-x86_64"))
APPEND = "console=ttyS0 quiet tsc=reliable panic=-1 mitigations=off"


class QMP:
    def __init__(self, path, proc, timeout=30):
        end = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(path)
                break
            except OSError:
                self.sock.close()
                if proc.poll() is not None:
                    out = proc.stdout.read().decode("utf-8", "replace")
                    raise RuntimeError("QEMU exited (%d): %s" %
                                       (proc.returncode, out.strip()))
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)
        self.buf = b""
        self.events = []
        self._read()                                # greeting
        self.cmd("qmp_capabilities")

    def _line(self, timeout=None):
        """The next line from QEMU, None if none came in @timeout seconds.
        What QEMU sent before it exited can still be read."""
        end = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buf:
            if end is not None:
                left = end - time.monotonic()
                r, _, _ = select.select([self.sock], [], [], max(left, 0))
                if not r:
                    return None
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("QMP connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def _read(self):
        while True:
            msg = json.loads(self._line())
            if "event" not in msg:
                return msg
            self.events.append(msg)

    def cmd(self, name, **args):
        req = {"execute": name}
        if args:
            req["arguments"] = args
        self.sock.sendall((json.dumps(req) + "\n").encode())
        rsp = self._read()
        if "error" in rsp:
            raise RuntimeError("QMP %s: %s" % (name, rsp["error"]))
        return rsp["return"]

    def wait_event(self, name, timeout, **data):
        """The first event @name whose data has @data, waiting up to
        @timeout seconds for it; None if it did not come before that or
        before QEMU closed the connection.  Only reads: QEMU may have
        exited and its last events still be found."""
        end = time.monotonic() + timeout
        seen = 0
        while True:
            for ev in self.events[seen:]:
                d = ev.get("data", {})
                if ev["event"] == name and all(d.get(k) == v
                                               for k, v in data.items()):
                    return ev
            seen = len(self.events)
            try:
                line = self._line(end - time.monotonic())
            except (EOFError, OSError):
                return None
            if line is None:
                return None
            msg = json.loads(line)
            if "event" in msg:
                self.events.append(msg)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


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


def serial_lines(proc, timeout, log=None):
    """Lines QEMU writes on stdout (-serial stdio) until it exits; raises
    TimeoutError past @timeout seconds.  Each line is copied to @log."""
    end = time.monotonic() + timeout
    buf = b""
    fd = proc.stdout.fileno()
    while True:
        left = end - time.monotonic()
        if left <= 0:
            raise TimeoutError("guest did not finish in %d s" % timeout)
        r, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not r:
            continue
        chunk = os.read(fd, 65536)
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
    proc.wait()


class Guest:
    """One boot of the guest with a job; yields serial lines as they come."""

    def __init__(self, job, devargs, accel="tcg", smp=1, mem=1024,
                 name="nvdp", log=None, extra=()):
        self.tmp = tempfile.mkdtemp(prefix="nvdp-")
        self.qmp_path = os.path.join(self.tmp, "qmp.sock")
        jobf = os.path.join(self.tmp, "job.sh")
        with open(jobf, "w") as f:
            f.write(job)
        cpu = "host" if accel == "kvm" else "max"
        accel_opt = "kvm" if accel == "kvm" else "tcg,thread=multi"
        self.argv = [QEMU, "-nodefaults", "-no-user-config",
                     "-name", name + ",debug-threads=on",
                     "-machine", "pc", "-accel", accel_opt, "-cpu", cpu,
                     "-smp", str(smp), "-m", str(mem),
                     "-kernel", os.path.join(GUEST, "vmlinuz"),
                     "-initrd", os.path.join(GUEST, "initramfs.gz"),
                     "-append", APPEND, "-display", "none", "-no-reboot",
                     "-serial", "stdio",
                     "-qmp", "unix:%s,server=on,wait=off" % self.qmp_path,
                     "-fw_cfg", "name=opt/nvdp/job,file=%s" % jobf]
        self.argv += list(extra) + list(devargs)
        self.log = open(log, "w") if log else None
        self.proc = None
        self.qmp = None

    def start(self):
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        self.qmp = QMP(self.qmp_path, self.proc)
        return self

    def lines(self, timeout):
        """Serial lines until QEMU exits; raises TimeoutError past timeout."""
        return serial_lines(self.proc, timeout, self.log)

    def ack(self, name):
        """Answer the guest's "NVDP mark @name" (its hostdo waits for it):
        a line on the serial console's input."""
        self.proc.stdin.write(("ack %s\n" % name).encode())
        self.proc.stdin.flush()

    def stop(self):
        if self.proc and self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if self.qmp:
            self.qmp.close()
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.log:
            self.log.close()
        for f in os.listdir(self.tmp):
            os.unlink(os.path.join(self.tmp, f))
        os.rmdir(self.tmp)


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
