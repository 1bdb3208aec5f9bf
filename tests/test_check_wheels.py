"""The logic of scripts/check-wheels.py (the wheel checker) on small fake inputs: no wheel, no
ELF file and no objdump needed."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parent.parent / "scripts" / "check-wheels.py"
_spec = importlib.util.spec_from_file_location("check_wheels", _PATH)
assert _spec is not None and _spec.loader is not None
cw = importlib.util.module_from_spec(_spec)
sys.modules["check_wheels"] = cw
_spec.loader.exec_module(cw)

GLIBC_2_17 = {"GLIBC": ["2.2.5", "2.3", "2.3.4", "2.14", "2.17"], "GCC": ["3.0", "4.8.0"]}


def test_the_oldest_manylinux_tag_is_the_policy():
    assert cw.policy_name_for("framebus-0.1.0-cp311-abi3-manylinux2014_x86_64.whl") == "manylinux_2_17"
    assert (
        cw.policy_name_for("x-1-cp39-cp39-manylinux_2_28_x86_64.manylinux2014_x86_64.whl") == "manylinux_2_17"
    )
    assert cw.policy_name_for("x-1-cp39-cp39-manylinux_2_28_x86_64.whl") == "manylinux_2_28"


def test_a_wheel_without_a_manylinux_tag_is_refused():
    with pytest.raises(ValueError, match="no manylinux platform tag"):
        cw.policy_name_for("framebus-0.1.0-cp311-cp311-linux_x86_64.whl")


def test_the_architecture_comes_from_the_platform_tag():
    assert cw.arch_for("framebus-0.1.0-cp311-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl") == "x86_64"
    assert cw.arch_for("framebus-0.1.0-cp39-cp39-manylinux_2_17_aarch64.whl") == "aarch64"
    with pytest.raises(ValueError, match="no Linux platform tag"):
        cw.arch_for("framebus-0.1.0-cp311-abi3-macosx_11_0_arm64.whl")


def test_glibc_versions_above_the_policy_are_problems():
    problems = cw.check_versions(
        [("libc.so.6", "GLIBC_2.17"), ("libc.so.6", "GLIBC_2.30"), ("libc.so.6", "GLIBC_2.2.5")], GLIBC_2_17
    )
    assert len(problems) == 1
    assert "GLIBC_2.30" in problems[0] and "GLIBC_2.17" in problems[0]


def test_version_namespaces_outside_the_policy_are_not_judged():
    assert cw.check_versions([("libfoo.so.1", "FOO_9.9")], GLIBC_2_17) == []
    assert cw.check_versions([("libgcc_s.so.1", "GCC_7.0.0")], GLIBC_2_17) != []


def test_a_strong_unversioned_libc_symbol_is_a_problem():
    problems, notes = cw.check_unversioned([("gettid", None, False)])
    assert len(problems) == 1 and "gettid" in problems[0]
    assert notes == []


def test_weak_python_and_versioned_symbols_pass():
    problems, notes = cw.check_unversioned(
        [
            ("statx", None, True),
            ("PyObject_GetBuffer", None, False),
            ("_Py_NoneStruct", None, False),
            ("memcpy", "GLIBC_2.14", False),
        ]
    )
    assert problems == []
    assert len(notes) == 1 and "statx" in notes[0] and "Py" not in notes[0]


def test_needed_libraries_off_the_allow_list_are_problems():
    allow = ["libc.so.6", "libpthread.so.0"]
    assert cw.check_needed(["libc.so.6", "ld-linux-x86-64.so.2"], allow, []) == []
    assert cw.check_needed(["libssl.so.3"], allow, ["libssl.so.3"]) == []  # shipped in the wheel
    problems = cw.check_needed(["libc.so.6", "libssl.so.3"], allow, [])
    assert len(problems) == 1 and "libssl.so.3" in problems[0]


FAKE_OBJDUMP = """
x.so:     file format elf64-x86-64

Disassembly of section .text:

0000000000001000 <framebus::copy::kernels::stream_avx2>:
    1000:\tvmovdqu (%rsi),%ymm0
    1004:\tvmovntdq %ymm0,(%rdi)
    1008:\tvpxord %zmm1,%zmm1,%zmm1
    100e:\tret

0000000000002000 <framebus::ring::Ring::write>:
    2000:\ttzcnt  %rax,%rax
    2005:\tmov    %rax,%rbx
    2008:\tlock cmpxchg16b (%rdi)
    200d:\tpopcnt %rax,%rcx
    2012:\tmovdqu (%rsi),%xmm0
    2016:\txgetbv
    2019:\tvaddps %xmm1,%xmm2,%xmm3
"""


def test_the_disassembly_scan_groups_extensions_by_function():
    found = cw.scan_disassembly(FAKE_OBJDUMP)
    assert found["framebus::copy::kernels::stream_avx2"] == {"AVX/AVX2": 2, "AVX-512": 1}
    # tzcnt, xgetbv and SSE2 are accepted; the lock prefix does not hide cmpxchg16b
    assert found["framebus::ring::Ring::write"] == {"CX16": 1, "POPCNT": 1, "AVX (VEX)": 1}


def test_raw_instruction_bytes_do_not_confuse_the_scan():
    text = "0000000000001000 <f>:\n    1000:\tc5 fe 6f 06          \tvmovdqu (%rsi),%ymm0\n"
    assert cw.scan_disassembly(text) == {"f": {"AVX/AVX2": 1}}


def test_code_without_labels_is_attributed_to_no_function():
    assert cw.scan_disassembly("    1000:\tpshufb %xmm1,%xmm0\n") == {"?": {"SSSE3": 1}}


def test_beyond_baseline_code_passes_only_in_guarded_functions_with_symbols():
    found = cw.scan_disassembly(FAKE_OBJDUMP)
    problems, notes = cw.check_cpu(found, has_symbols=True, guarded=cw.DEFAULT_GUARDED)
    assert len(notes) == 1 and "stream_avx2" in notes[0]
    assert len(problems) == 1 and "Ring::write" in problems[0] and "POPCNT" in problems[0]


def test_beyond_baseline_code_in_a_stripped_object_is_a_problem():
    found = {"?": {"AVX/AVX2": 3}}
    problems, notes = cw.check_cpu(found, has_symbols=False, guarded=cw.DEFAULT_GUARDED)
    assert notes == [] and len(problems) == 1 and "stripped" in problems[0]


def test_baseline_only_code_has_nothing_to_report():
    assert cw.scan_disassembly("0000000000001000 <f>:\n    1000:\tmovdqu (%rsi),%xmm0\n    1004:\tmovntdq %xmm0,(%rdi)\n") == {}
    assert cw.check_cpu({}, has_symbols=False, guarded=cw.DEFAULT_GUARDED) == ([], [])


def test_the_report_says_ok_or_lists_the_problems():
    ok = cw.Report("a.whl", "manylinux_2_17", lines=["x"])
    assert ok.text().splitlines()[0].endswith("OK")
    bad = cw.Report("a.whl", "manylinux_2_17", problems=["needs GLIBC_2.30"])
    assert "1 PROBLEM(S)" in bad.text() and "PROBLEM: needs GLIBC_2.30" in bad.text()
