#!/usr/bin/env python3
"""Print the longest non-test Rust functions of the workspace (none over 100 lines).

Usage: tests/tools/longest-fns.py [--top N] [--max LINES] [ROOT]  |  --selftest
  --max LINES  exit 1 when a non-test function is longer (the list then shows only those)
  --selftest   check the rules below on a small tree of their cases

A function's length is its lines from `fn` to its closing brace. Skipped as tests: files named
tests.rs or *_test.rs, files under tests/ or benches/, the files of `#[cfg(test)] mod NAME;`,
everything from a file's test module (`#[cfg(test)] mod NAME {`) on, and any other item under
`#[cfg(test)]`. Examples are counted (they are code a reader reads). Braces in
strings, chars and comments are ignored (a small lexer, not a full parser: raw strings r#".."#
and nested block comments are handled).
"""
import bisect
import os
import re
import sys

FN = re.compile(r'\bfn\s+([A-Za-z_][A-Za-z0-9_]*)')


def strip(src):
    """The source with string, char and comment contents blanked (newlines kept)."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif src.startswith('/*', i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith('/*', j): depth += 1; j += 2
                elif src.startswith('*/', j): depth -= 1; j += 2
                else: j += 1
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == 'r' and re.match(r'r#*"', src[i:i + 20]) and not (i and (src[i - 1].isalnum() or src[i - 1] == '_')):
            hashes = len(re.match(r'r(#*)"', src[i:]).group(1))
            end = '"' + '#' * hashes
            j = src.find(end, i + 2 + hashes)
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == '"' or (c == 'b' and src.startswith('b"', i)):
            j = i + (2 if c == 'b' else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == '\\' else 1
            out.append(re.sub(r'[^\n]', ' ', src[i:j + 1])); i = j + 1
        elif c == "'":
            m = re.match(r"'(\\.|[^\\'])'", src[i:i + 12]) or re.match(r"'\\u\{[0-9a-fA-F]+\}'", src[i:i + 14])
            if m:
                out.append(' ' * len(m.group(0))); i += len(m.group(0))
            else:  # a lifetime
                out.append(c); i += 1
        else:
            out.append(c); i += 1
    return ''.join(out)


TOKEN = re.compile(
    r'#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(?P<mod>[A-Za-z_][A-Za-z0-9_]*)\s*(?P<end>[{;])'
    r'|#\[cfg\(test\)\]|\bfn\s+[A-Za-z_][A-Za-z0-9_]*|[{};()\[\]]'
)


def scan(path):
    """(functions, test modules) of one file: (name, first line, lines) of each non-test
    function, and the names of the `#[cfg(test)] mod NAME;` it declares (files of tests).

    The file is cut at its test module (`#[cfg(test)] mod NAME {`): what follows is tests.
    Any other `#[cfg(test)]` item (a helper fn, an impl) is skipped alone, and the rest of the
    file is read on. A `;` ends a declaration without a body only outside brackets, so
    `fn f(x: [u8; 4]) {` keeps its body."""
    text = strip(open(path, encoding='utf-8', errors='replace').read())
    lines_at = [0]
    for k, ch in enumerate(text):
        if ch == '\n': lines_at.append(k + 1)
    line_of = lambda pos: bisect.bisect_right(lines_at, pos)
    found, test_mods, stack = [], [], []
    depth, brackets, outer = 0, 0, []
    test_depth, pending_test = None, False
    for m in TOKEN.finditer(text):
        tok = m.group(0)
        if m.group('mod'):
            if m.group('end') == '{':
                break
            test_mods.append(m.group('mod'))
        elif tok == '#[cfg(test)]':
            pending_test = True
        elif tok.startswith('fn'):
            stack.append((FN.match(tok).group(1), m.start(), depth))
        elif tok in '([':
            brackets += 1
        elif tok in ')]':
            brackets = max(0, brackets - 1)
        elif tok == '{':
            if pending_test and test_depth is None:
                test_depth = depth
            pending_test = False
            outer.append(brackets)
            brackets, depth = 0, depth + 1
        elif tok == ';':
            if brackets:
                continue
            pending_test = False
            # A declaration without a body (trait method, extern fn).
            if stack and stack[-1][2] == depth:
                stack.pop()
        elif tok == '}':
            depth = max(0, depth - 1)
            brackets = outer.pop() if outer else 0
            while stack and stack[-1][2] > depth:
                stack.pop()
            if stack and stack[-1][2] == depth:
                name, start, _ = stack.pop()
                if test_depth is None:
                    first, last = line_of(start), line_of(m.start())
                    found.append((name, first, last - first + 1))
            if test_depth is not None and depth == test_depth:
                test_depth = None
    return found, test_mods


def functions(path):
    """(name, first line, lines) of each non-test function of one file."""
    return scan(path)[0]


def module_file(path, name):
    """The file of `mod NAME;` declared in `path`, if there is one."""
    d, f = os.path.split(path)
    if f not in ('mod.rs', 'lib.rs', 'main.rs'):
        d = os.path.join(d, f[:-3])
    for c in (os.path.join(d, name + '.rs'), os.path.join(d, name, 'mod.rs')):
        if os.path.exists(c):
            return c
    return None


def rows_of(root):
    """(lines, name, path, first line) of every non-test function under `root`."""
    scanned, tests = {}, set()
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ('target', '.git', 'tests', 'benches') and not x.startswith('.')]
        for f in files:
            if not f.endswith('.rs') or f == 'tests.rs' or f.endswith('_test.rs'):
                continue
            p = os.path.join(d, f)
            scanned[p], mods = scan(p)
            tests.update(filter(None, (module_file(p, m) for m in mods)))
    # A `#[cfg(test)] mod NAME;` file is tests (files named tests.rs were skipped above).
    return [(n, name, p, first) for p, fns in scanned.items() if p not in tests
            for name, first, n in fns]


def selftest():
    """The rules above on a small tree: exactly the non-test functions are seen."""
    import tempfile
    body = '{\n' + '    x();\n' * 3 + '}\n'
    files = {
        # `;` inside brackets before a body; a mid-file test helper; code after it; the
        # test module, after which nothing counts.
        'a/src/lib.rs': 'mod x;\n#[cfg(test)]\nmod fixtures;\n'
                        'pub fn arr(x: [u8; 4], y: &[(u8, [u16; 2])]) -> [u8; 4] ' + body +
                        'trait T { fn decl(&self, a: [u8; 2]); fn dflt(&self) ' + body + '}\n'
                        '#[cfg(test)]\nfn helper(x: [u8; 4]) ' + body +
                        'fn after() { let a = [0u8; 3]; let f = |v: [u8; 2]| { v[0]; }; }\n'
                        '#[cfg(test)]\nmod tests {\n    fn in_tests() ' + body + '}\n'
                        'fn past_the_test_module() ' + body,
        'a/src/x.rs': '#[cfg(test)]\nimpl X { fn test_only() ' + body + '}\n'
                      'fn kept<const N: usize>(a: [u8; N]) where [u8; N]: Sized ' + body,
        'a/src/fixtures.rs': 'pub fn fake() ' + body,
        'a/tests/it.rs': 'fn integration() ' + body,
    }
    with tempfile.TemporaryDirectory() as d:
        for path, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(d, path)), exist_ok=True)
            with open(os.path.join(d, path), 'w') as f:
                f.write(text)
        got = sorted((name, os.path.relpath(p, d), n) for n, name, p, _ in rows_of(d))
    want = [('after', 'a/src/lib.rs', 1), ('arr', 'a/src/lib.rs', 5),
            ('dflt', 'a/src/lib.rs', 5), ('kept', 'a/src/x.rs', 5)]
    if got != want:
        print(f'selftest: found {got}, want {want}')
        return 1
    print('selftest: ok')
    return 0


def main(argv):
    top, limit, root = 25, None, '.'
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == '--selftest': return selftest()
        elif a == '--top': top = int(args.pop(0))
        elif a == '--max': limit = int(args.pop(0))
        else: root = a
    rows = sorted(rows_of(root), reverse=True)
    over = [r for r in rows if limit is not None and r[0] > limit]
    for n, name, p, first in (over if limit is not None else rows[:top]):
        print(f'{n:5}  {p}:{first}  {name}')
    if limit is not None:
        print(f'{len(over)} non-test function(s) over {limit} lines')
        return 1 if over else 0
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
