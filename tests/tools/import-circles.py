#!/usr/bin/env python3
"""List the import circles of a Rust crate: modules that name each other, directly or through
others (issue 48.5: a circle means neither module can be read, tested or moved without the other).

Usage: tests/tools/import-circles.py [--allow FILE] [SRC]...  |  --selftest
  SRC: a crate's src folder (default spank-plugin/src). Exit 1 when any SRC has a circle; each is
  printed with, for every edge in it, the first line that makes it. FILE lists circles not broken
  yet, a line `SRC MODULE` each (`bench-core/src measure::runner`: the circle among the modules
  of measure::runner): those are printed but pass, and a line that no longer is a circle fails
  (so the list only shrinks).

The graph, at every level: the children of one module (the crate root, or a folder's module) are
its nodes, each standing for its whole subtree, plus the parent's own file ("itself"): a child that
names an item the parent defines depends on the parent, and the parent that calls into a child
depends on it. So a loop through sibling folders (facts -> measure -> report -> facts) is seen
where it closes, and so is `lib.rs` defining the `Error` that its own children return. A name that
the parent only re-exports (`pub use child::X`) counts as the child's.

Read: `crate::`, `super::`, `self::` paths anywhere in a file (use lines, nested groups, paths in
expressions), and in a file that declares `mod NAME;` its bare `NAME::` paths. Not read: test
modules (from `#[cfg(test)] mod NAME {` to the end of the file, where this workspace keeps them),
test files (`tests.rs`, `*_test.rs`, `*_tests.rs`, and the files of `#[cfg(test)] mod NAME;`),
comments and strings (longest-fns.py's lexer blanks them), `bin/` and a `main.rs` beside a `lib.rs`
(other crates, which use this one from outside).
"""
import importlib.util
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location('longest_fns', os.path.join(HERE, 'longest-fns.py'))
longest_fns = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(longest_fns)

TEST_MOD = re.compile(r'#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{')
TEST_MOD_FILE = re.compile(r'#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;')
MOD_DECL = re.compile(r'(?:^|[;{}\]]\s*)(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;', re.M)
ROOTED = re.compile(r'(?<![\w:$])(crate|super|self)\b')
REEXPORT = re.compile(r'\bpub(?:\s*\([^)]*\))?\s+use\s+([^;]*);')
IDENT = re.compile(r'\s*([A-Za-z_]\w*|\*|\{)')
# `pub(crate)`, `pub(super)`, `pub(in crate::a)`: who may see an item, not a use of a module.
VISIBILITY = re.compile(r'\bpub\s*\(\s*(?:crate|super|self|in\s+[^)]*)\)')


def is_test_file(name):
    return name == 'tests.rs' or name.endswith('_test.rs') or name.endswith('_tests.rs')


def module_of(rel):
    """The module path of a file: lib.rs -> (), measure/runner/timed.rs -> (measure, runner, timed)."""
    if rel in ('lib.rs', 'main.rs'):
        return ()
    parts = rel[:-3].split('/')
    return tuple(parts[:-1] if parts[-1] == 'mod' else parts)


def tree(text, i):
    """The paths of a use tree starting at text[i] (`a::b`, `a::{b, c::d}`, `a::*`), each a list
    of segments, and where it ends."""
    m = IDENT.match(text, i)
    if not m:
        return [[]], i
    tok, i = m.group(1), m.end()
    if tok == '*':
        return [[]], i
    if tok == '{':
        out = []
        while True:
            sub, i = tree(text, i)
            out.extend(sub)
            m = re.compile(r'\s*(,|\})').match(text, i)
            if not m:
                return out, i
            i = m.end()
            if m.group(1) == '}':
                return out, i
            if re.compile(r'\s*\}').match(text, i):
                return out, re.compile(r'\s*\}').match(text, i).end()
    m = re.compile(r'\s*::\s*').match(text, i)
    if not m:
        return [[tok]], i
    rest, i = tree(text, m.end())
    return [[tok] + r for r in rest], i


def references(here, text, children):
    """(line, absolute path) for every module path the text names."""
    out = []
    text = VISIBILITY.sub(lambda m: 'pub' + ' ' * (len(m.group(0)) - 3), text)
    for m in ROOTED.finditer(text):
        segs, _ = tree(text, m.start())
        line = text.count('\n', 0, m.start()) + 1
        for seg in segs:
            base = []
            for j, s in enumerate(seg):
                if s == 'crate' and j == 0:
                    base = []
                elif s == 'self' and j == 0:
                    base = list(here)
                elif s == 'super':
                    base = (base if j else list(here))[:-1]
                elif s == 'self':
                    continue
                else:
                    out.append((line, tuple(base + seg[j:])))
                    break
            else:
                out.append((line, tuple(base)))
    for name in children:
        for m in re.finditer(r'(?<![\w:$])' + name + r'\s*::', text):
            segs, _ = tree(text, m.start())
            line = text.count('\n', 0, m.start()) + 1
            out.extend((line, tuple(here) + tuple(s)) for s in segs)
    return out


def read_crate(src):
    """{module path: (rel, text)} of the crate's non-test files, stripped and cut at tests."""
    files, test_mods = {}, set()
    has_lib = os.path.exists(os.path.join(src, 'lib.rs'))
    for d, dirs, names in os.walk(src):
        dirs[:] = sorted(x for x in dirs if not (d == src and x == 'bin'))
        for f in sorted(names):
            rel = os.path.relpath(os.path.join(d, f), src)
            if not f.endswith('.rs') or is_test_file(f) or (has_lib and rel == 'main.rs'):
                continue
            text = longest_fns.strip(open(os.path.join(d, f), encoding='utf-8', errors='replace').read())
            here = module_of(rel)
            test_mods.update(here + (n,) for n in TEST_MOD_FILE.findall(text))
            cut = TEST_MOD.search(text)
            files[here] = (rel, text[:cut.start()] if cut else text)
    return {k: v for k, v in files.items() if not any(k[:len(t)] == t for t in test_mods)}


def resolver(files):
    """A function from a named path to the module it lands in, re-exports followed."""
    reexports = {}
    for here, (rel, text) in files.items():
        kids = MOD_DECL.findall(text)
        for m in REEXPORT.finditer(text):
            for _, path in references(here, 'use ' + m.group(1) + ';', kids) + [
                    (0, tuple(here) + tuple(s)) for s in tree(m.group(1), 0)[0]
                    if s and s[0] not in ('crate', 'super', 'self') and s[0] in kids]:
                if path:
                    alias = re.search(r'\bas\s+(\w+)\s*$', m.group(1))
                    reexports[(here, alias.group(1) if alias else path[-1])] = path

    def land(path, depth=0):
        best = ()
        for k in range(len(path), -1, -1):
            if path[:k] in files:
                best = path[:k]
                break
        nxt = path[len(best):len(best) + 1]
        if nxt and (best, nxt[0]) in reexports and depth < 8:
            target = reexports[(best, nxt[0])]
            return land(target + path[len(best) + 1:], depth + 1)
        return best
    return land


def circles(src):
    """[(parent module, [members], [(from, to, 'rel:line')])] for every circle in the crate."""
    files = read_crate(src)
    land = resolver(files)
    edges = {}  # parent -> {(from, to): 'rel:line'}
    for here, (rel, text) in files.items():
        # A re-export is the facade of a child, not a use of it: the names land in the child.
        own = REEXPORT.sub(lambda m: re.sub(r'[^\n]', ' ', m.group(0)), text)
        for line, path in references(here, own, MOD_DECL.findall(text)):
            to = land(path)
            if to == here:
                continue
            k = 0
            while k < min(len(here), len(to)) and here[k] == to[k]:
                k += 1
            parent = here[:k]
            a = here[k] if len(here) > k else None
            b = to[k] if len(to) > k else None
            edges.setdefault(parent, {}).setdefault((a, b), f'{rel}:{line}')
    found = []
    for parent in sorted(edges):
        graph = {}
        for (a, b) in edges[parent]:
            graph.setdefault(a, set()).add(b)
        for comp in strongly_connected(graph):
            if len(comp) > 1:
                inside = sorted(((a, b, w) for (a, b), w in edges[parent].items()
                                 if a in comp and b in comp), key=where_key)
                found.append((parent, sorted(comp, key=name), inside))
    return found


def where_key(edge):
    rel, line = edge[2].rsplit(':', 1)
    return rel, int(line)


def name(node):
    return '(itself)' if node is None else node


def strongly_connected(graph):
    """Tarjan's components of {node: {node}} (iterative: no recursion limit)."""
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]
    nodes = set(graph) | {b for bs in graph.values() for b in bs}
    for start in sorted(nodes, key=name):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()), key=name)))]
        index[start] = low[start] = counter[0]; counter[0] += 1
        stack.append(start); on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, StopIteration)
            if w is StopIteration:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        x = stack.pop(); on.discard(x); comp.add(x)
                        if x == v:
                            break
                    comps.append(comp)
            elif w not in index:
                index[w] = low[w] = counter[0]; counter[0] += 1
                stack.append(w); on.add(w)
                work.append((w, iter(sorted(graph.get(w, ()), key=name))))
            elif w in on:
                low[v] = min(low[v], index[w])
    return comps


def report(src, allowed=frozenset()):
    """Prints the circles of `src`; returns the keys (`SRC MODULE`) of those not in `allowed`
    and the keys of all it found."""
    found = circles(src)
    rel = os.path.relpath(os.path.abspath(src), os.path.join(HERE, '..', '..'))
    keys, new = set(), []
    for parent, members, inside in found:
        where = '::'.join(parent) or 'the crate root'
        key = f'{rel} {"::".join(parent) or "crate"}'
        keys.add(key)
        if key not in allowed and key not in new:
            new.append(key)
        said = ' (in the allow list: not broken yet)' if key in allowed else ''
        print(f'{src}: import circle among the modules of {where}: {", ".join(map(name, members))}{said}')
        for a, b, w in inside:
            print(f'  {w}: {name(a)} -> {name(b)}')
    print(f'{src}: {len(found)} import circle(s)')
    return new, keys


def read_allow(path):
    """The `SRC MODULE` lines of an allow list (`#` starts a comment)."""
    lines = (l.split('#', 1)[0].split() for l in open(path, encoding='utf-8'))
    return {' '.join(l) for l in lines if l}


def stale(allowed, srcs, found):
    """The allowed lines of a SRC checked now that name no circle any more."""
    rels = {os.path.relpath(os.path.abspath(s), os.path.join(HERE, '..', '..')) for s in srcs}
    return sorted(a for a in allowed if a.split()[0] in rels and a not in found)


def selftest():
    with tempfile.TemporaryDirectory() as t:
        def put(rel, body):
            p = os.path.join(t, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            open(p, 'w').write(body)
        put('lib.rs', 'pub mod a;\npub mod b;\npub mod c;\nmod e;\npub mod f;\npub mod g;\n'
            'pub use g::Thing;\npub mod h;\npub use self::h::Other;\n#[cfg(test)]\nmod t;\n'
            'pub enum Error { A(a::AError) }\nfn go() { e::run(); g::g(); }\n')
        # a <-> the root (Error names a::AError; a returns crate::Error).
        put('a.rs', 'use crate::Error;\npub struct AError;\n')
        # b -> c -> b through a nested group and an expression path.
        put('b.rs', 'use crate::{c::{self, X}, f};\n')
        put('c.rs', 'fn f() { super::b::g(); }\n// crate::a::x\nfn h() { let s = "crate::a"; }\n'
            '#[cfg(test)]\nmod tests { use crate::a::AError; }\n')
        # e names a re-exported name of the root: that is g's, so no circle with the root.
        put('e.rs', 'use crate::Thing;\npub fn run() {}\n')
        # f/x <-> f/y inside folder f, and f -> a (no way back).
        put('f/mod.rs', 'pub mod x;\npub mod y;\n')
        put('f/x.rs', 'use super::y::Y;\npub struct X;\nuse crate::a::AError;\n')
        put('f/y.rs', 'pub struct Y(super::x::X);\n')
        # g says who may see its items: no use of the root or of its parent.
        put('g.rs', 'pub struct Thing;\npub(crate) fn g() {}\npub(super) struct G;\n'
            'pub(in crate::a) fn h() {}\n')
        # h names the root's Error; the root only re-exports h's Other: no circle.
        put('h.rs', 'pub struct Other(crate::Error);\n')
        put('t.rs', 'use crate::b::x;\n')
        put('tests.rs', 'use crate::c::y;\n')
        put('bin/tool.rs', 'use crate::a::x;\n')
        got = [(p, m) for p, m, _ in circles(t)]
        want = [((), ['b', 'c']), ((), [None, 'a']), (('f',), ['x', 'y'])]
        if sorted(got, key=repr) != sorted(want, key=repr):
            print(f'selftest: found {got}, want {want}')
            return 1
        # An allowed circle passes; one no longer there is a stale line.
        rel = os.path.relpath(t, os.path.join(HERE, '..', '..'))
        allowed = {f'{rel} f', f'{rel} gone'}
        new, keys = report(t, allowed)
        if sorted(new) != [f'{rel} crate'] or stale(allowed, [t], keys) != [f'{rel} gone']:
            print(f'selftest: the allow list: new {new}, stale {stale(allowed, [t], keys)}')
            return 1
    print('selftest: ok')
    return 0


def main(argv):
    args = argv[1:]
    if args == ['--selftest']:
        return selftest()
    allowed = set()
    if args[:1] == ['--allow']:
        allowed, args = read_allow(args[1]), args[2:]
    srcs = args or [os.path.join(HERE, '..', '..', 'spank-plugin', 'src')]
    new, found = [], set()
    for s in srcs:
        n, keys = report(s, allowed)
        new += n
        found |= keys
    for line in stale(allowed, srcs, found):
        print(f'allow list: {line} is no circle any more: take the line out')
    return 1 if new or stale(allowed, srcs, found) else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
