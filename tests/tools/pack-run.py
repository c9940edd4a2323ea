#!/usr/bin/env python3
"""Pack one benchmark or GPU run folder: README + summary table + raw.tar.xz (+ cited files).

    python3 tests/tools/pack-run.py DIR [DIR...]      # pack
    python3 tests/tools/pack-run.py --check [ROOT...] # fail where a run folder holds > 10 files
                                                      # or has no README.md (CI: tests/run.sh)
    python3 tests/tools/pack-run.py --selftest        # the check and the packing on a temp tree
    python3 tests/tools/pack-run.py --resummarize DIR # summary.md again from a packed folder

A run folder keeps README.md (how it ran), a summary table (summary.md, .csv or .tsv; written
here from the raw files where none exists) and every other file packed into raw.tar.xz beside
them (`tar -xJf raw.tar.xz` restores the raw files in place). Files that the code, docs or tests
cite (a path under the folder named anywhere else in the tree, or an installed
/usr/share/nccl-check/results/ path) stay unpacked where they are cited. The archive is
reproducible (sorted names, fixed owner and time), so packing again changes nothing.
"""
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile

MAX_FILES = 10
KEEP_NAMES = {"README.md", "summary.md", "summary.csv", "summary.tsv", "raw.tar.xz"}
RESULTS_ROOTS = ("bench-core/benchmarks/results/", "tests/gpu/results/fabric/")
INSTALLED = "/usr/share/nccl-check/results/"


def repo_root():
    out = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("pack-run: not inside the git repository")
    return out.stdout.strip()


def cited_paths(root):
    """Every path under a results root that a tracked file outside the results roots names."""
    pattern = r"(bench-core/benchmarks/results/|tests/gpu/results/fabric/|" + INSTALLED + r")[A-Za-z0-9_./-]+"
    excludes = [":!" + r.rstrip("/") for r in RESULTS_ROOTS]
    out = subprocess.run(
        ["git", "grep", "-ohE", pattern, "--", "."] + excludes,
        cwd=root, capture_output=True, text=True,
    )
    cited = set()
    for p in out.stdout.split():
        p = p.rstrip(".:")
        if p.startswith(INSTALLED):
            p = RESULTS_ROOTS[0] + p[len(INSTALLED):]
        cited.add(p.rstrip("/"))
    return cited


def files_under(d):
    found = []
    for base, _, names in os.walk(d):
        for n in names:
            found.append(os.path.relpath(os.path.join(base, n), d))
    return sorted(found)


def md_table(header, rows):
    cell = lambda v: str(v).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def tsv_section(d, rel):
    head, rows, columns = [], [], None
    with open(os.path.join(d, rel), errors="replace") as f:
        for line in f.read().splitlines():
            if line.startswith("#"):
                head.append(line.lstrip("# "))
            elif columns is None and line.strip():
                columns = line.split("\t")
            elif line.strip():
                rows.append(line.split("\t"))
    text = f"### `{rel}`\n\n" + "".join(f"- {h}\n" for h in head[1:4]) + "\n"
    return text + (md_table(columns, rows) if columns else "(empty)\n")


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def short(v, n=110):
    s = " ".join(str(v).split())
    return s if len(s) <= n else s[: n - 3] + "..."


def busbw_text(busbw):
    """The report's avg_busbw: a number, or a map of collective to GB/s."""
    if isinstance(busbw, (int, float)):
        return f"{busbw:.1f}"
    if isinstance(busbw, dict) and busbw:
        return ", ".join(f"{k} {v:.1f}" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in sorted(busbw.items()))
    return "-"


def worker_rows(d, files):
    """One row per worker report; of an emulated multi-node run only fab01's (the coordinator's)."""
    rows = []
    for rel in files:
        if not rel.endswith(".json"):
            continue
        name = os.path.basename(rel)
        if name.startswith("fab") and name != "fab01.json":
            continue
        r = load_json(os.path.join(d, rel))
        if not isinstance(r, dict) or r.get("tool") != "nccl-check":
            continue
        rows.append([rel, r.get("verdict"), r.get("exit_code"), r.get("nranks"),
                     busbw_text(r.get("avg_busbw")), short(r.get("summary", ""))])
    return rows


def control_plane_rows(d, files):
    rows = []
    for rel in files:
        r = load_json(os.path.join(d, rel)) if rel.endswith(".json") else None
        if not isinstance(r, dict) or "procs" not in r or "total_s" not in r:
            continue
        coord = r.get("coordinator") or {}
        failure = coord.get("failure") if isinstance(coord, dict) else None
        rows.append([rel, r.get("procs"), r.get("dead"), r.get("dead_mode"),
                     r.get("total_s"), short(failure or "-", 90)])
    return rows


SIZES = {"32M": 33554432, "256M": 268435456, "1G": 1073741824, "8G": 8589934592}


def nccl_tests_rows(d, files):
    """Out-of-place busbw of nccl-tests tables (nccl-tests' own or nccl-check's copy of its format)
    at a few sizes, one row a file and collective; emulated nodes' fabNN logs are left out."""
    rows = []
    for rel in files:
        if not rel.endswith((".txt", ".log")) or re.match(r"fab\d+\.", os.path.basename(rel)):
            continue
        try:
            with open(os.path.join(d, rel), errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        coll, busbw, avg = None, {}, {}
        for line in lines:
            m = re.search(r"Collective test starting: (\w+?)(_perf)?$", line.strip())
            if m:
                coll = m.group(1)
                continue
            m = re.match(r"# Avg bus bandwidth\s*:\s*([\d.]+)", line)
            if m and coll:
                avg[coll] = m.group(1)
                continue
            t = line.split()
            if coll and len(t) >= 12 and t[0].isdigit() and int(t[0]) in SIZES.values():
                busbw.setdefault(coll, {})[int(t[0])] = t[7]
        for c in busbw:
            rows.append([rel, c] + [busbw[c].get(v, "-") for v in SIZES.values()] + [avg.get(c, "-")])
    return rows


def last_line(path):
    try:
        with open(path, errors="replace") as f:
            lines = [l for l in f.read().splitlines() if l.strip()]
    except OSError:
        return "-"
    return short(lines[-1], 100) if lines else "(empty)"


def write_summary(d, raw, packed, src=None):
    """summary.md in d from the raw files, read from src (d unless they sit unpacked elsewhere)."""
    name = os.path.basename(os.path.normpath(d))
    d, out_dir = (src or d), d
    where = "now in `raw.tar.xz` (`tar -xJf raw.tar.xz` restores them here)" if packed else "beside it"
    out = [f"# {name}: summary\n\n",
           f"Written by `tests/tools/pack-run.py` from the raw files, {where}. "
           "How the run went and what it showed: README.md.\n\n"]
    tsvs = [r for r in raw if os.path.basename(r) == "summary.tsv"]
    if tsvs:
        out.append("## fabric.sh tables\n\n" + "\n".join(tsv_section(d, r) for r in tsvs) + "\n")
    rows = worker_rows(d, raw)
    if rows:
        out.append("## Worker reports (one row a report; of an emulated multi-node run only fab01.json, the coordinator's)\n\n")
        out.append(md_table(["report", "verdict", "exit", "ranks", "avg busbw GB/s", "summary"], rows) + "\n")
    rows = nccl_tests_rows(d, raw)
    if rows:
        out.append("## nccl-tests tables (out-of-place busbw, GB/s)\n\n")
        out.append(md_table(["file", "collective"] + list(SIZES) + ["avg"], rows) + "\n")
    rows = control_plane_rows(d, raw)
    if rows:
        out.append("## Control-plane runs\n\n")
        out.append(md_table(["run", "processes", "dead rank", "dead how", "total s", "coordinator's failure"], rows) + "\n")
    top = [r for r in raw if "/" not in r and not r.endswith(".json") and not r.endswith(".tgz")]
    if top:
        out.append("## Top-level outputs (last line of each)\n\n")
        out.append(md_table(["file", "bytes", "last line"],
                            [[r, os.path.getsize(os.path.join(d, r)), last_line(os.path.join(d, r))] for r in top]) + "\n")
    dirs = {}
    for r in raw:
        if "/" in r:
            dirs.setdefault(r.split("/")[0], []).append(r)
    if dirs:
        out.append("## Raw folders in the archive\n\n")
        out.append(md_table(["folder", "files"], [[k + "/", len(v)] for k, v in sorted(dirs.items())]))
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write("".join(out))


def resummarize(d):
    """Write summary.md again from a packed folder's raw.tar.xz and the files kept beside it."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = []
        if os.path.isfile(os.path.join(d, "raw.tar.xz")):
            with tarfile.open(os.path.join(d, "raw.tar.xz")) as tar:
                tar.extractall(tmp, filter="data")
                raw = sorted(m.name for m in tar.getmembers() if m.isfile())
        kept = [f for f in files_under(d) if f not in KEEP_NAMES]
        for f in kept:
            os.makedirs(os.path.dirname(os.path.join(tmp, f)), exist_ok=True)
            with open(os.path.join(d, f), "rb") as a, open(os.path.join(tmp, f), "wb") as b:
                b.write(a.read())
        write_summary(d, sorted(raw + kept), packed=bool(raw), src=tmp)


def pack(root, d, cited):
    rel_dir = os.path.relpath(os.path.abspath(d), root)
    files = files_under(d)
    # A cited file stays where it is cited; a cited folder below the run folder is packed (its
    # citation names the archive).
    keep = {f for f in files if ("/" not in f and f in KEEP_NAMES) or f"{rel_dir}/{f}" in cited}
    raw = [f for f in files if f not in keep]
    if raw and "raw.tar.xz" in files:
        sys.exit(f"pack-run: {rel_dir} already has raw.tar.xz and unpacked raw files: unpack, add, pack again")
    if not any(f in keep for f in ("summary.md", "summary.csv", "summary.tsv")):
        write_summary(d, raw or sorted(keep - KEEP_NAMES), packed=bool(raw))
    if not raw:
        return
    with tempfile.NamedTemporaryFile(dir=d, delete=False) as tmp:
        pass
    with tarfile.open(tmp.name, "w:xz", preset=9) as tar:
        for f in raw:
            info = tar.gettarinfo(os.path.join(d, f), arcname=f)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.mode = 0o755 if info.mode & 0o111 else 0o644
            with open(os.path.join(d, f), "rb") as fh:
                tar.addfile(info, fh)
    os.replace(tmp.name, os.path.join(d, "raw.tar.xz"))
    for f in raw:
        os.remove(os.path.join(d, f))
    for base, dirs, names in os.walk(d, topdown=False):
        if base != d and not os.listdir(base):
            os.rmdir(base)
    print(f"{rel_dir}: {len(raw)} files into raw.tar.xz, kept {sorted(keep) or '-'}")


def check(root, dirs):
    bad = []
    for top in dirs:
        for name in sorted(os.listdir(top)):
            d = os.path.join(top, name)
            if os.path.isdir(d):
                n = len(files_under(d))
                if n > MAX_FILES:
                    bad.append(f"{d}: {n} files (at most {MAX_FILES}: pack it with tests/tools/pack-run.py)")
                if not os.path.isfile(os.path.join(d, "README.md")):
                    bad.append(f"{d}: no README.md (device, driver, NCCL, date, command)")
    for b in bad:
        print(b)
    return 1 if bad else 0


def selftest(root):
    """The check fails on a crowded folder and on one without README; packing fixes the first."""
    with tempfile.TemporaryDirectory() as top:
        run = os.path.join(top, "run")
        os.makedirs(os.path.join(run, "n8-healthy-1"))
        with open(os.path.join(run, "README.md"), "w") as f:
            f.write("# a run\n")
        for i in range(12):
            with open(os.path.join(run, "n8-healthy-1", f"fab{i:02}.json"), "w") as f:
                json.dump({"tool": "nccl-check", "verdict": "PASS", "exit_code": 0, "nranks": 8,
                           "avg_busbw": {"all_reduce": 0.4}, "summary": f"node {i}"}, f)
        os.makedirs(os.path.join(top, "bare"))
        assert check(root, [top]) == 1, "a folder of 13 files and one without README must fail"
        pack(root, run, set())
        os.rmdir(os.path.join(top, "bare"))
        assert check(root, [top]) == 0, "a packed folder passes"
        assert sorted(os.listdir(run)) == ["README.md", "raw.tar.xz", "summary.md"], os.listdir(run)
        with tarfile.open(os.path.join(run, "raw.tar.xz")) as tar:
            assert len(tar.getnames()) == 12, tar.getnames()
        with open(os.path.join(run, "summary.md")) as f:
            text = f.read()
        assert "n8-healthy-1/fab01.json | PASS" in text and "fab00.json" not in text, text
    print("pack-run selftest: ok")
    return 0


def main(argv):
    root = repo_root()
    if argv[:1] == ["--selftest"]:
        return selftest(root)
    if argv[:1] == ["--resummarize"]:
        for d in argv[1:]:
            resummarize(d)
        return 0
    if argv[:1] == ["--check"]:
        return check(root, argv[1:] or [os.path.join(root, r) for r in RESULTS_ROOTS])
    if not argv:
        sys.exit(__doc__)
    cited = cited_paths(root)
    for d in argv:
        if not os.path.isdir(d):
            sys.exit(f"pack-run: {d}: not a folder")
        pack(root, d, cited)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
