#!/usr/bin/env python3
"""Print the longest non-test Rust functions of the workspace (none over 100 lines).

Usage: tests/tools/longest-fns.py [--top N] [--max LINES] [ROOT]
  --max LINES  exit 1 when a non-test function is longer (the list then shows only those)

A function's length is its lines from `fn` to its closing brace. Skipped as tests: files named
tests.rs or *_test.rs, files under tests/ or benches/, and items under `#[cfg(test)]`. Braces in
strings, chars and comments are ignored (a small lexer, not a full parser: raw strings r#".."#
and nested block comments are handled).
"""
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


def functions(path):
    """(name, first line, lines) of each non-test function of one file."""
    text = strip(open(path, encoding='utf-8', errors='replace').read())
    lines_at = [0]
    for k, ch in enumerate(text):
        if ch == '\n': lines_at.append(k + 1)
    line_of = lambda pos: __import__('bisect').bisect_right(lines_at, pos)
    found, depth, stack, test_depth = [], 0, [], None
    pending_test = False
    i = 0
    for m in re.finditer(r'#\[cfg\(test\)\]|\bfn\s+[A-Za-z_][A-Za-z0-9_]*|[{};]', text):
        tok = m.group(0)
        if tok == '#[cfg(test)]':
            pending_test = True
        elif tok.startswith('fn'):
            stack.append(('fn', FN.match(tok).group(1), m.start(), depth))
        elif tok == '{':
            if pending_test and test_depth is None:
                test_depth = depth
            pending_test = False
            depth += 1
        elif tok == ';':
            pending_test = False
            # A declaration without a body (trait method, extern fn).
            if stack and stack[-1][0] == 'fn' and stack[-1][3] == depth:
                stack.pop()
        elif tok == '}':
            depth -= 1
            if test_depth is not None and depth == test_depth:
                test_depth = None
            while stack and stack[-1][3] > depth:
                stack.pop()
            if stack and stack[-1][0] == 'fn' and stack[-1][3] == depth:
                _, name, start, _ = stack.pop()
                if test_depth is None:
                    first, last = line_of(start), line_of(m.start())
                    found.append((name, first, last - first + 1))
    return found


def main(argv):
    top, limit, root = 25, None, '.'
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == '--top': top = int(args.pop(0))
        elif a == '--max': limit = int(args.pop(0))
        else: root = a
    rows = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ('target', '.git', 'tests', 'benches', 'examples') and not x.startswith('.')]
        for f in files:
            if not f.endswith('.rs') or f == 'tests.rs' or f.endswith('_test.rs'):
                continue
            p = os.path.join(d, f)
            rows += [(n, name, p, first) for name, first, n in functions(p)]
    rows.sort(reverse=True)
    over = [r for r in rows if limit is not None and r[0] > limit]
    for n, name, p, first in (over if limit is not None else rows[:top]):
        print(f'{n:5}  {p}:{first}  {name}')
    if limit is not None:
        print(f'{len(over)} non-test function(s) over {limit} lines')
        return 1 if over else 0
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
