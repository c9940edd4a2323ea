#!/usr/bin/env python3
"""Non-test code lines of the workspace (issue 48's measure): every tracked `.rs` file except
those under a `tests/` folder and those named `tests.rs` or `*_tests.rs`, each cut at its test
module (the first `#[cfg(test)]` followed by a `mod` item), blank lines and `//` lines (comments,
doc comments) not counted.

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
    return not (p.name == "tests.rs" or p.name.endswith("_tests.rs"))


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
    return [f for f in out.stdout.split() if counted(f)]


def selftest() -> None:
    text = "// c\nfn a() {}\n\n#[cfg(test)]\nfn helper() {}\n#[cfg(test)]\nmod tests {\n fn t() {}\n}\n"
    assert code_lines(text) == 3, code_lines(text)  # fn a, the cfg(test) fn and its attribute
    assert code_lines("#[cfg(test)]\nmod fakes;\nfn b() {}\n") == 3  # a `mod x;` is no cut
    assert not counted("bench-core/tests/cli.rs") and not counted("a/src/x_tests.rs")
    assert not counted("a/src/load/tests.rs") and counted("a/src/load.rs")
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
