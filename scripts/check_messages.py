#!/usr/bin/env python3
"""The patch queue's messages as QEMU wants them posted (TAP on stdout).

    check_messages.py PATCHES

One case per patch: a subject of at most 76 columns after "[PATCH n/N] ",
body lines of at most 76 columns (trailers and lines without a space, such
as a long path, excepted), and no word of this project's tooling or
history in the message: its readers are QEMU's, who run meson and the
qtest binaries, and who never saw the queue's earlier versions.

One case per series directory: a cover letter whose subject and text were
written (not git's placeholders), which says what it needs (Based-on:),
and a series of at most 30 patches.
"""
import os
import re
import sys

WIDTH = 76
MAX_SERIES = 30
TRAILER = re.compile(r"^(Signed-off-by|Cc|Fixes|Based-on|Reviewed-by|Acked-by|"
                     r"Tested-by|Reported-by|Suggested-by|Message-Id|Link|"
                     r"Resolves|Buglink|Co-developed-by):")
TOOLING = re.compile(r"\bmake (check(?!-(qtest|unit|block|functional|tcg|"
                     r"rust|softfloat|decodetree))|bench|soak|fuzz|tree|export|"
                     r"build|qtest|guest|libvirt)|\bscripts/[A-Za-z_-]+\.(sh|py)\b|"
                     r"bench_device|bench\.py|guest_e2e|nvme-dataplane|\bnvdp_|"
                     r"\bBENCH_[A-Z]+=|"
                     r"\b(previous|next) patch|\bbefore the fix(es)?\b",
                     re.IGNORECASE)


def parse(path):
    """(subject, body lines) of a format-patch file"""
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    subject, i = "", 0
    while i < len(lines) and lines[i] != "":
        if lines[i].startswith("Subject:"):
            subject = lines[i][len("Subject:"):].strip()
            while i + 1 < len(lines) and lines[i + 1].startswith((" ", "\t")):
                i += 1
                subject += " " + lines[i].strip()
        i += 1
    subject = re.sub(r"^\[[^\]]*\]\s*", "", subject)
    body = []
    for line in lines[i + 1:]:
        if line == "---" or re.match(r"^\S.* \(\d+\):$", line):
            break
        body.append(line)
    return subject, body


def problems(subject, body):
    out = []
    if len(subject) > WIDTH:
        out.append(f"subject is {len(subject)} columns")
    if not subject or subject.startswith("*** SUBJECT"):
        out.append("no subject")
    for n, line in enumerate(body, 2):
        if len(line) > WIDTH and not TRAILER.match(line) and " " in line.strip():
            out.append(f"line {n} is {len(line)} columns")
    for line in [subject] + body:
        if TRAILER.match(line):
            continue
        for m in TOOLING.finditer(line):
            out.append(f"names the queue's tooling or history: '{m.group(0)}'")
    return out


def main():
    top = sys.argv[1]
    entries = [e.split("#")[0].strip() for e in
               open(os.path.join(top, "series"), encoding="utf-8")]
    entries = [e for e in entries if e]
    cases = []
    for e in entries:
        if e.endswith(".patch"):
            cases.append((e, problems(*parse(os.path.join(top, e)))))
            continue
        d = e.rstrip("/")
        files = sorted(f for f in os.listdir(os.path.join(top, d))
                       if re.match(r"^\d{4}-.*\.patch$", f))
        patches = [f for f in files if f != "0000-cover-letter.patch"]
        bad = []
        if "0000-cover-letter.patch" not in files:
            bad.append("no cover letter")
        else:
            subject, body = parse(os.path.join(top, d, "0000-cover-letter.patch"))
            bad += problems(subject, body)
            if any("*** BLURB HERE ***" in line for line in body):
                bad.append("the cover letter's text is git's placeholder")
            if not any(line.startswith("Based-on:") for line in body):
                bad.append("the cover letter does not say what it is based on (Based-on:)")
        if len(patches) > MAX_SERIES:
            bad.append(f"{len(patches)} patches, more than {MAX_SERIES}")
        if not patches:
            bad.append("no patch")
        cases.append((f"{d}/ (cover letter, {len(patches)} patches)", bad))
        for f in patches:
            cases.append((f"{d}/{f}", problems(*parse(os.path.join(top, d, f)))))
    print(f"1..{len(cases)}")
    for i, (name, bad) in enumerate(cases, 1):
        if bad:
            print(f"not ok {i} - {name}")
            for b in bad:
                print(f"# {b}")
        else:
            print(f"ok {i} - {name}")


if __name__ == "__main__":
    main()
