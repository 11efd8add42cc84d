"""The seconds each test file took in a measured ``make test`` run, for the order in which
pytest-xdist hands files out (``tests/conftest.py``, ``pytest_collection_modifyitems``).

``--dist loadfile`` gives each worker whole files in collection order; a long file handed
out last leaves one worker running it alone while the other idles (fc1: 51 min, the last
~20 with one worker). Handing the longest files out first (longest-processing-time first)
lets the short ones fill in at the end.

Refresh after a run that wrote a JUnit report::

    make test PYTEST_ARGS="--junitxml=/tmp/junit.xml"
    .venv/bin/python tests/file_durations.py /tmp/junit.xml     # rewrites file_durations.json
"""
from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent
DURATIONS = TESTS / "file_durations.json"


def load() -> dict[str, float]:
    """``{path relative to the repository: seconds}``; empty when the file is missing."""
    if not DURATIONS.exists():
        return {}
    return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}


def _file_of(classname: str) -> str | None:
    """``tests.test_x.test_y[.TestClass]`` -> ``tests/test_x/test_y.py`` when that file exists."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        path = TESTS.parent.joinpath(*parts[:end]).with_suffix(".py")
        if path.is_file():
            return path.relative_to(TESTS.parent).as_posix()
    return None


def from_junit(*reports: Path) -> dict[str, float]:
    """Seconds per test file summed over the reports' test cases (setup, call and teardown:
    a module fixture's start-up counts in its file's first test)."""
    seconds: dict[str, float] = defaultdict(float)
    for report in reports:
        for case in ET.parse(report).iter("testcase"):
            path = _file_of(case.get("classname", ""))
            if path is not None:
                seconds[path] += float(case.get("time", 0.0))
    return dict(seconds)


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: file_durations.py JUNIT_XML [JUNIT_XML ...]")
    seconds = from_junit(*map(Path, argv))
    ordered = dict(sorted(((k, round(v, 1)) for k, v in seconds.items()), key=lambda kv: -kv[1]))
    DURATIONS.write_text(json.dumps(ordered, indent=1) + "\n")
    print(f"{DURATIONS}: {len(ordered)} files, {sum(ordered.values()) / 60:.1f} min in all; longest:")
    for path, s in list(ordered.items())[:10]:
        print(f"  {s:7.1f} s  {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
