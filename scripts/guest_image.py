#!/usr/bin/python3
"""Build the Linux guest used by the benchmark and the end-to-end tests.

Everything comes from Debian packages, fetched with `apt-get download`
into build/guest/debs and unpacked under build/guest/ (nothing is
installed on the host):

  vmlinuz          from linux-image-amd64's kernel package
  initramfs.gz     busybox-static, fio and nvme-cli with the shared
                   libraries they need (resolved by the unpacked system's
                   own loader), the kernel modules the guest needs and
                   their dependencies, /init (guest/init.sh) and the
                   jobs' shell helpers, /lib/nvdp.sh (guest/lib.sh)

The result is reproducible: files are sorted, owned by root and dated 0;
build/guest/manifest.txt lists the package versions.  A second run with
the same packages, init and helpers reuses the image.
"""

import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.environ.get("NVME_DP_GUEST", os.path.join(TOP, "build", "guest"))
USER_PKGS = ["busybox-static", "fio", "nvme-cli"]
BINARIES = ["/usr/bin/fio", "/usr/sbin/nvme"]
MODULES = ["nvme", "nvme-core", "virtio_pci", "virtio_blk", "qemu_fw_cfg"]


def say(msg):
    print("guest-image: " + msg, file=sys.stderr, flush=True)


def die(msg):
    say(msg)
    sys.exit(1)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, stdout=subprocess.PIPE,
                          **kw).stdout


def kernel_package():
    for attempt in range(2):
        out = subprocess.run(["apt-cache", "depends", "linux-image-amd64"],
                             text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL).stdout
        m = re.search(r"Depends: (linux-image-[0-9][^\s]*)", out)
        if m:
            return m.group(1)
        if attempt == 0:
            say("apt-cache knows no linux-image-amd64: running apt-get update")
            subprocess.run(["apt-get", "update", "-qq"], check=True)
    die("apt-cache knows no linux-image-amd64 even after apt-get update: "
        "check the apt sources (a Debian main archive is needed)")


def closure(pkgs):
    out = run(["apt-cache", "depends", "--recurse", "--no-recommends",
               "--no-suggests", "--no-conflicts", "--no-breaks",
               "--no-replaces", "--no-enhances"] + pkgs)
    names = set()
    for line in out.splitlines():
        if line and not line.startswith((" ", "<")):
            names.add(line.strip())
    return sorted(names)


def versions(pkgs):
    """name -> candidate version, for the packages apt would download."""
    out = run(["apt-cache", "policy"] + pkgs)
    vers, name = {}, None
    for line in out.splitlines():
        if not line.startswith(" "):
            name = line.rstrip(":")
        elif line.strip().startswith("Candidate:") and name:
            v = line.split()[1]
            if v != "(none)":
                vers[name] = v
    return vers


def download(pkgs, debs):
    os.makedirs(debs, exist_ok=True)
    want = []
    for name, ver in sorted(pkgs.items()):
        deb = "%s_%s_" % (name, ver.replace(":", "%3a"))
        if not any(f.startswith(deb) for f in os.listdir(debs)):
            want.append("%s=%s" % (name, ver))
    if want:
        say("downloading %d package(s)" % len(want))
        subprocess.run(["apt-get", "download", "-q"] + want, cwd=debs,
                       check=True, stdout=subprocess.DEVNULL)


def unpack(debs, pkgs, root):
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    for name, ver in sorted(pkgs.items()):
        prefix = "%s_%s_" % (name, ver.replace(":", "%3a"))
        files = [f for f in os.listdir(debs) if f.startswith(prefix)]
        if not files:
            die("no .deb for %s=%s in %s" % (name, ver, debs))
        subprocess.run(["dpkg-deb", "-x", os.path.join(debs, files[0]), root],
                       check=True)


LOADER = "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"


def in_root(root, path):
    """Follow symlinks of a path under root as the guest would see them."""
    rel = os.path.relpath(path, root)
    for _ in range(40):
        cur, parts = root, rel.split("/")
        for i, part in enumerate(parts):
            nxt = os.path.join(cur, part)
            if os.path.islink(nxt):
                target = os.readlink(nxt)
                base = root if target.startswith("/") else cur
                rel = os.path.relpath(os.path.normpath(
                    os.path.join(base, target.lstrip("/"),
                                 *parts[i + 1:])), root)
                break
            cur = nxt
        else:
            return cur
    die("symlink loop at " + path)


def library_dirs(root):
    dirs = []
    for d, _, files in sorted(os.walk(root)):
        if any(".so" in f for f in files) and "/lib" in d[len(root):]:
            dirs.append(d)
    return dirs


def resolve_libs(root, binary):
    """Shared libraries of a binary, as the unpacked system's loader sees it."""
    loader = in_root(root, os.path.join(root, LOADER))
    libdirs = ":".join(library_dirs(root))
    out = run([loader, "--library-path", libdirs, "--list",
               os.path.join(root, binary.lstrip("/"))])
    libs = []
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (\S+) \(", line)
        if m:
            if m.group(2) == "not":
                die("%s needs %s, which no package provides" %
                    (binary, m.group(1)))
            libs.append(m.group(2))
        elif "not found" in line:
            die("%s: %s" % (binary, line.strip()))
    return libs


def module_index(kroot, kver):
    base = os.path.join(kroot, "lib/modules", kver)
    index = {}
    for d, _, files in os.walk(os.path.join(base, "kernel")):
        for f in files:
            m = re.match(r"(.*)\.ko(\.xz|\.zst|\.gz)?$", f)
            if m:
                index[m.group(1).replace("-", "_")] = os.path.join(d, f)
    builtin = set()
    path = os.path.join(base, "modules.builtin")
    if os.path.exists(path):
        for line in open(path):
            name = os.path.basename(line.strip())
            builtin.add(re.sub(r"\.ko.*$", "", name).replace("-", "_"))
    return base, index, builtin


def module_depends(path):
    data = open(path, "rb").read()
    if path.endswith(".xz"):
        import lzma
        data = lzma.decompress(data)
    m = re.search(rb"\0depends=([^\0]*)\0", data)
    if not m or not m.group(1):
        return []
    return m.group(1).decode().split(",")


def modules(kroot, kver):
    base, index, builtin = module_index(kroot, kver)
    todo, seen = [m.replace("-", "_") for m in MODULES], []
    while todo:
        name = todo.pop()
        if name in seen or name in builtin:
            continue
        if name not in index:
            die("kernel %s has no module %s" % (kver, name))
        seen.append(name)
        todo.extend(d.replace("-", "_") for d in module_depends(index[name]))
    return base, [index[n] for n in sorted(seen)]


def cpio_newc(entries, out):
    """entries: sorted list of (path, mode, data or None for dir, link)."""
    ino = 1
    with gzip.GzipFile(out, "wb", mtime=0) as f:
        def header(name, mode, size, nlink):
            nonlocal ino
            name_b = name.encode() + b"\0"
            hdr = "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X" % (
                ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name_b), 0)
            ino += 1
            f.write(hdr.encode() + name_b)
            pad = (4 - (110 + len(name_b)) % 4) % 4
            f.write(b"\0" * pad)

        for name, mode, data in entries:
            header(name, mode, len(data), 2 if mode & 0o040000 else 1)
            f.write(data)
            f.write(b"\0" * ((4 - len(data) % 4) % 4))
        ino = 0
        header("TRAILER!!!", 0, 0, 1)


def build():
    kpkg = kernel_package()
    kver = kpkg[len("linux-image-"):]
    user = closure(USER_PKGS)
    vers = versions(user + [kpkg])
    init = open(os.path.join(TOP, "guest", "init.sh"), "rb").read()
    helpers = open(os.path.join(TOP, "guest", "lib.sh"), "rb").read()

    manifest = "".join("%s=%s\n" % kv for kv in sorted(vers.items()))
    stamp = hashlib.sha256(manifest.encode() + init + helpers +
                           open(__file__, "rb").read()).hexdigest()
    stampf = os.path.join(OUT, "stamp")
    vmlinuz = os.path.join(OUT, "vmlinuz")
    initrd = os.path.join(OUT, "initramfs.gz")
    if (os.path.exists(stampf) and open(stampf).read() == stamp and
            os.path.exists(vmlinuz) and os.path.exists(initrd)):
        say("%s is up to date (kernel %s)" % (OUT, kver))
        return

    debs = os.path.join(OUT, "debs")
    download(vers, debs)
    root, kroot = os.path.join(OUT, "root"), os.path.join(OUT, "kroot")
    unpack(debs, {k: v for k, v in vers.items() if k != kpkg}, root)
    unpack(debs, {kpkg: vers[kpkg]}, kroot)

    files = {}  # guest path -> host path

    def add(guest, host):
        files[guest] = host

    add("/bin/busybox", in_root(root, os.path.join(root, "bin/busybox")))
    add("/lib64/ld-linux-x86-64.so.2", in_root(root, os.path.join(root, LOADER)))
    for b in BINARIES:
        add(b, in_root(root, os.path.join(root, b.lstrip("/"))))
        for lib in resolve_libs(root, b):
            rel = os.path.relpath(lib, root)
            # keep the name the loader looks for, with the real file's bytes
            add("/" + rel, in_root(root, lib))
    mbase, mods = modules(kroot, kver)
    for m in mods:
        add("/" + os.path.relpath(m, kroot), m)
    for f in ["modules.builtin", "modules.order", "modules.builtin.modinfo"]:
        p = os.path.join(mbase, f)
        if os.path.exists(p):
            add("/" + os.path.relpath(p, kroot), p)

    # modules.dep for busybox modprobe, made by the guest's own busybox
    stage = os.path.join(OUT, "stage")
    shutil.rmtree(stage, ignore_errors=True)
    for g, h in files.items():
        if g.startswith("/lib/modules/"):
            dst = os.path.join(stage, g.lstrip("/"))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(h, dst)
    subprocess.run([os.path.join(root, "bin/busybox"), "depmod", "-b", stage,
                    kver], check=True)
    mdir = os.path.join(stage, "lib/modules", kver)
    for f in sorted(os.listdir(mdir)):
        if f.startswith("modules.") and os.path.isfile(os.path.join(mdir, f)):
            add("/lib/modules/%s/%s" % (kver, f), os.path.join(mdir, f))

    entries, dirs = [], set()
    for g in sorted(files):
        parts = g.strip("/").split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))
    for d in ["bin", "sbin", "usr/bin", "usr/sbin", "proc", "sys", "dev",
              "tmp", "mnt", "run", "etc"]:
        dirs.add(d)
    items = [(d, 0o040755, b"") for d in dirs]
    for g, h in files.items():
        data = open(h, "rb").read()
        items.append((g.strip("/"), 0o100755, data))
    items.append(("init", 0o100755, init))
    items.append(("lib/nvdp.sh", 0o100644, helpers))
    items.append(("etc/kernel-version", 0o100644, (kver + "\n").encode()))
    items.sort(key=lambda e: e[0])
    tmp = initrd + ".tmp"
    cpio_newc(items, tmp)
    os.replace(tmp, initrd)

    shutil.copyfile(os.path.join(kroot, "boot", "vmlinuz-" + kver), vmlinuz)
    with open(os.path.join(OUT, "manifest.txt"), "w") as f:
        f.write(manifest)
    with open(stampf, "w") as f:
        f.write(stamp)
    shutil.rmtree(stage, ignore_errors=True)
    say("built %s (kernel %s, initramfs %.1f MB, %d modules)" %
        (OUT, kver, os.path.getsize(initrd) / 1e6, len(mods)))


if __name__ == "__main__":
    build()
