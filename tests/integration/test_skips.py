"""Skips are visible: the gtest main's exit codes, ctest's "Skipped" and scripts/test-skips.py's list and CI rule.

Runs the real pieces: tests/support/skip_probe (a GoogleTest binary on tests/support/gtest_main.cc), ctest on a
small project of its own (a gtest skip, a shell skip, a pytest-style skip, a gpu-labelled skip), and the script.
"""
import os
import subprocess
import sys
import textwrap

from conftest import BIN, ROOT

PROBE = BIN.parent / "tests" / "skip_probe"
SCRIPT = ROOT / "scripts" / "test-skips.py"


def probe(mode):
    return subprocess.run([str(PROBE)], env={**os.environ, "TQ_SKIP_PROBE": mode}, capture_output=True, text=True)


def test_gtest_main_exit_codes():
    assert probe("pass").returncode == 0
    skipped = probe("skip")
    assert skipped.returncode == 77, skipped.stdout
    assert "probe told to skip" in skipped.stdout
    assert probe("fail").returncode == 1
    assert probe("skip-and-fail").returncode == 1, "a failure must win over a skip"


def run_project(tmp_path, ci):
    """ctest over a project with one test of each kind; returns test-skips.py's completed process."""
    src, build = tmp_path / "src", tmp_path / "build"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(textwrap.dedent(f"""\
        cmake_minimum_required(VERSION 3.20)
        project(skips NONE)
        enable_testing()
        add_test(NAME gtest_skip COMMAND {PROBE})
        add_test(NAME shell_skip COMMAND bash -c "echo '[  SKIPPED ] no tmpfs here'; exit 77")
        add_test(NAME pytest_skip COMMAND bash -c "echo 'SKIPPED [1] t.py:3: promtool is absent'; exit 77")
        add_test(NAME gpu_skip COMMAND bash -c "echo '[  SKIPPED ] no CUDA device'; exit 77")
        add_test(NAME passes COMMAND true)
        set_tests_properties(gtest_skip PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT TQ_SKIP_PROBE=skip LABELS unit)
        set_tests_properties(shell_skip pytest_skip PROPERTIES SKIP_RETURN_CODE 77 LABELS integration)
        set_tests_properties(gpu_skip PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
        """))
    subprocess.run(["cmake", "-S", str(src), "-B", str(build)], check=True, capture_output=True)
    junit = build / "junit.xml"
    ctest = subprocess.run(["ctest", "--test-dir", str(build), "--output-junit", str(junit)], capture_output=True,
                           text=True)
    assert ctest.returncode == 0, ctest.stdout
    assert ctest.stdout.count("Skipped") >= 4, ctest.stdout
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TQ_TEST_STRICT")}
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, str(SCRIPT), str(junit), str(build)], env=env, capture_output=True,
                          text=True)


def test_report_lists_every_skip_with_its_reason(tmp_path):
    r = run_project(tmp_path, ci=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skipped: 4 test(s)" in r.stdout
    assert "SkipProbe.First: probe told to skip" in r.stdout
    assert "no tmpfs here" in r.stdout
    assert "t.py:3: promtool is absent" in r.stdout
    assert "gpu_skip [gpu]" in r.stdout


def test_ci_fails_on_a_skip_outside_the_gpu_label(tmp_path):
    r = run_project(tmp_path, ci=True)
    assert r.returncode == 1, r.stdout
    assert "3 test(s) outside the gpu label skipped" in r.stdout
    assert "gpu_skip" not in r.stdout.split("== CI:")[1]


def test_ci_allows_gpu_skips(tmp_path):
    src, build = tmp_path / "src", tmp_path / "build"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(textwrap.dedent("""\
        cmake_minimum_required(VERSION 3.20)
        project(gpu NONE)
        enable_testing()
        add_test(NAME gpu_skip COMMAND bash -c "echo '[  SKIPPED ] no CUDA device'; exit 77")
        set_tests_properties(gpu_skip PROPERTIES SKIP_RETURN_CODE 77 LABELS "gpu;unit")
        """))
    subprocess.run(["cmake", "-S", str(src), "-B", str(build)], check=True, capture_output=True)
    junit = build / "junit.xml"
    subprocess.run(["ctest", "--test-dir", str(build), "--output-junit", str(junit)], check=True, capture_output=True)
    r = subprocess.run([sys.executable, str(SCRIPT), str(junit), str(build)], env={**os.environ, "CI": "true"},
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
    assert "no CUDA device" in r.stdout
