#!/usr/bin/env python3
"""README's table of the topic series, from patches/ (stdout).

    series_table.py [PATCHES]

A row per series of patches/series, in order: its directory, the subject
of its cover letter and how many patches it has.  tests/tooling.sh checks
that README.md holds this table as it is.
"""
import os
import re
import sys


def subject(path):
    for line in open(path, encoding="utf-8"):
        if line.startswith("Subject:"):
            return re.sub(r"^\[[^\]]*\]\s*", "", line[len("Subject:"):].strip())
        if not line.strip():
            break
    return "?"


def main():
    top = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "patches")
    rows = ["| series | cover letter | patches |", "| --- | --- | --- |"]
    for e in open(os.path.join(top, "series"), encoding="utf-8"):
        e = e.split("#")[0].strip()
        if not e or e.endswith(".patch"):
            continue
        d = e.rstrip("/")
        files = sorted(f for f in os.listdir(os.path.join(top, d))
                       if re.match(r"^\d{4}-.*\.patch$", f))
        n = len([f for f in files if f != "0000-cover-letter.patch"])
        cover = os.path.join(top, d, "0000-cover-letter.patch")
        s = subject(cover) if os.path.exists(cover) else "?"
        rows.append(f"| [{d}](patches/{d}/) | {s} | {n} |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
