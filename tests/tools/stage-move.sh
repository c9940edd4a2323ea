#!/usr/bin/env bash
# Lays bench-core out by stage (issue 27 item 2): moves each module into the directory of the
# stage it belongs to and rewrites every path that named it, so that one run turns a tree with the
# flat layout into the staged one, whatever the files' contents are by then.
#
#   bash tests/tools/stage-move.sh      # from anywhere in the repository; then cargo fmt runs
#
# What it does, driven by the two tables below:
#   - `git mv` of each module's file(s) (`x.rs`, `x/`, `x/mod.rs`; a submodule's file) to its stage;
#   - each stage's `mod.rs`: a `//!` paragraph (its one input, one output and what it decides) and
#     the declarations of its modules, with the `#[cfg]`s they had in lib.rs (or in their parent);
#     a stage that is an existing module (config, facts, localize) keeps its mod.rs and gains the
#     paragraph and the new declarations;
#   - lib.rs's declarations; the paths in every Rust file of the workspace: `crate::` (bench-core's
#     library), `bench_core::` (its binaries, tests, examples, the other crates' docs), `super::`
#     chains that now cross a stage, the bare names of a moved child, and `use` groups
#     (`use crate::{a, b::{c, d}}`) path by path; `include_str!`/`include_bytes!`/`#[path]`
#     relative paths of files that moved deeper; `bench-core/src/...` file paths in every tracked
#     text file (docs, scripts, comments; not the dated benchmark results, which record history).
# Idempotent: a tree that is already staged is left alone (exit 0); a half-staged tree, a module
# of the table that is missing, or a stage path that exists already is an error (exit 1).
# Written in Python (a `use` tree must be parsed, not matched) and run by this shell script.
set -euo pipefail

# old module path          new module path (stage::module). A new last name renames: no stage may
# share a module's name elsewhere in the workspace (tests/tools/duplicate-names.py): `judge.rs`
# becomes `judge/overall.rs` (the stage is `judge`), `runner/measure.rs` `runner/timed.rs` (the
# stage is `measure`); `verdict` (the contract's), `present` (the plugin's) and `show` (the
# contract's `slurm_config`) are taken. A `?` after the old path: skipped (with a note) when that
# module is gone, e.g. renamed on main meanwhile; every other line must find its module.
MAPPING='
options                    settings::options
rendezvous                 meet::rendezvous
team                       meet::team
topology                   meet::topology
slurm_layout               meet::slurm_layout
collectives                measure::collectives
datatype                   measure::datatype
size                       measure::size
pairs                      measure::pairs
cuda                       measure::cuda
nccl                       measure::nccl
nccl_env                   measure::nccl_env
loop_probe                 measure::loop_probe
running_thread             measure::running_thread
runner::output             render::output
runner::measure?           measure::runner::timed
runner                     measure::runner
sku                        facts::sku
transport                  facts::transport
node_ready                 facts::node_ready
judge                      judge::overall
analysis                   judge::analysis
evidence                   judge::evidence
floors                     judge::floors
thresholds                 judge::thresholds
report::table              render::table
plot                       render::plot
progress                   render::progress
'

# The stages in the order a check runs them: input -> output (lib.rs's comment on each).
FLOW='
settings   argv and environment -> Options
config     the TOML file over the built-in defaults -> WorkerConfig
meet       Options -> Team (rendezvous, control plane, Topology)
measure    Options, Team, floors -> rows of results
facts      the node -> NodeFacts, Sku, TransportSummary
judge      report and config -> Verdict and reasons
localize   node-level rounds -> findings (whom to blame)
render     report -> table, progress line, plot
'

# Each stage's mod.rs paragraph (`|` starts a line).
STAGES='
settings|Stage 1, settings: the command line and the environment (Slurm'"'"'s variables, `NCCL_CHECK_*`)
  |in, one validated [`options::Options`] out. Decides what this process is asked to do (its rank,
  |world, GPUs, sizes, rendezvous and credential) and refuses what cannot be run as a usage error
  |(exit 2) before anything is loaded. Meant as the one reader of argv and the environment (what
  |still reads the environment elsewhere, issue 27 moves here).
config|Stage 2, config: the worker'"'"'s TOML file over the built-in defaults in, one
  |[`worker::WorkerConfig`] out (with the site'"'"'s network profiles and expected GPUs). Decides which
  |threshold rules, plans, profiles and GPU counts apply to this job (`selector`: by partition
  |and node); every bad key is an error with file, line and key.
meet|Stage 3, meet: the settings (rendezvous address, credential, rank, world) in, one
  |[`team::Team`] out: the authenticated processes of the check (`rendezvous`), their control plane
  |and where every rank runs ([`topology::Topology`], built once). Decides who may join
  |(`rendezvous::auth`), who never came (`rendezvous::absent`) and who was lost mid-check
  |(`rendezvous::plane::lost`). The control plane is a star through the coordinator, which at
  |4,096 processes was the limit (bench-core/benchmarks/results/2026-11-24-control-plane-4096): so
  |the welcome lists each host once and the localizer'"'"'s rounds travel by NCCL, not by the star.
measure|Stage 4, measure: the settings, the team and the floors in, the rows of results out (busbw per
  |collective, size and placement; the GPU pair matrix; the local probe; the localizer'"'"'s rounds),
  |measured exactly as nccl-tests measures them (`collectives`: byte counts and bus-bandwidth
  |factors; `runner::timed`: the timed loops). Decides nothing about PASS or FAIL: it only retests
  |a result below its floor once.
facts|Stage 5, facts: the node in (the driver'"'"'s GPUs, NVML, PCI device IDs, sysfs NICs, NCCL'"'"'s own
  |INFO log), typed facts out ([`node::NodeFacts`], [`sku::Sku`], [`transport::TransportSummary`]).
  |Readers: they classify what they read into stable codes and leave the verdict to `judge`
  |(`local_probe` still judges the probe against its floor: issue 27).
judge|Stage 6, judge: the report (results and facts) and the config in, the verdict
  |([`crate::verdict::Verdict`], the contract'"'"'s) and its reasons out. Decides the floor of every
  |result ([`floors`] over [`thresholds`]), PASS or FAIL ([`overall`]), the outliers and the
  |culprit on one node ([`analysis`]), and which fact explains a slow result ([`evidence`]). Pure:
  |every rule is a unit test without a GPU.
localize|Stage 7, localize: the measurements of node-level rounds in, findings out (the node, node pair
  |or NIC rail to blame), in O(log N) rounds that every process decides alike from the same summed
  |results (`conduct`). The `--explain-plan` model (`plan`, `site`, `cli`) stays beside the
  |schedule it replays.
render|Stage 8, render: the report in, what people read out: the nccl-tests table on stdout
  |(`table`, `output`), the progress line on stderr (`progress`) and the SVG plot (`plot`).
  |Decides nothing: a verdict is never computed here.
'

root=$(git rev-parse --show-toplevel)
cd "$root"
export MAPPING FLOW STAGES
python3 - <<'PY'
import os, re, subprocess, sys

SRC = 'bench-core/src'
MAPPING = [l.split() for l in os.environ['MAPPING'].strip().splitlines() if l.strip()]
OPTIONAL = {o.rstrip('?') for o, _ in MAPPING if o.endswith('?')}
MAP = [(o.rstrip('?').split('::'), n.split('::')) for o, n in MAPPING]
STAGES, DOCS = [], {}
for block in re.split(r'\n(?=\w)', os.environ['STAGES'].strip()):
    name, text = block.split('|', 1)
    STAGES.append(name)
    DOCS[name] = ' '.join(l.strip().lstrip('|') for l in text.splitlines())
MARK = '//! Stage '
SHORT = dict(l.split(None, 1) for l in os.environ['FLOW'].strip().splitlines())
if list(SHORT) != STAGES:
    sys.exit('stage-move: FLOW and STAGES must list the same stages in the same order')


def die(msg):
    sys.exit(f'stage-move: {msg}')


def git(*args):
    subprocess.run(['git', *args], check=True)


def modfiles(mod):
    """The files of module path `mod` (list of names): (the .rs file, its directory or None)."""
    base = os.path.join(SRC, *mod)
    if os.path.isfile(base + '.rs'):
        return base + '.rs', base if os.path.isdir(base) else None
    if os.path.isfile(os.path.join(base, 'mod.rs')):
        return os.path.join(base, 'mod.rs'), base
    return None, None


# --- already staged, half staged, or flat -------------------------------------------------
for o, n in list(MAP):
    if '::'.join(o) in OPTIONAL and not modfiles(o)[0] and not modfiles(n)[0]:
        print(f'stage-move: note: {"::".join(o)} is gone, its line is skipped', file=sys.stderr)
        MAP.remove((o, n))
# (a stage may bear an old module's name: `judge` is judge.rs before and judge/mod.rs after, so a
# module is done when its new place exists, whatever its old name finds)
done = [(o, n) for o, n in MAP if modfiles(n)[0]]
todo = [(o, n) for o, n in MAP if modfiles(o)[0] and not modfiles(n)[0]]
missing = [o for o, n in MAP if not modfiles(o)[0] and not modfiles(n)[0]]
if missing:
    die('modules of the table found nowhere (renamed? fix MAPPING): '
        + ', '.join('::'.join(m) for m in missing))
if not todo:
    print('stage-move: already staged, nothing to do')
    sys.exit(0)
if done:
    die('half staged (some moved, some not): ' + ', '.join('::'.join(o) for o, _ in done))
for o, n in MAP:
    d = os.path.join(SRC, *n)
    if os.path.exists(d + '.rs') or os.path.exists(d):
        die(f'destination of {"::".join(o)} exists already: {d}')
if subprocess.run(['git', 'diff', '--quiet', 'HEAD', '--', 'bench-core']).returncode:
    die('bench-core has uncommitted changes: commit or stash them first')


def remap(path):
    """A module path (list) after the move: the longest old prefix in MAP replaced."""
    best = None
    for o, n in MAP:
        if path[:len(o)] == o and (best is None or len(o) > len(best[0])):
            best = (o, n)
    return path if best is None else best[1] + path[len(best[0]):]


# --- the lexer: strings, chars and comments blanked (same length), for brace tracking ------
def strip(src):
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i); j = n if j < 0 else j
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
            j = src.find(end, i + 2 + hashes); j = n if j < 0 else j + len(end)
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == '"' or (c == 'b' and src.startswith('b"', i) and not (i and (src[i - 1].isalnum() or src[i - 1] == '_'))):
            j = i + (2 if c == 'b' else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == '\\' else 1
            out.append(re.sub(r'[^\n]', ' ', src[i:j + 1])); i = j + 1
        elif c == "'":
            m = re.match(r"'(\\.|[^\\'])'", src[i:i + 12]) or re.match(r"'\\u\{[0-9a-fA-F]+\}'", src[i:i + 14])
            if m:
                out.append(' ' * len(m.group(0))); i += len(m.group(0))
            else:
                out.append(c); i += 1
        else:
            out.append(c); i += 1
    return ''.join(out)


def inline_mods(stripped):
    """[(offset, stack of inline `mod name {` names in force from there)], in order."""
    events, stack, depth, pending = [(0, ())], [], 0, None
    for m in re.finditer(r'\bmod\s+(\w+)\s*\{|[{}]', stripped):
        if m.group(1):
            depth += 1; stack.append((m.group(1), depth))
            events.append((m.end(), tuple(s for s, _ in stack)))
        elif m.group(0) == '{':
            depth += 1
        else:
            if stack and stack[-1][1] == depth:
                stack.pop(); events.append((m.end(), tuple(s for s, _ in stack)))
            depth -= 1
    return events


def stack_at(events, pos):
    cur = ()
    for off, st in events:
        if off > pos: break
        cur = st
    return cur


# --- the files and their module paths ---------------------------------------------------
def module_of(path):
    """bench-core/src/a/b.rs -> ['a', 'b']; a/mod.rs -> ['a']; lib.rs -> []; None for bins."""
    rel = os.path.relpath(path, SRC)
    if rel in ('main.rs',) or rel.startswith('bin' + os.sep):
        return None
    if rel == 'lib.rs':
        return []
    parts = rel[:-3].split(os.sep)
    return parts[:-1] if parts[-1] == 'mod' else parts


tracked = subprocess.run(['git', 'ls-files', '-z'], check=True, capture_output=True).stdout.decode().split('\0')
rust = [f for f in tracked if f.endswith('.rs') and os.path.isfile(f)]
lib_files = {f: module_of(f) for f in rust if f.startswith(SRC + '/') and module_of(f) is not None}

ROOTS = ('crate', 'bench_core')
IDENT = r'[A-Za-z_][A-Za-z0-9_]*'


def children_moved(mod):
    """Names of mod's child modules that the table moves (a bare `name::` in mod means them)."""
    return {o[-1] for o, _ in MAP if o[:-1] == mod and len(o) == len(mod) + 1}


def resolve(root, segs, here, in_lib):
    """The absolute old module path that `root::segs` means in module `here`, or None."""
    if root == 'bench_core' or (root == 'crate' and in_lib):
        return list(segs)
    if here is None:
        return None
    if root.startswith('super'):
        k = root.count('super')
        if k > len(here): return None
        return here[:len(here) - k] + list(segs)
    if root == 'self':
        return here + list(segs)
    return here + [root] + list(segs)  # a bare child name


def render(root, segs, here, new_here, in_lib):
    """The text of `root::segs` after the move (None: unchanged)."""
    absolute = resolve(root, segs, here, in_lib)
    if absolute is None:
        return None
    new = remap(absolute)
    if root in ROOTS:
        return None if new == absolute else '::'.join([root] + new)
    # a relative path: still right from the module's new place?
    k = root.count('super') if root.startswith('super') else 0
    base = new_here[:len(new_here) - k] if k <= len(new_here) else None
    rel_segs = list(segs) if root.startswith(('super', 'self')) else [root] + list(segs)
    if base is not None and base + rel_segs == new:
        return None
    if base is not None and new[:len(base)] == base and len(new) > len(base):
        # still below the same ancestor (a renamed sibling or child): stay relative
        lead = [root.split('::')[0]] * k if k else (['self'] if root == 'self' else [])
        return '::'.join(lead + new[len(base):])
    return '::'.join(['crate'] + new)


# --- use trees ----------------------------------------------------------------------------
def parse_tree(s, i):
    """Parse a use tree at s[i:]; returns (list of (segments, alias)), end index."""
    out = []
    segs = []
    while True:
        while s[i].isspace(): i += 1
        if s[i] == '{':
            i += 1
            while True:
                while s[i].isspace() or s[i] == ',': i += 1
                if s[i] == '}':
                    i += 1; break
                sub, i = parse_tree(s, i)
                out += [(segs + a, al) for a, al in sub]
            return out, i
        if s[i] == '*':
            return [(segs + ['*'], None)], i + 1
        m = re.compile(IDENT).match(s, i)
        if not m: raise ValueError(s[i:i + 20])
        segs.append(m.group(0)); i = m.end()
        while s[i].isspace(): i += 1
        if s.startswith('::', i):
            i += 2; continue
        alias = None
        m2 = re.compile(r'as\s+(' + IDENT + ')').match(s, i)
        if m2:
            alias, i = m2.group(1), m2.end()
        return [(segs, alias)], i


def rewrite_use_paths(paths, here, new_here, in_lib):
    """Each flat path of a use tree, rewritten; (changed?, list of (root-led segments, alias))."""
    changed, out = False, []
    for segs, alias in paths:
        root, rest = segs[0], segs[1:]
        # super::super:: chains are one root
        while rest and rest[0] == 'super' and root.startswith('super'):
            root += '::super'; rest = rest[1:]
        tail = [s for s in rest if s not in ('*', 'self')]
        suffix = rest[len(tail):]
        new = render(root, tail, here, new_here, in_lib) if tail or root.startswith('super') else None
        # a renamed module imported by its name (`use crate::judge::{self, ..}`): the file's bare
        # `judge::` then means it, and must follow the new name
        imported = resolve(root, tail, here, in_lib) if tail and suffix in ([], ['self']) else None
        if imported is not None and alias is None:
            for o, n in MAP:
                if imported == o and o[-1] != n[-1]:
                    RENAMED_HERE.add((o[-1], n[-1]))
        if new is None:
            out.append((segs, alias))
        else:
            changed = True
            out.append((new.split('::') + suffix, alias))
    return changed, out


def tree_text(paths):
    """Render flat paths as use trees, one per root and first module (`crate::a::{..}`), as the
    crate writes them."""
    groups = {}
    for segs, alias in paths:
        n = 1
        while segs[n - 1] == 'super' and n < len(segs) - 1:
            n += 1  # super::super:: is one root
        n = min(n + 1, len(segs) - 1) if len(segs) > 2 else n
        groups.setdefault(tuple(segs[:n]), []).append((segs[n:], alias))
    texts = []
    for root, subs in groups.items():
        head = '::'.join(root)
        texts += [head + (f' as {a}' if a else '') for s, a in subs if not s]
        subs = [(s, a) for s, a in subs if s]
        if subs:
            texts.append(f'{head}::{render_simple(subs)}')
    return texts


def render_simple(subs):
    """(segments, alias) list -> `a::b` or `{a::b, c::{d, e}}`."""
    by = {}
    order = []
    for segs, alias in subs:
        key = segs[0]
        if key not in by: by[key] = []; order.append(key)
        by[key].append((segs[1:], alias))
    parts = []
    for key in order:
        entries = by[key]
        leaves = [a for s, a in entries if not s]
        deeper = [(s, a) for s, a in entries if s]
        if leaves and deeper:
            # `key` itself and things below it: key::{self, ...}
            deeper = [(['self'], a) for a in leaves] + deeper
            leaves = []
        for a in leaves:
            parts.append(key + (f' as {a}' if a else ''))
        if deeper:
            if len(deeper) == 1 and deeper[0][0] != ['self']:
                parts.append(f'{key}::{render_simple(deeper)}')
            else:
                parts.append(f'{key}::{render_simple(deeper)}')
    single = len(parts) == 1 and not parts[0].startswith('self')  # `a::self` needs its braces
    return parts[0] if single else '{' + ', '.join(parts) + '}'


RENAMED_HERE = set()  # (old, new) names of renamed modules the file being rewritten imports
PATH_RE = re.compile(r'(?<![\w:$])((?:super::)*super|self|crate|bench_core|' + IDENT + r')((?:::' + IDENT + r')+)')
USE_RE = re.compile(r'\buse\s+')


def rewrite_rust(text, here, in_lib):
    """A Rust file's text with every path to a moved module rewritten. `here`: the file's old
    module path (None: a binary/test/example/other crate, only `bench_core::` counts)."""
    stripped = strip(text)
    events = inline_mods(stripped)
    moved_kids_cache = {}
    spans = []  # (start, end, replacement)
    # 1. use statements (in code, not comments or strings)
    for m in USE_RE.finditer(stripped):
        start = m.end()
        end = stripped.find(';', start)
        if end < 0: continue
        body = text[start:end]
        if '//' in body or '/*' in body:
            continue  # a commented use tree: left to the path pass below
        try:
            paths, j = parse_tree(text[:end] + ' ;', start)
        except (ValueError, IndexError):
            continue
        stack = stack_at(events, m.start())
        h = None if here is None else here + list(stack)
        nh = None if h is None else remap(here) + list(stack)
        first = paths[0][0][0] if paths else ''
        if not (first in ROOTS or first in ('super', 'self') or (h is not None and first in children_moved(h))):
            continue
        changed, new_paths = rewrite_use_paths(paths, h, nh, in_lib)
        if not changed: continue
        texts = tree_text(new_paths)
        # same visibility and attributes for each resulting use; the first reuses the text before
        line_start = text.rfind('\n', 0, m.start()) + 1
        prefix = text[line_start:m.start()]
        repl = texts[0] + ';'
        for t in texts[1:]:
            repl += '\n' + prefix + 'use ' + t + ';'
        spans.append((start, end + 1, repl))
    # 2. every other path (code, doc links, comments)
    def covered(p):
        return any(a <= p < b for a, b, _ in spans)
    for m in PATH_RE.finditer(text):
        if covered(m.start()): continue
        root, rest = m.group(1), m.group(2)[2:].split('::')
        if root.startswith('super'):
            root = root  # chain of supers
        stack = stack_at(events, m.start())
        h = None if here is None else here + list(stack)
        nh = None if h is None else remap(here) + list(stack)
        if root not in ROOTS and not root.startswith('super') and root != 'self':
            if h is None or root not in children_moved(h):
                continue
            if m.start() and text[m.start() - 1] in '.':
                continue
        if root in ('self',) or root.startswith('super'):
            if h is None: continue
        # only as many segments as are module names: cut at the first segment that, resolved,
        # is not under a moved module (the rest are items and stay)
        new = render(root, rest, h, nh, in_lib)
        if new is not None:
            spans.append((m.start(), m.end(), new))
    out, last = [], 0
    for a, b, r in sorted(spans):
        if a < last: continue
        out.append(text[last:a]); out.append(r); last = b
    out.append(text[last:])
    result = ''.join(out)
    for old, new in RENAMED_HERE:
        result = re.sub(r'(?<![\w:.$])' + old + r'::', new + '::', result)
    RENAMED_HERE.clear()
    return result


def fix_relative_includes(text, delta):
    if delta <= 0: return text
    up = '../' * delta
    text = re.sub(r'(include_(?:str|bytes)!\(\s*")(?![/])', lambda m: m.group(1) + up, text)
    text = re.sub(r'(#\[path\s*=\s*")(?![/])', lambda m: m.group(1) + up, text)
    return text


def pub_super_to_crate(text):
    """In a submodule that moves to another parent, `pub(super)` at its top level meant the old
    parent: widen it to the crate."""
    stripped = strip(text)
    events = inline_mods(stripped)
    return re.sub(r'pub\(super\)', lambda m: 'pub(crate)' if not stack_at(events, m.start()) else m.group(0), text)


# --- 1. new contents, computed on the flat tree -------------------------------------------
new_text = {}
for f in rust:
    text = open(f, encoding='utf-8').read()
    if f in lib_files:
        here = lib_files[f]
        t = rewrite_rust(text, here, True)
        new_mod = remap(here)
        moved_root = [o for o, n in MAP if here[:len(o)] == o]
        if moved_root:
            o = max(moved_root, key=len)
            n = remap(o)
            # the directory depth of the file changes by the length difference of its parents
            t = fix_relative_includes(t, len(n) - len(o))
            if len(o) > 1 and here == o and remap(o[:-1]) != n[:-1]:
                t = pub_super_to_crate(t)
    else:
        t = rewrite_rust(text, None, False)
    if t != text:
        new_text[f] = t

# --- 2. declarations: remove each moved module's from its old parent, keep its attributes --
def take_decl(parent_file, name):
    """Remove `[pub] mod name;` (and the attributes and doc lines right above it) from the text of
    parent_file; return the attribute lines and the declaration's visibility (`pub`, `pub(crate)`,
    or '' for private)."""
    text = new_text.get(parent_file) or open(parent_file, encoding='utf-8').read()
    lines = text.split('\n')
    for i, l in enumerate(lines):
        m = re.match(r'\s*(pub(?:\([^)]*\))?\s+)?mod\s+' + name + r'\s*;', l)
        if m:
            j = i
            while j > 0 and re.match(r'\s*(#\[|///)', lines[j - 1]):
                j -= 1
            attrs = [x.strip() for x in lines[j:i] if x.strip().startswith('#[')]
            del lines[j:i + 1]
            new_text[parent_file] = '\n'.join(lines)
            return attrs, (m.group(1) or '').strip()
    die(f'no `mod {name};` in {parent_file}')


def parent_file(mod):
    f, _ = modfiles(mod[:-1]) if len(mod) > 1 else (os.path.join(SRC, 'lib.rs'), None)
    return f


decls = {}  # new parent -> [(name, attrs, visibility)]
# submodules first: their top module's attributes (from lib.rs) go with them to a new parent; a
# module renamed under the same parent keeps its declaration's visibility
for o, n in sorted(MAP, key=lambda x: -len(x[0])):
    attrs, vis = take_decl(parent_file(o), o[-1])
    same_parent = len(o) > 1 and remap(o[:-1]) == n[:-1]
    if not same_parent:
        vis = 'pub' if vis == 'pub' else 'pub(crate)'
    if len(o) > 1 and not same_parent:
        top = open(os.path.join(SRC, 'lib.rs'), encoding='utf-8').read()
        m = re.search(r'((?:[ \t]*#\[[^\n]*\n)*)[ \t]*pub\s+mod\s+' + o[0] + r'\s*;', new_text.get(os.path.join(SRC, 'lib.rs'), top))
        if not m:
            m = re.search(r'((?:[ \t]*#\[[^\n]*\n)*)[ \t]*pub\s+mod\s+' + o[0] + r'\s*;', top)
        parent_attrs = [x.strip() for x in m.group(1).splitlines()] if m else []
        attrs = parent_attrs + [a for a in attrs if a not in parent_attrs]
    decls.setdefault(tuple(n[:-1]), []).append((n[-1], attrs, vis))

# --- 3. git mv, submodules first ---------------------------------------------------------
# where each module's files are, taken before anything moves (a stage directory made by a move
# must not look like an old module's directory: `judge/` beside `judge.rs`)
where = {tuple(o): modfiles(o) for o, _ in MAP}


def newpath(f):
    """Where lib file f (its old path) lies after the move."""
    here = lib_files[f]
    roots = [o for o, _ in MAP if here[:len(o)] == o]
    if not roots:
        return f
    o = max(roots, key=len)
    old = os.path.join(SRC, *o)
    new = os.path.join(SRC, *remap(o))
    if f == old + '.rs':
        return new + '.rs'
    assert f.startswith(old + '/'), f
    return new + f[len(old):]


def phase(o, n):
    """Submodules that leave their parent go first, then whole modules, then the ones renamed
    under their (moved) parent, from where their parent went."""
    if len(o) == 1:
        return 1
    return 2 if remap(o[:-1]) == n[:-1] else 0


for o, n in sorted(MAP, key=lambda x: phase(*x)):
    f, d = where[tuple(o)]
    if phase(o, n) == 2:
        was, now = os.path.join(SRC, *o[:-1]), os.path.join(SRC, *remap(o[:-1]))
        f = now + f[len(was):]
        d = d and now + d[len(was):]
    dest = os.path.join(SRC, *n)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if f.endswith('/mod.rs'):
        git('mv', d, dest)
    else:
        git('mv', f, dest + '.rs')
        if d:
            git('mv', d, dest)
new_text = {(newpath(f) if f in lib_files else f): t for f, t in new_text.items()}
for f in new_text:
    if not os.path.isfile(f):
        die(f'lost track of {f}')
for f, t in new_text.items():
    open(f, 'w', encoding='utf-8').write(t)

# --- 4. stage mod.rs files and lib.rs ----------------------------------------------------
def decl_lines(entries):
    out = []
    for name, attrs, vis in sorted(entries):
        out += attrs
        out.append(f'{vis} mod {name};'.lstrip())
    return out


def doc_lines(stage):
    words, lines, cur = DOCS[stage].split(), [], '//!'
    for w in words:
        if len(cur) + 1 + len(w) > 100:
            lines.append(cur); cur = '//!'
        cur += ' ' + w
    lines.append(cur)
    return lines


lib = os.path.join(SRC, 'lib.rs')
libtext = new_text.get(lib) or open(lib, encoding='utf-8').read()
new_stages = []


def add_decls(f, entries, stage=None):
    """Put entries' declarations after the last `mod` line of module file f (and, for a stage,
    its paragraph on top of the file's `//!` doc)."""
    lines = open(f, encoding='utf-8').read().split('\n')
    k = 0
    while k < len(lines) and lines[k].startswith('//!'):
        k += 1
    head = lines[:k]
    if stage and not any(l.startswith(MARK) for l in head):
        head = doc_lines(stage) + ['//!'] + head
    rest = lines[k:]
    last = max([i for i, l in enumerate(rest) if re.match(r'\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*;', l)], default=0)
    rest = rest[:last + 1] + decl_lines(entries) + rest[last + 1:]
    open(f, 'w', encoding='utf-8').write('\n'.join(head + rest))


for stage in STAGES:
    f, _ = modfiles([stage])
    entries = decls.pop((stage,), [])
    if f is None:
        os.makedirs(os.path.join(SRC, stage), exist_ok=True)
        body = doc_lines(stage) + [''] + decl_lines(entries) + ['']
        open(os.path.join(SRC, stage, 'mod.rs'), 'w', encoding='utf-8').write('\n'.join(body))
        git('add', os.path.join(SRC, stage, 'mod.rs'))
        new_stages.append(stage)
    else:
        add_decls(f, entries, stage)
for parent, entries in decls.items():
    f, _ = modfiles(list(parent))
    if f is None:
        die(f'no module file for {"::".join(parent)}, the new parent of {entries[0][0]}')
    add_decls(f, entries)

# lib.rs: the stages' declarations, in the order of a check
lines = libtext.split('\n')
first = next((i for i, l in enumerate(lines) if re.match(r'\s*pub mod \w+;', l)), None)
if first is None:
    die('no `pub mod` left in lib.rs to place the stages beside')
while first > 0 and lines[first - 1].startswith('#['):
    first -= 1
for stage in STAGES:
    # the stages that are existing modules (config, facts, localize) go in order with the rest
    at = [i for i, l in enumerate(lines) if re.match(r'\s*pub mod ' + stage + r'\s*;', l)]
    for i in reversed(at):
        if i and lines[i - 1].startswith('#['):
            die(f'lib.rs: `pub mod {stage};` has attributes; declare it in the stage list by hand')
        del lines[i]
        if i < first:
            first -= 1
stage_decls = ['// The stages of one check, in the order it runs them (ARCHITECTURE.md), each with its',
               '// one input and output; beside them the flow that calls them (`orchestrate`), the',
               '// record they fill (`report`) and the worker\'s side of the contract (`contract`).']
for k, s in enumerate(STAGES):
    stage_decls += [f'// {k + 1}. {SHORT[s]}', f'pub mod {s};']
stage_decls += ['']
lines[first:first] = stage_decls
libtext = '\n'.join(lines)
open(lib, 'w', encoding='utf-8').write(libtext)
BESIDE = {'orchestrate', 'report', 'contract'}  # not stages, on purpose (ARCHITECTURE.md)
left = set(re.findall(r'^\s*pub mod (\w+)\s*;', libtext, re.M)) - set(STAGES) - BESIDE
if left:
    print('stage-move: WARNING left at the crate root (new modules? add them to MAPPING): '
          + ', '.join(sorted(left)), file=sys.stderr)

# --- 5. file paths in every tracked text file --------------------------------------------
# Exactly the old files and directories: a stage may bear an old module's name (`judge.rs` ->
# `judge/overall.rs`), so `bench-core/src/judge/...` written after the move must not match.
FILE_MAP = []
for o, n in MAP:
    old, new = SRC + '/' + '/'.join(o), SRC + '/' + '/'.join(n)
    FILE_MAP.append((old + '.rs', new + '.rs'))
    if os.path.isdir(new):  # it had a directory (moved with it)
        FILE_MAP.append((old + '/', new + '/'))
        FILE_MAP.append((old, new))  # `bench-core/src/rendezvous` followed by a space or quote
FILE_MAP.sort(key=lambda x: -len(x[0]))
pat = re.compile('(' + '|'.join(re.escape(a) + ('' if a.endswith('/') else r'(?![\w./-])')
                              for a, _ in FILE_MAP) + ')')
lookup = dict(FILE_MAP)
for f in subprocess.run(['git', 'ls-files', '-z'], check=True, capture_output=True).stdout.decode().split('\0'):
    if not f or not os.path.isfile(f) or '/benchmarks/results/' in f or f.startswith('tests/tools/stage-move'):
        continue
    try:
        text = open(f, encoding='utf-8').read()
    except (UnicodeDecodeError, IsADirectoryError):
        continue
    t = pat.sub(lambda m: lookup[m.group(1)], text)
    if t != text:
        open(f, 'w', encoding='utf-8').write(t)
print(f'stage-move: moved {len(MAP)} modules into {", ".join(STAGES)}')
PY
cargo fmt --all
echo "stage-move: done; now: cargo build --workspace --all-targets && cargo clippy --all-targets -- -D warnings && cargo test --workspace"
