#!/usr/bin/env python3
"""Benchmark (not a test): nccl-check against an existing nccl-tests build, same GPUs, same libnccl,
same sizes, one run each (or --repeat N). Prints busbw(nccl-check) / busbw(nccl-tests) per collective, size and placement,
and saves both tools' raw output.

  compare-nccl-tests.py --nccl-check target/release/nccl-check --nccl-tests ~/nccl-tests/build \
      --nccl-lib /usr/lib/x86_64-linux-gnu/libnccl.so.2 -b 32M -e 8G --out results/run1

nccl-tests runs as `<coll>_perf -b B -e E -f 2 -t NGPUS -g 1 -w W -n N -c 1` (one process, one thread
per GPU: the way nccl-check drives GPUs), with libnccl's directory first on LD_LIBRARY_PATH; nccl-check
as `nccl-check <coll> -b B -e E -f 2 -w W -n N --nccl-lib LIB`. Environment (NCCL_*) is inherited by
both. `--nccl-tests-mode gpus` runs nccl-tests as `-g NGPUS` instead (one thread launching every GPU in
one NCCL group, the classic invocation); `both` runs both modes every round and writes one table per
mode (ratios.threads.txt, ratios.gpus.txt). The launch model alone moves busbw by a few percent at
32-64 MiB: on 4x H200, broadcast 32 MiB in-place, nccl-tests -g 4 gives 279-285 GB/s and -t 4 -g 1
293-296 GB/s in the same visit (results/2026-11-21-h200x4-session4).

--repeat N runs every tool N times, interleaved, the order rotated every round so that no tool
always runs on a just-warmed machine, and compares the per-point medians: one run of either tool
varies by up to +-5% at 32-256 MiB on 4x H200 (nccl-tests alltoall 64 MiB: 248.9 and 272.3 GB/s in
two runs of one visit; alltoall out-of-place 128 MiB: 279.5 to 303.9 GB/s over 11 runs), which says
more about the moment than about the tool. With --repeat, spread.txt (spread.MODE.txt with `both`)
lists each point's range (min..max over the runs) for both tools.
"""
import argparse, os, statistics, subprocess, sys, time

COLLS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall", "sendrecv"]


def rows(text):
    out = {}
    for line in text.splitlines():
        f = line.split()
        if not f or line.startswith("#") or len(f) < 13 or not f[0].isdigit():
            continue
        out[int(f[0])] = {"oop": float(f[7]), "ip": float(f[11]), "oop_wrong": f[8], "ip_wrong": f[12]}
    return out


def run(cmd, env, log, timeout):
    t = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    with open(log, "w") as fh:
        fh.write("$ " + " ".join(cmd) + "\n" + p.stdout + "\n# stderr:\n" + p.stderr)
        fh.write("\n# rc=%d wall_s=%.2f\n" % (p.returncode, time.time() - t))
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nccl-check", required=True)
    ap.add_argument("--nccl-tests", required=True, help="directory holding all_reduce_perf etc.")
    ap.add_argument("--nccl-lib", required=True, help="libnccl.so.2 both tools use")
    ap.add_argument("-b", default="32M")
    ap.add_argument("-e", default="8G")
    ap.add_argument("-w", default="5")
    ap.add_argument("-n", default="20")
    ap.add_argument("--gpus", type=int, default=0, help="GPU count (default: all visible)")
    ap.add_argument("--collectives", default=",".join(COLLS))
    ap.add_argument("--out", required=True, help="directory for raw outputs and the ratio table")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each tool, interleaved; medians compared")
    ap.add_argument("--nccl-tests-mode", choices=["threads", "gpus", "both"], default="threads",
                    help="threads: -t NGPUS -g 1, one thread per GPU as nccl-check drives them (default); "
                         "gpus: -g NGPUS, one thread launching all GPUs in a group; both: each round runs both")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ngpus = a.gpus
    if not ngpus:
        q = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
        ngpus = len([l for l in q.stdout.splitlines() if l.startswith("GPU")])
    env = dict(os.environ)
    libdir = os.path.dirname(os.path.realpath(a.nccl_lib))
    env_nt = dict(env, LD_LIBRARY_PATH=libdir + ":" + env.get("LD_LIBRARY_PATH", ""))
    modes = ["threads", "gpus"] if a.nccl_tests_mode == "both" else [a.nccl_tests_mode]
    nt_flags = {"threads": ["-t", str(ngpus), "-g", "1"], "gpus": ["-g", str(ngpus)]}
    runs = {"ours": {}, **{m: {} for m in modes}}  # tool -> collective -> list of parsed runs

    def nccl_tests(coll, tag, mode):
        name = "nccl-tests" if len(modes) == 1 else "nccl-tests-" + mode
        p = run([os.path.join(a.nccl_tests, coll + "_perf"), "-b", a.b, "-e", a.e, "-f", "2", *nt_flags[mode],
                 "-w", a.w, "-n", a.n, "-c", "1"], env_nt, os.path.join(a.out, coll + tag + "." + name + ".txt"), 900)
        runs[mode].setdefault(coll, []).append(rows(p.stdout))

    def nccl_check(coll, tag):
        p = run([a.nccl_check, coll, "-b", a.b, "-e", a.e, "-f", "2", "-w", a.w, "-n", a.n, "--timeout", "900",
                 "--nccl-lib", a.nccl_lib, "--json", os.path.join(a.out, coll + tag + ".nccl-check.json")],
                env, os.path.join(a.out, coll + tag + ".nccl-check.txt"), 900)
        runs["ours"].setdefault(coll, []).append(rows(p.stdout))

    colls = a.collectives.split(",")
    for coll in colls:
        for k in range(a.repeat):
            tag = "" if a.repeat == 1 else ".%d" % (k + 1)
            steps = [lambda m=m: nccl_tests(coll, tag, m) for m in modes] + [lambda: nccl_check(coll, tag)]
            # Rotate the order every round so that no tool always runs first on a just-warmed machine.
            for step in steps[k % len(steps):] + steps[:k % len(steps)]:
                step()

    failures = 0
    for mode in modes:
        text, spread, missing = report(a, ngpus, mode, nt_flags[mode], colls, runs["ours"], runs[mode])
        failures += missing
        suffix = "" if len(modes) == 1 else "." + mode
        print(text, end="")
        with open(os.path.join(a.out, "ratios%s.txt" % suffix), "w") as fh:
            fh.write(text)
        if a.repeat > 1:
            with open(os.path.join(a.out, "spread%s.txt" % suffix), "w") as fh:
                fh.write(spread)
    return 1 if failures else 0


def median_rows(texts):
    out = {}
    for size in set().union(*[set(t) for t in texts]):
        vals = [t[size] for t in texts if size in t]
        out[size] = {k: statistics.median(v[k] for v in vals) for k in ("oop", "ip")}
    return out


def report(a, ngpus, mode, flags, colls, ours, theirs):
    """The ratio table (and the per-point range table) of nccl-check against one nccl-tests mode."""
    lines = ["# busbw ratio nccl-check / nccl-tests (%s), %d GPUs, sizes %s..%s, -w %s -n %s" % (
        " ".join(flags), ngpus, a.b, a.e, a.w, a.n)]
    if a.repeat > 1:
        lines[0] += ", median of %d interleaved runs per tool" % a.repeat
    lines.append("%-15s %12s %10s %10s %7s %10s %10s %7s" % ("collective", "size", "oop_ours", "oop_nt", "ratio",
                                                             "ip_ours", "ip_nt", "ratio"))
    spread = ["# busbw range over %d runs per tool (GB/s), min..max; nccl-tests %s" % (a.repeat, " ".join(flags)),
              "%-15s %12s %-19s %-19s %-19s %-19s" % ("collective", "size", "oop_ours", "oop_nt", "ip_ours", "ip_nt")]
    ratios, missing = [], 0
    for coll in colls:
        nts, ourss = theirs.get(coll, []), ours.get(coll, [])
        rn, ro = median_rows(nts), median_rows(ourss)
        for size in sorted(rn):
            if size not in ro:
                lines.append("%-15s %12d missing in nccl-check" % (coll, size))
                missing += 1
                continue
            r1 = ro[size]["oop"] / rn[size]["oop"] if rn[size]["oop"] else float("nan")
            r2 = ro[size]["ip"] / rn[size]["ip"] if rn[size]["ip"] else float("nan")
            ratios += [r1, r2]
            lines.append("%-15s %12d %10.2f %10.2f %7.3f %10.2f %10.2f %7.3f" % (
                coll, size, ro[size]["oop"], rn[size]["oop"], r1, ro[size]["ip"], rn[size]["ip"], r2))
            if all(size in r for r in ourss):
                rng = lambda rs, key: "%.1f..%.1f" % (min(r[size][key] for r in rs if size in r),
                                                       max(r[size][key] for r in rs if size in r))
                spread.append("%-15s %12d %-19s %-19s %-19s %-19s" % (
                    coll, size, rng(ourss, "oop"), rng(nts, "oop"), rng(ourss, "ip"), rng(nts, "ip")))
    if ratios:
        inside = sum(1 for r in ratios if 0.97 <= r <= 1.03)
        lines.append("# points %d, within [0.97, 1.03]: %d, min %.3f, median %.3f, max %.3f" % (
            len(ratios), inside, min(ratios), statistics.median(ratios), max(ratios)))
    return "\n".join(lines) + "\n", "\n".join(spread) + "\n", missing


if __name__ == "__main__":
    sys.exit(main())
