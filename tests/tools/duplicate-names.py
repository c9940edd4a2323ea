#!/usr/bin/env python3
"""List the workspace's public items defined more than once under one name (one name per
thing; a reader who greps `judge` or `Config` should find one thing).

Usage: tests/tools/duplicate-names.py [--allow FILE] [ROOT]  |  --selftest
  exit 1 when it prints a collision not listed in FILE (lines `fn|mod|type NAME`: the ones
  not renamed yet), or a line of FILE that no longer collides (so the list shrinks)

Counted: module-level `pub` (any `pub(...)` too) fn, struct, enum, type, trait and mod items of
every crate's src/ (a `mod` counts whatever its visibility: a file is a place a reader looks for).
Not counted: test code (files named tests.rs or *_test.rs, files under tests/, benches/ or
examples/, items under `#[cfg(test)]`), items inside impl and trait blocks (a method is named
through its type: `Report::new`, `impl Display for X { fn fmt }`), items nested in functions,
and `fn main`. The lexer is longest-fns.py's (strings, chars and comments blanked).
"""
import importlib.util
import os
import re
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location('longest_fns', os.path.join(HERE, 'longest-fns.py'))
longest_fns = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(longest_fns)

VIS = r'(?P<vis>pub(?:\s*\([^)]*\))?\s+)?'
QUAL = r'(?:(?:const|async|unsafe|extern(?:\s+"[^"]*")?)\s+)*'
ITEM = re.compile(VIS + QUAL + r'\b(?P<kind>fn|struct|enum|type|trait|mod|union)\s+(?P<name>[A-Za-z_][A-Za-z0-9_]*)')
TOKEN = re.compile(
    r'#\[cfg\(test\)\]'
    r'|' + VIS + QUAL + r'\b(?:fn|struct|enum|type|trait|mod|union)\s+[A-Za-z_][A-Za-z0-9_]*'
    r'|\bimpl\b|[{};]'
)
CLASS = {'fn': 'fn', 'mod': 'mod', 'struct': 'type', 'enum': 'type', 'type': 'type',
         'trait': 'type', 'union': 'type'}
SKIP_DIRS = ('target', '.git', 'tests', 'benches', 'examples')


def items(path):
    """(kind, name, line) of each counted item of one file."""
    text = longest_fns.strip(open(path, encoding='utf-8', errors='replace').read())
    found = []
    # One entry per open brace: 'mod' (items inside count), or 'other' (impl/trait/fn/type
    # bodies, and everything under #[cfg(test)]: nothing inside counts).
    blocks = []
    pending = None  # what the next '{' opens
    test_next = False
    for m in TOKEN.finditer(text):
        tok = m.group(0)
        if tok == '#[cfg(test)]':
            test_next = True
        elif tok == '{':
            kind = 'other' if test_next else (pending or 'other')
            blocks.append(kind)
            pending, test_next = None, False
        elif tok == '}':
            if blocks:
                blocks.pop()
            pending = None
        elif tok == ';':
            pending, test_next = None, False
        elif tok == 'impl':
            pending = pending or 'other'
        else:
            im = ITEM.match(tok)
            kind, name = im.group('kind'), im.group('name')
            at_module_level = all(b == 'mod' for b in blocks)
            if pending is None:
                pending = 'mod' if kind == 'mod' else 'other'
            if not at_module_level or test_next:
                continue
            if kind == 'fn' and name == 'main':
                continue
            if im.group('vis') or kind == 'mod':
                found.append((kind, name, text.count('\n', 0, m.start()) + 1))
    return found


def collisions(root):
    seen = defaultdict(list)
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith('.'))
        for f in sorted(files):
            if not f.endswith('.rs') or f == 'tests.rs' or f.endswith('_test.rs'):
                continue
            p = os.path.join(d, f)
            for kind, name, line in items(p):
                # Types collide with types, functions with functions, modules with modules
                # (`mod judge` holding `fn judge` is one thing, not two).
                seen[(CLASS[kind], name)].append(f'{os.path.relpath(p, root)}:{line}')
    return {k: v for k, v in sorted(seen.items()) if len(v) > 1}


def selftest():
    """The rules above on a small tree: exactly the real collisions are found."""
    import tempfile
    files = {
        'a/src/lib.rs': 'pub mod x;\npub fn judge() {}\nimpl A { pub fn new() {} }\n'
                        'impl fmt::Display for A { fn fmt(&self) {} }\npub struct Config;\n'
                        '#[cfg(test)]\nmod tests { pub fn helper() {} }\n',
        'a/src/x.rs': 'pub(crate) fn judge() { fn inner() {} }\nimpl B { pub fn new() {} }\n'
                      'pub enum Config {}\nfn private() {}\nconst S: &str = "pub fn judge";\n',
        'b/src/main.rs': 'fn main() {}\nmod x;\nfn private() {}\npub trait T { fn helper(); }\n'
                         '#[cfg(test)]\nmod tests { pub fn helper() {} fn inner() {} }\n',
        'b/src/x.rs': 'fn inner() {}\n',
        'b/tests/it.rs': 'pub fn judge() {}\n',
    }
    with tempfile.TemporaryDirectory() as d:
        for path, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(d, path)), exist_ok=True)
            with open(os.path.join(d, path), 'w') as f:
                f.write(text)
        got = sorted(collisions(d))
    want = [('fn', 'judge'), ('mod', 'x'), ('type', 'Config')]
    if got != want:
        print(f'selftest: found {got}, want {want}')
        return 1
    print('selftest: ok')
    return 0


def main(argv):
    args = list(argv)
    if args == ['--selftest']:
        return selftest()
    allow_path = None
    if args[:1] == ['--allow']:
        allow_path = args[1]
        args = args[2:]
    root = args[0] if args else '.'
    allowed = set()
    if allow_path:
        for n, raw in enumerate(open(allow_path, encoding='utf-8'), 1):
            line = raw.split('#', 1)[0].split()
            if not line:
                continue
            if len(line) != 2 or line[0] not in ('fn', 'mod', 'type'):
                print(f'{allow_path}:{n}: expected "fn|mod|type NAME", got {raw.strip()!r}')
                return 2
            allowed.add((line[0], line[1]))
    found = collisions(root)
    new = {k: v for k, v in found.items() if k not in allowed}
    for (cls, name), places in new.items():
        print(f'{cls} {name}: {", ".join(places)}')
    stale = sorted(allowed - set(found))
    for cls, name in stale:
        print(f'{allow_path}: {cls} {name} is no longer defined twice: remove the line')
    if new:
        print(f'{len(new)} name(s) defined more than once (rename so each names one thing)')
    return 1 if new or stale else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
