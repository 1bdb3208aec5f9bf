#!/usr/bin/env python3
"""Checks built framebus wheels for what makes a manylinux wheel fail on some machines although
`auditwheel show` passes it.

For every shared object in every wheel given (or every wheel in dist/):

* glibc symbol versions: every version the object needs (its version-requirement table and its
  undefined symbols) must be in the wheel's manylinux policy (GLIBC_2.17 at most for
  manylinux2014). An undefined symbol with no version at all that is not the Python C API and not
  weak is a problem too: the loader binds it to any definition of that name, or refuses to load
  the extension where the C library lacks one (libc's gettid() before glibc 2.30 is the classic).
* NEEDED libraries: each must be on the policy's allow-list (taken from auditwheel's own policy
  file), be the dynamic loader, or be shipped inside the wheel.
* CPU features: the machine code is disassembled (`objdump -d`) and each instruction beyond the
  x86-64 baseline (SSE2) is reported by instruction set. Such code is accepted only inside
  functions that choose it at run time (by default the copy kernels and the standard library's
  CPU-feature detection); where the object carries no symbol table to attribute it with, it is a
  problem. `tzcnt` is accepted anywhere (a CPU without BMI1 runs it as `bsf`, and compilers emit it
  only where the two agree), and so is `xgetbv` (only feature detection issues it, once cpuid has
  said the OS enabled XSAVE).

Prints a short report per wheel and exits with 1 if any wheel has a problem (2 on bad usage).
Needs pyelftools and auditwheel (pip install pyelftools auditwheel) and binutils' objdump.
"""
from __future__ import annotations

import argparse
import dataclasses
import io
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Iterable

# Instruction sets beyond the x86-64 baseline (x86-64-v1: MMX, SSE, SSE2, CMOV, CX8, FXSR), by
# the mnemonics that show them in objdump's AT&T output. VEX and EVEX encoded instructions (all
# of AVX, AVX2, AVX-512, FMA) are recognised by their registers and their 'v' prefix below.
EXTENSION_MNEMONICS: dict[str, frozenset[str]] = {
    "SSE3": frozenset("addsubpd addsubps haddpd haddps hsubpd hsubps lddqu movddup movshdup movsldup fisttp monitor mwait".split()),
    "SSSE3": frozenset("pshufb palignr pmaddubsw pmulhrsw phaddw phaddd phaddsw phsubw phsubd phsubsw pabsb pabsw pabsd psignb psignw psignd".split()),
    "SSE4.1": frozenset(
        "ptest pblendvb pblendw blendpd blendps blendvpd blendvps pextrb pextrd pextrq pinsrb pinsrd pinsrq "
        "pminsb pminsd pminuw pminud pmaxsb pmaxsd pmaxuw pmaxud pmovsxbw pmovsxbd pmovsxbq pmovsxwd pmovsxwq "
        "pmovsxdq pmovzxbw pmovzxbd pmovzxbq pmovzxwd pmovzxwq pmovzxdq pmuldq pmulld pcmpeqq packusdw roundps "
        "roundpd roundss roundsd dpps dppd insertps extractps movntdqa phminposuw mpsadbw".split()
    ),
    "SSE4.2": frozenset("pcmpgtq pcmpestri pcmpestrm pcmpistri pcmpistrm crc32 crc32b crc32w crc32l crc32q".split()),
    "POPCNT": frozenset("popcnt popcntl popcntq popcntw".split()),
    "LZCNT": frozenset("lzcnt lzcntl lzcntq lzcntw".split()),
    "BMI1": frozenset("andn bextr blsi blsmsk blsr".split()),
    "BMI2": frozenset("bzhi mulx pdep pext rorx sarx shlx shrx".split()),
    "MOVBE": frozenset(["movbe"]),
    "CX16": frozenset(["cmpxchg16b"]),
    "AES": frozenset("aesenc aesenclast aesdec aesdeclast aesimc aeskeygenassist".split()),
    "PCLMUL": frozenset(["pclmulqdq"]),
    "XSAVE": frozenset("xsave xrstor xsaveopt".split()),
    "RDRAND": frozenset("rdrand rdseed".split()),
}
MNEMONIC_TO_EXTENSION = {m: ext for ext, ms in EXTENSION_MNEMONICS.items() for m in ms}
# Beyond the baseline, but harmless without the feature: tzcnt runs as bsf on CPUs without BMI1;
# xgetbv (reading XCR0) is issued only by CPU-feature detection, after cpuid said OSXSAVE is on.
ACCEPTED_ANYWHERE = frozenset(["tzcnt", "tzcntl", "tzcntq", "tzcntw", "xgetbv"])
# Functions that check the CPU at run time before running what they contain.
DEFAULT_GUARDED = r"framebus::copy::kernels|std_detect::detect"

LOADERS = frozenset(["ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"])
PYTHON_API = re.compile(r"^_?Py")

_INSN = re.compile(r"^\s*([0-9a-f]+):\s+(?:[0-9a-f]{2} )*\s*([a-z].*)$")
_PREFIXES = frozenset("lock rep repz repnz repe repne data16 addr32 cs ds ss es fs gs notrack bnd xacquire xrelease".split())
_FUNC = re.compile(r"^[0-9a-f]+ <(.+)>:$")


@dataclasses.dataclass
class Report:
    wheel: str
    policy: str
    lines: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)

    def text(self) -> str:
        verdict = "OK" if not self.problems else f"{len(self.problems)} PROBLEM(S)"
        out = [f"{self.wheel}  [{self.policy}]  {verdict}"]
        out += [f"  {ln}" for ln in self.lines]
        out += [f"  PROBLEM: {p}" for p in self.problems]
        return "\n".join(out)


# ---- pure logic (unit-tested on small fake inputs in tests/test_check_wheels.py) -------------


def version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def policy_name_for(wheel_name: str) -> str:
    """The auditwheel policy a wheel's platform tag promises (manylinux2014 is manylinux_2_17)."""
    tags = wheel_name[:-4].split("-")[-1].split(".")
    best = None
    for tag in tags:
        if tag.startswith("manylinux2014_"):
            cand = (2, 17)
        elif tag.startswith("manylinux1_"):
            cand = (2, 5)
        elif tag.startswith("manylinux2010_"):
            cand = (2, 12)
        elif m := re.match(r"manylinux_(\d+)_(\d+)_", tag):
            cand = (int(m.group(1)), int(m.group(2)))
        else:
            continue
        best = cand if best is None else min(best, cand)  # the oldest tag is the promise
    if best is None:
        raise ValueError(f"{wheel_name}: no manylinux platform tag (this checker is for manylinux wheels)")
    return f"manylinux_{best[0]}_{best[1]}"


def arch_for(wheel_name: str) -> str:
    """The architecture of a wheel's (first) platform tag: x86_64, aarch64, ..."""
    tag = wheel_name[:-4].split("-")[-1].split(".")[0]
    m = re.match(r"(?:manylinux\d+|manylinux_\d+_\d+|musllinux_\d+_\d+|linux)_(.+)$", tag)
    if not m:
        raise ValueError(f"{wheel_name}: no Linux platform tag")
    return m.group(1)


def check_versions(needed_versions: Iterable[tuple[str, str]], allowed: dict[str, list[str]]) -> list[str]:
    """(library, version name) pairs the object requires -> problems. allowed: the policy's
    symbol_versions for the architecture ({"GLIBC": ["2.2.5", ...], ...})."""
    problems = []
    for lib, ver in sorted(set(needed_versions)):
        prefix, _, number = ver.partition("_")
        if prefix not in allowed:
            continue  # a version namespace the policy says nothing about (e.g. a bundled library's)
        if number not in allowed[prefix]:
            newest = max(allowed[prefix], key=version_key) if allowed[prefix] else "none"
            problems.append(f"needs {ver} from {lib}: the policy allows {prefix} up to {prefix}_{newest}")
    return problems


def check_unversioned(undefined: Iterable[tuple[str, str | None, bool]]) -> tuple[list[str], list[str]]:
    """(name, version or None, weak) of each undefined dynamic symbol -> (problems, notes)."""
    problems, weak = [], []
    for name, version, is_weak in undefined:
        if version is not None or PYTHON_API.match(name):
            continue
        if is_weak:
            weak.append(name)
        else:
            problems.append(
                f"undefined symbol {name!r} has no version: it binds to whatever defines it, "
                "and the extension fails to load where the C library has none"
            )
    notes = [f"weak unversioned references (null where absent, checked before use): {', '.join(sorted(weak))}"] if weak else []
    return problems, notes


def check_needed(needed: Iterable[str], allow_list: Iterable[str], bundled: Iterable[str]) -> list[str]:
    allowed = set(allow_list) | LOADERS | set(bundled)
    return [
        f"NEEDED {lib} is neither on the policy's allow-list nor shipped in the wheel" for lib in needed if lib not in allowed
    ]


def scan_disassembly(text: str) -> dict[str, dict[str, int]]:
    """objdump -d output -> {function: {extension: count}} for instructions beyond the baseline.
    The function is '?' where the output has no function labels."""
    found: dict[str, dict[str, int]] = {}
    func = "?"
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            func = m.group(1)
            continue
        m = _INSN.match(line)
        if not m:
            continue
        words = m.group(2).split(None)
        while len(words) > 1 and words[0] in _PREFIXES:
            words = words[1:]
        mnemonic, operands = words[0], " ".join(words[1:])
        if mnemonic in ACCEPTED_ANYWHERE:
            continue
        ext = MNEMONIC_TO_EXTENSION.get(mnemonic)
        if ext is None:
            if "%zmm" in operands or re.search(r"%k[0-7]\b", operands) or "{%k" in operands:
                ext = "AVX-512"
            elif "%ymm" in operands:
                ext = "AVX/AVX2"
            elif mnemonic.startswith("v") and "%xmm" in operands:
                ext = "AVX (VEX)"
            elif mnemonic.startswith(("vfmadd", "vfmsub", "vfnmadd", "vfnmsub")):
                ext = "FMA"
        if ext is not None:
            counts = found.setdefault(func, {})
            counts[ext] = counts.get(ext, 0) + 1
    return found


def check_cpu(found: dict[str, dict[str, int]], has_symbols: bool, guarded: str) -> tuple[list[str], list[str]]:
    """-> (problems, notes). Code beyond the baseline is fine only in functions matching
    `guarded`, and only where the object's symbols say which function it is in."""
    problems, notes = [], []
    pattern = re.compile(guarded)
    for func, counts in sorted(found.items()):
        what = ", ".join(f"{ext} x{n}" for ext, n in sorted(counts.items()))
        if has_symbols and func != "?" and pattern.search(func):
            notes.append(f"run-time guarded {what} in {func}")
        elif not has_symbols:
            problems.append(
                f"{what} in a stripped object: no symbol table to show it is only in run-time guarded functions"
            )
        else:
            problems.append(f"{what} in {func}, which does not select it at run time")
    return problems, notes


# ---- reading real ELF files --------------------------------------------------------------------


def elf_facts(data: bytes) -> dict:
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection

    elf = ELFFile(io.BytesIO(data))
    needed: list[str] = []
    needed_versions: list[tuple[str, str]] = []
    for sec in elf.iter_sections():
        if isinstance(sec, DynamicSection):
            needed += [t.needed for t in sec.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
        if isinstance(sec, GNUVerNeedSection):
            for verneed, auxs in sec.iter_versions():
                needed_versions += [(verneed.name, aux.name) for aux in auxs]
    versym = next((s for s in elf.iter_sections() if isinstance(s, GNUVerSymSection)), None)
    verneed = next((s for s in elf.iter_sections() if isinstance(s, GNUVerNeedSection)), None)
    index_to_name = {}
    if verneed is not None:
        for _vn, auxs in verneed.iter_versions():
            for aux in auxs:
                index_to_name[aux.entry.vna_other] = aux.name
    undefined = []
    dynsym = elf.get_section_by_name(".dynsym")
    for i, sym in enumerate(dynsym.iter_symbols() if dynsym else []):
        if i == 0 or sym.entry.st_shndx != "SHN_UNDEF":
            continue
        version = None
        if versym is not None:
            ndx = versym.get_symbol(i).entry.ndx
            if isinstance(ndx, int) and ndx > 1:
                version = index_to_name.get(ndx & 0x7FFF)
        undefined.append((sym.name, version, sym.entry.st_info.bind == "STB_WEAK"))
    symtab = elf.get_section_by_name(".symtab")
    has_symbols = symtab is not None and symtab.num_symbols() > 1
    return {"needed": needed, "needed_versions": needed_versions, "undefined": undefined, "has_symbols": has_symbols}


def disassemble(path: Path) -> str:
    return subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", "-C", str(path)], check=True, capture_output=True, text=True
    ).stdout


def load_policy(name: str, arch: str = "x86_64") -> tuple[dict[str, list[str]], list[str]]:
    import auditwheel.policy

    path = Path(auditwheel.policy.__file__).with_name("manylinux-policy.json")
    for pol in json.loads(path.read_text()):
        if pol["name"] == name or name in pol.get("aliases", []):
            return pol["symbol_versions"][arch], pol["lib_whitelist"]
    raise ValueError(f"auditwheel knows no policy {name}")


def check_wheel(wheel: Path, guarded: str) -> Report:
    policy = policy_name_for(wheel.name)
    arch = arch_for(wheel.name)
    versions, allow_list = load_policy(policy, arch)
    report = Report(wheel.name, f"{policy} {arch}")
    with zipfile.ZipFile(wheel) as zf, tempfile.TemporaryDirectory() as tmp:
        objects = [n for n in zf.namelist() if re.search(r"\.so(\.\d+)*$", n)]
        bundled = [Path(n).name for n in objects]
        if not objects:
            report.problems.append("no shared object in the wheel")
        for name in objects:
            data = zf.read(name)
            facts = elf_facts(data)
            path = Path(tmp) / Path(name).name
            path.write_bytes(data)
            glibc = sorted({v for _l, v in facts["needed_versions"] if v.startswith("GLIBC_")}, key=version_key)
            report.lines.append(
                f"{name}: {len(data) // 1024} KiB, NEEDED {', '.join(facts['needed'])}; "
                f"newest glibc version needed: {glibc[-1] if glibc else 'none'}; "
                f"symbols: {'yes' if facts['has_symbols'] else 'stripped'}"
            )
            report.problems += check_versions(facts["needed_versions"], versions)
            report.problems += check_versions([("?", v) for _n, v, _w in facts["undefined"] if v], versions)
            problems, notes = check_unversioned(facts["undefined"])
            report.problems += problems
            report.lines += notes
            report.problems += check_needed(facts["needed"], allow_list, bundled)
            if arch != "x86_64":
                report.lines.append(f"machine code: not scanned (the CPU-feature scan knows x86-64 only, not {arch})")
                continue
            found = scan_disassembly(disassemble(path))
            problems, notes = check_cpu(found, facts["has_symbols"], guarded)
            report.problems += problems
            report.lines += notes
            if not found:
                report.lines.append("machine code: x86-64 baseline only (SSE2; tzcnt and xgetbv accepted)")
    report.problems = list(dict.fromkeys(report.problems))
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheels", nargs="*", type=Path, help="wheels to check (default: dist/*.whl)")
    ap.add_argument("--guarded", default=DEFAULT_GUARDED, help="regex of functions allowed code beyond the baseline")
    args = ap.parse_args(argv)
    wheels = args.wheels or sorted(Path("dist").glob("*.whl"))
    if not wheels:
        print("check-wheels: no wheels given and none in dist/ (run scripts/build-wheels.sh)", file=sys.stderr)
        return 2
    failed = 0
    for wheel in wheels:
        try:
            report = check_wheel(wheel, args.guarded)
        except (ValueError, OSError, zipfile.BadZipFile) as e:
            print(f"{wheel.name}  PROBLEM: {e}")
            failed += 1
            continue
        print(report.text())
        failed += bool(report.problems)
    print(f"check-wheels: {len(wheels) - failed} of {len(wheels)} wheel(s) OK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
