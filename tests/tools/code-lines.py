#!/usr/bin/env python3
"""Non-test code lines of the workspace (issue 48's measure): every tracked `.rs` file except
those under a `tests/` folder, those named `tests.rs`, `*_tests.rs` or `*_test.rs`, and the files
of a `#[cfg(test)] mod NAME;` (test modules in a file of their own: longest-fns.py skips the same
files), each cut at its test module (the first `#[cfg(test)]` followed by a `mod` item), blank
lines and `//` lines (comments, doc comments) not counted.

  python3 tests/tools/code-lines.py [--by-dir] [--selftest]
"""
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CFG_TEST = re.compile(r"^\s*#\[cfg\(test\)\]\s*$")
MOD = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?mod\s+\w+")


def counted(path: str) -> bool:
    p = Path(path)
    if p.suffix != ".rs" or "tests" in p.parts[:-1]:
        return False
    return not (p.name == "tests.rs" or p.name.endswith(("_tests.rs", "_test.rs")))


# A module compiled only for tests: `#[cfg(test)]`, `#[cfg(all(test, feature = ...))]` (tests of a
# feature build) or `#[cfg(any(test, feature = "test-support"))]` (helpers other crates' tests
# use; no product build turns that feature on).
TEST_CFG = r"#\[cfg\((?:test|all\(test\b[^\]]*\)|any\(test\s*,\s*feature\s*=\s*\"test-support\"\s*\))\)\]"
TEST_MOD_FILE = re.compile(TEST_CFG + r"\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")


def test_module_files(path: str, text: str) -> set:
    """The files that `path`'s `#[cfg(test)] mod NAME;` items declare (NAME.rs or NAME/mod.rs,
    beside a mod.rs/lib.rs/main.rs, else in the folder named after the file)."""
    p = Path(path)
    base = p.parent if p.name in ("mod.rs", "lib.rs", "main.rs") else p.parent / p.stem
    return {str(base / f"{n}{tail}") for n in TEST_MOD_FILE.findall(text) for tail in (".rs", "/mod.rs")}


def code_lines(text: str) -> int:
    lines = text.splitlines()
    n = 0
    for i, line in enumerate(lines):
        if CFG_TEST.match(line):
            nxt = next((l for l in lines[i + 1:] if l.strip() and not l.strip().startswith("#[")), "")
            if MOD.match(nxt) and "{" in nxt:
                break  # the test module: the rest of the file is tests
        s = line.strip()
        if s and not s.startswith("//"):
            n += 1
    return n


def tracked(root: Path) -> list:
    out = subprocess.run(["git", "-C", str(root), "ls-files", "*.rs"], capture_output=True, text=True, check=True)
    files = [f for f in out.stdout.split() if counted(f)]
    tests = set()
    for f in files:
        tests |= test_module_files(f, (root / f).read_text(errors="replace"))
    return [f for f in files if f not in tests]


def selftest() -> None:
    text = "// c\nfn a() {}\n\n#[cfg(test)]\nfn helper() {}\n#[cfg(test)]\nmod tests {\n fn t() {}\n}\n"
    assert code_lines(text) == 3, code_lines(text)  # fn a, the cfg(test) fn and its attribute
    assert code_lines("#[cfg(test)]\nmod fakes;\nfn b() {}\n") == 3  # a `mod x;` is no cut
    assert not counted("bench-core/tests/cli.rs") and not counted("a/src/x_tests.rs")
    assert not counted("a/src/load/tests.rs") and counted("a/src/load.rs")
    assert not counted("a/src/table_test.rs")
    decl = "#[cfg(test)]\nmod table;\n#[cfg(test)]\n#[allow(dead_code)]\nmod other;\nmod real;\n"
    assert test_module_files("a/src/judge/mod.rs", decl) >= {"a/src/judge/table.rs", "a/src/judge/other.rs"}
    assert "a/src/judge/real.rs" not in test_module_files("a/src/judge/mod.rs", decl)
    assert test_module_files("a/src/model/thresholds.rs", decl) >= {"a/src/model/thresholds/table.rs"}
    feat = '#[cfg(all(test, feature = "gpu"))]\nmod trip;\n#[cfg(any(test, feature = "test-support"))]\npub mod support;\n#[cfg(feature = "gpu")]\nmod gpu;\n'
    got = test_module_files("a/src/lib.rs", feat)
    assert {"a/src/trip.rs", "a/src/support.rs"} <= got and "a/src/gpu.rs" not in got, got
    print("code-lines.py: selftest passed")


def main() -> None:
    if "--selftest" in sys.argv:
        return selftest()
    root = Path(__file__).resolve().parents[2]
    per = {}
    for f in tracked(root):
        n = code_lines((root / f).read_text(errors="replace"))
        key = "/".join(Path(f).parts[:3]) if "--by-dir" in sys.argv else "total"
        per[key] = per.get(key, 0) + n
    for k, v in sorted(per.items(), key=lambda kv: -kv[1]):
        print(f"{v:7d}  {k}")
    if "--by-dir" in sys.argv:
        print(f"{sum(per.values()):7d}  total")


if __name__ == "__main__":
    main()
