#!/usr/bin/env python3
"""Lists what the last ctest run skipped and why, and in CI fails on any skip outside the gpu label.

  scripts/test-skips.py JUNIT_XML BUILD_DIR

JUNIT_XML is ctest's --output-junit file. A test is skipped when it exited with TQ_SKIP_EXIT_CODE
(cmake/tq_helpers.cmake); the reasons are read from its output:
  GoogleTest   "<file>:<line>: Skipped", the message, then "[  SKIPPED ] Suite.Name (N ms)"
  pytest -rs   "SKIPPED [n] <file>:<line>: <reason>"
  shell tests  "[  SKIPPED ] <reason>" (tests/integration/lib.sh)
Strict mode (CI=true or TQ_TEST_STRICT=1): exit 1 when a test without the gpu label skipped, since a green CI must
mean that everything ran. Exit 0 otherwise, 2 on unreadable input.
"""
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

GTEST_RUN = re.compile(r"^\[ RUN      \] (\S+)")
GTEST_SKIPPED_AT = re.compile(r"^.+:\d+: Skipped$")
GTEST_SKIPPED = re.compile(r"^\[  SKIPPED \] (\S+) \(\d+ ms\)$")
PYTEST_SKIPPED = re.compile(r"^SKIPPED \[\d+\] (.+)$")
SHELL_SKIPPED = re.compile(r"^\[  SKIPPED \] (.+)$")


def reasons(output):
    """[(case, reason)] of one test's output."""
    lines = output.splitlines()
    found = []
    if any(line.startswith("[==========]") for line in lines):  # a GoogleTest binary
        case, message, collecting = "", [], False
        for line in lines:
            if m := GTEST_RUN.match(line):
                case, message, collecting = m.group(1), [], False
            elif GTEST_SKIPPED_AT.match(line):
                collecting = True
            elif m := GTEST_SKIPPED.match(line):
                found.append((m.group(1), " ".join(message).strip() or "(no reason given)"))
                collecting = False
            elif collecting:
                message.append(line.strip())
        return found
    for line in lines:
        if m := PYTEST_SKIPPED.match(line):
            found.append(("", m.group(1)))
        elif m := SHELL_SKIPPED.match(line):
            found.append(("", m.group(1)))
    return found


def labels_by_test(build_dir):
    out = subprocess.run(["ctest", "--test-dir", build_dir, "--show-only=json-v1"], check=True,
                         capture_output=True, text=True).stdout
    labels = {}
    for t in json.loads(out).get("tests", []):
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        labels[t["name"]] = props.get("LABELS", [])
    return labels


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    junit, build_dir = sys.argv[1], sys.argv[2]
    try:
        root = ET.parse(junit).getroot()
        labels = labels_by_test(build_dir)
    except (OSError, ET.ParseError, subprocess.CalledProcessError, json.JSONDecodeError) as e:
        print(f"test-skips: cannot read the ctest results: {e}", file=sys.stderr)
        return 2
    strict = os.environ.get("CI") == "true" or os.environ.get("TQ_TEST_STRICT") == "1"
    skipped = [tc for tc in root.iter("testcase") if tc.find("skipped") is not None]
    if not skipped:
        print("== skipped: none")
        return 0
    print(f"== skipped: {len(skipped)} test(s)")
    forbidden = []
    for tc in skipped:
        name = tc.get("name")
        test_labels = labels.get(name, [])
        output = tc.findtext("system-out") or ""
        found = reasons(output) or [("", "(no reason printed)")]
        print(f"  {name} [{', '.join(test_labels)}]")
        for case, why in found:
            print(f"    {case + ': ' if case else ''}{why}")
        if "gpu" not in test_labels:
            forbidden.append(name)
    if strict and forbidden:
        print(f"== CI: {len(forbidden)} test(s) outside the gpu label skipped ({', '.join(forbidden)}); in CI every "
              "test must run: install or fetch what the reasons above name")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
