"""TAP output for the project's Python test scripts."""

_count = {"n": 0, "failed": 0}


def case(ok, name, why=""):
    """One test case: 'ok N - name', or 'not ok N - name  # why'."""
    _count["n"] += 1
    _count["failed"] += not ok
    print("%s %d - %s%s" % ("ok" if ok else "not ok", _count["n"], name,
                            "" if ok else "  # " + why), flush=True)


def finish():
    """The plan line; the exit status: 1 if a case failed."""
    print("1..%d" % _count["n"])
    return 1 if _count["failed"] else 0
