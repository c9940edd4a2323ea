#!/usr/bin/env python3
"""List bench-core's imports that run backwards through its stages: a file of an earlier stage
that names a later stage (ARCHITECTURE.md "bench-core by stage": model, config, settings, meet,
localize, measure, facts, report, judge, render, in that order; a stage may use itself and the
stages before it; `model` is the ground floor of domain types that names no stage), and every
loop between the stages' folders (a stage that reaches itself through the others' imports, e.g.
facts -> measure -> report -> facts).

Usage: tests/tools/stage-imports.py [--allow FILE] [SRC]  |  --selftest
  SRC defaults to bench-core/src. Exit 1 when it prints a backward edge not listed in FILE (lines
  `FILE -> STAGE`, paths relative to SRC: the edges not yet turned around), a line of FILE
  that no longer runs backwards (so the list only shrinks), or a loop (never allowed: an edge of
  it must turn around).

Read: `crate::STAGE` and `super::...` paths anywhere in a file (use lines, grouped
`crate::{a::x, b::y}`, paths in expressions), resolved from the file's own module path. A stage
is its folder and the file of its name beside it (`report.rs` with `report/`). Not read:
test modules (from `#[cfg(test)] mod NAME {` to the end of the file, where this workspace keeps
them, and test files named `tests.rs` or `*_test.rs`, as duplicate-names.py counts them), comments
and strings (longest-fns.py's lexer blanks them). Files outside the stages (`orchestrate*`,
`contract/`, `main.rs`, `lib.rs`, `bin/`) are not judged: they are the flow that calls every stage.
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

STAGES = ['model', 'config', 'settings', 'meet', 'localize', 'measure', 'facts', 'report', 'judge',
          'render']
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


def stage_of(rel):
    """The stage a file is in: its first folder, or the stage its root file is named after."""
    first = rel.split('/')[0]
    if '/' not in rel and first.endswith('.rs'):
        first = first[:-3]
    return first if first in ORDER else None


def imports(src):
    """Every (file, its stage, another stage it names) of the stages' files under `src`."""
    out = set()
    for d, dirs, files in os.walk(src):
        dirs[:] = sorted(dirs)
        for f in sorted(files):
            if not f.endswith('.rs') or f == 'tests.rs' or f.endswith('_test.rs'):
                continue
            rel = os.path.relpath(os.path.join(d, f), src)
            stage = stage_of(rel)
            if stage is None:
                continue
            text = longest_fns.strip(open(os.path.join(d, f), encoding='utf-8', errors='replace').read())
            cut = TEST_MOD.search(text)
            if cut:
                text = text[:cut.start()]
            for other in stages_named(rel, text):
                if other != stage:
                    out.add((rel, stage, other))
    return out


def backward_edges(src):
    return {f'{rel} -> {other}' for rel, stage, other in imports(src) if ORDER[other] > ORDER[stage]}


def loops(src):
    """Each loop between stages, as `a, b, ...: a -> b (file) -> ... -> a (file)`: one per group
    of stages that reach each other (named first), its shortest way round from the group's
    earliest stage, through the first file that makes each edge."""
    by_edge = {}
    for rel, stage, other in sorted(imports(src)):
        by_edge.setdefault((stage, other), rel)
    nexts = {}
    for a, b in by_edge:
        nexts.setdefault(a, set()).add(b)

    def reach(a):
        seen, todo = set(), [a]
        while todo:
            for b in nexts.get(todo.pop(), ()):
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
        return seen

    reached = {s: reach(s) for s in STAGES}
    found, done = [], set()
    for s in STAGES:
        group = {t for t in STAGES if t in reached[s] and s in reached[t]}
        if s in done or s not in reached[s]:
            continue
        done |= group
        # The shortest way back to `s` inside its group (breadth first, stages in their order).
        paths, back = {s: [s]}, None
        todo = [s]
        while todo and back is None:
            a = todo.pop(0)
            for b in sorted(nexts.get(a, ()), key=ORDER.get):
                if b == s:
                    back = paths[a] + [s]
                    break
                if b in group and b not in paths:
                    paths[b] = paths[a] + [b]
                    todo.append(b)
        steps = [back[0]] + [f'{b} ({by_edge[(a, b)]})' for a, b in zip(back, back[1:])]
        among = ', '.join(sorted(group, key=ORDER.get))
        found.append(f'{among}: ' + ' -> '.join(steps))
    return found


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
    rounds = loops(src)
    for e in new:
        print(f'backward import (a stage names a later one): {e}')
    for e in gone:
        print(f'no longer backward, remove it from the allow list: {e}')
    for r in rounds:
        print(f'import loop between stages (never allowed): {r}')
    print(f'{len(edges)} backward edge(s), {len(allowed)} allowed, {len(new)} new, {len(gone)} stale, '
          f'{len(rounds)} loop(s)')
    return 1 if new or gone or rounds else 0


def selftest():
    def tree(t, files):
        for rel, body in files.items():
            p = os.path.join(t, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            open(p, 'w').write(body)

    with tempfile.TemporaryDirectory() as t:
        tree(t, {
            'settings/mod.rs': 'use crate::measure::size::Size;\n// crate::render::x\n',
            'measure/mod.rs': 'use crate::{meet::Team, judge::floors};\n',
            'measure/runner/timed.rs': 'fn f() { super::super::super::render::output::line(); }\n'
                                       'fn g() { crate::facts::node(); let s = "crate::localize"; }\n',
            'judge/mod.rs': 'use super::facts::Row;\nuse self::inner::x;\n'
                            '#[cfg(test)]\nmod tests { use crate::render::x; }\n',
            # report/ is a stage, after localize and before judge; its root file is in it.
            'report/json.rs': 'use crate::localize::Summary;\n',
            'report/read.rs': 'use crate::render::table::x;\n',
            'report.rs': 'pub mod json;\nfn f() { crate::judge::x(); }\n',
            'orchestrate.rs': 'use crate::render::x;\n',
            'model/size.rs': 'use crate::settings::Options;\nuse super::sku::Sku;\n',
            'model/size/table_test.rs': 'use crate::config::WorkerConfig;\n',
            'model/tests.rs': 'use crate::render::x;\n',
        })
        got = backward_edges(t)
        want = {'settings/mod.rs -> measure', 'measure/mod.rs -> judge',
                'measure/runner/timed.rs -> render', 'measure/runner/timed.rs -> facts',
                'model/size.rs -> settings', 'report/read.rs -> render', 'report.rs -> judge'}
        if got != want:
            print(f'selftest: found {sorted(got)}, want {sorted(want)}')
            return 1
        if loops(t):
            print(f'selftest: no loop here, found {loops(t)}')
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
    with tempfile.TemporaryDirectory() as t:
        # facts -> measure -> report -> facts: each edge alone may look harmless.
        tree(t, {
            'facts/nccl_log.rs': 'use crate::measure::nccl_env::LogPlace;\n',
            'measure/runner/timed.rs': 'use crate::report::Row;\n',
            'report/json.rs': 'pub facts: Option<crate::facts::node::NodeFacts>,\n',
            'judge/mod.rs': 'use crate::report::json::Report;\n',
        })
        want = ['measure, facts, report: measure -> report (measure/runner/timed.rs) -> '
                'facts (report/json.rs) -> measure (facts/nccl_log.rs)']
        if loops(t) != want:
            print(f'selftest: found loops {loops(t)}, want {want}')
            return 1
        allow = os.path.join(t, 'allow')
        open(allow, 'w').write('measure/runner/timed.rs -> report\n')
        if check(t, allow) != 1:
            print('selftest: a loop must fail, its backward edge allowed or not')
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
