#!/usr/bin/env python3
"""List bench-core's imports that run backwards through its stages: a file of an earlier stage
that names a later stage (ARCHITECTURE.md "bench-core by stage": model, config, settings, meet, measure,
facts, localize, judge, render, in that order; a stage may use itself and the stages before it;
`model` is the ground floor of domain types that names no stage).

Usage: tests/tools/stage-imports.py [--allow FILE] [SRC]  |  --selftest
  SRC defaults to bench-core/src. Exit 1 when it prints a backward edge not listed in FILE (lines
  `FILE -> STAGE`, paths relative to SRC: the edges not yet turned around), or a line of FILE
  that no longer runs backwards (so the list only shrinks).

Read: `crate::STAGE` and `super::...` paths anywhere in a file (use lines, grouped
`crate::{a::x, b::y}`, paths in expressions), resolved from the file's own module path. Not read:
test modules (from `#[cfg(test)] mod NAME {` to the end of the file, where this workspace keeps
them, and test files named `tests.rs` or `*_test.rs`, as duplicate-names.py counts them), comments and strings (longest-fns.py's lexer blanks them). Files outside the stages
(`orchestrate*`, `report/`, `contract/`, `main.rs`, `lib.rs`, `bin/`) are not judged: they are
the flow and the record that every stage may fill.
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

STAGES = ['model', 'config', 'settings', 'meet', 'measure', 'facts', 'localize', 'judge', 'render']
ORDER = {s: i for i, s in enumerate(STAGES)}
TEST_MOD = re.compile(r'#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{')
PATH = re.compile(r'\b(crate|super|self)((?:\s*::\s*(?:super|self))*)\s*::\s*(\{|[A-Za-z_]\w*)')


def module_of(rel):
    """The module path of a file: measure/runner/timed.rs -> [measure, runner, timed]."""
    parts = rel[:-3].split('/')
    if parts[-1] == 'mod':
        parts = parts[:-1]
    return parts


def group_heads(text, start):
    """The first name of each top-level item of a `{...}` group opening at text[start]."""
    depth, item, heads = 0, '', []
    for ch in text[start:]:
        if ch == '{':
            depth += 1
            if depth == 1:
                continue
        elif ch == '}':
            depth -= 1
            if depth == 0:
                break
        if depth == 1 and ch == ',':
            heads.append(item)
            item = ''
        elif depth >= 1:
            item += ch
    heads.append(item)
    names = []
    for h in heads:
        m = re.match(r'\s*([A-Za-z_]\w*)', h)
        if m:
            names.append(m.group(1))
    return names


def stages_named(rel, text):
    """The stages a file's code names (resolved module paths' first elements)."""
    here = module_of(rel)
    found = set()
    for m in PATH.finditer(text):
        root, chain, head = m.group(1), m.group(2), m.group(3)
        if root == 'crate':
            base = []
        else:
            # A file's `self` is its own module; `super` its parent.
            base = list(here) if root == 'self' else here[:-1]
        for step in re.findall(r'super|self', chain):
            if step == 'super':
                base = base[:-1]
        heads = group_heads(text, m.start(3)) if head == '{' else [head]
        for h in heads:
            full = base + [h]
            if full and full[0] in ORDER:
                found.add(full[0])
    return found


def backward_edges(src):
    edges = set()
    for d, dirs, files in os.walk(src):
        dirs[:] = sorted(dirs)
        for f in sorted(files):
            if not f.endswith('.rs') or f == 'tests.rs' or f.endswith('_test.rs'):
                continue
            rel = os.path.relpath(os.path.join(d, f), src)
            stage = rel.split('/')[0]
            if stage not in ORDER:
                continue
            text = longest_fns.strip(open(os.path.join(d, f), encoding='utf-8', errors='replace').read())
            cut = TEST_MOD.search(text)
            if cut:
                text = text[:cut.start()]
            for other in stages_named(rel, text):
                if ORDER[other] > ORDER[stage]:
                    edges.add(f'{rel} -> {other}')
    return edges


def check(src, allow_path):
    edges = backward_edges(src)
    allowed = set()
    if allow_path:
        for line in open(allow_path, encoding='utf-8'):
            line = line.split('#', 1)[0].strip()
            if line:
                allowed.add(' '.join(line.split()))
    new = sorted(edges - allowed)
    gone = sorted(allowed - edges)
    for e in new:
        print(f'backward import (a stage names a later one): {e}')
    for e in gone:
        print(f'no longer backward, remove it from the allow list: {e}')
    print(f'{len(edges)} backward edge(s), {len(allowed)} allowed, {len(new)} new, {len(gone)} stale')
    return 1 if new or gone else 0


def selftest():
    with tempfile.TemporaryDirectory() as t:
        def put(rel, body):
            p = os.path.join(t, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            open(p, 'w').write(body)
        put('settings/mod.rs', 'use crate::measure::size::Size;\n// crate::render::x\n')
        put('measure/mod.rs', 'use crate::{settings::Options, judge::floors};\n')
        put('measure/runner/timed.rs', 'fn f() { super::super::super::render::output::line(); }\n'
            'fn g() { crate::facts::node(); let s = "crate::localize"; }\n')
        put('judge/mod.rs', 'use super::measure::Row;\nuse self::inner::x;\n'
            '#[cfg(test)]\nmod tests { use crate::render::x; }\n')
        put('report/json.rs', 'use crate::localize::Summary;\n')
        put('model/size.rs', 'use crate::settings::Options;\nuse super::sku::Sku;\n')
        put('model/size/table_test.rs', 'use crate::config::WorkerConfig;\n')
        put('model/tests.rs', 'use crate::render::x;\n')
        got = backward_edges(t)
        want = {'settings/mod.rs -> measure', 'measure/mod.rs -> judge',
                'measure/runner/timed.rs -> render', 'measure/runner/timed.rs -> facts',
                'model/size.rs -> settings'}
        if got != want:
            print(f'selftest: found {sorted(got)}, want {sorted(want)}')
            return 1
        allow = os.path.join(t, 'allow')
        open(allow, 'w').write('\n'.join(sorted(want - {'measure/mod.rs -> judge'})) +
                               '\njudge/mod.rs -> render\n')
        if check(t, allow) != 1:
            print('selftest: a new edge and a stale line must fail')
            return 1
        open(allow, 'w').write('\n'.join(sorted(want)) + '\n')
        if check(t, allow) != 0:
            print('selftest: the exact list must pass')
            return 1
    print('selftest: ok')
    return 0


def main(argv):
    args = argv[1:]
    if args == ['--selftest']:
        return selftest()
    allow = None
    if args[:1] == ['--allow']:
        allow, args = args[1], args[2:]
    src = args[0] if args else os.path.join(HERE, '..', '..', 'bench-core', 'src')
    return check(src, allow)


if __name__ == '__main__':
    sys.exit(main(sys.argv))
