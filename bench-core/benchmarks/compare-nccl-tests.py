#!/usr/bin/env python3
"""Benchmark (not a test): nccl-check against an existing nccl-tests build, same GPUs, same libnccl,
same sizes, one run each (or --repeat N). Prints busbw(nccl-check) / busbw(nccl-tests) per collective, size and placement,
and saves both tools' raw output.

  compare-nccl-tests.py --nccl-check target/release/nccl-check --nccl-tests ~/nccl-tests/build \
      --nccl-lib /usr/lib/x86_64-linux-gnu/libnccl.so.2 -b 32M -e 8G --out results/run1

nccl-tests runs as `<coll>_perf -b B -e E -f 2 -g NGPUS -w W -n N -c 1` (one process, all GPUs), with
libnccl's directory first on LD_LIBRARY_PATH; nccl-check as `nccl-check <coll> -b B -e E -f 2 -w W -n N
--nccl-lib LIB`. Environment (NCCL_*) is inherited by both.

--repeat N runs both tools N times, alternating, the first tool swapped every round (nt, ours,
ours, nt, nt, ours, ...) so that neither always runs on a just-warmed machine, and compares the
per-point medians: one run of either tool varies by up to +-5% at 32-256 MiB on 4x H200
(nccl-tests alltoall 64 MiB: 248.9 and 272.3 GB/s in two runs of one visit; alltoall out-of-place
128 MiB: 279.5 to 303.9 GB/s over 11 runs), which says more about the moment than about the tool.
With --repeat, spread.txt lists each point's range (min..max over the runs) for both tools.
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
    ap.add_argument("--repeat", type=int, default=1, help="runs of each tool, alternating; medians compared")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ngpus = a.gpus
    if not ngpus:
        q = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
        ngpus = len([l for l in q.stdout.splitlines() if l.startswith("GPU")])
    env = dict(os.environ)
    libdir = os.path.dirname(os.path.realpath(a.nccl_lib))
    env_nt = dict(env, LD_LIBRARY_PATH=libdir + ":" + env.get("LD_LIBRARY_PATH", ""))
    lines, ratios, failures = [], [], 0
    lines.append("# busbw ratio nccl-check / nccl-tests, %d GPUs, sizes %s..%s, -w %s -n %s" % (ngpus, a.b, a.e, a.w, a.n))
    lines.append("%-15s %12s %10s %10s %7s %10s %10s %7s" % ("collective", "size", "oop_ours", "oop_nt", "ratio", "ip_ours", "ip_nt", "ratio"))
    def median_rows(texts):
        out = {}
        for size in set().union(*[set(t) for t in texts]):
            vals = [t[size] for t in texts if size in t]
            out[size] = {k: statistics.median(v[k] for v in vals) for k in ("oop", "ip")}
        return out

    if a.repeat > 1:
        lines[0] += ", median of %d alternating runs per tool" % a.repeat
    spread = ["# busbw range over %d runs per tool (GB/s), min..max" % a.repeat,
              "%-15s %12s %-19s %-19s %-19s %-19s" % ("collective", "size", "oop_ours", "oop_nt", "ip_ours", "ip_nt")]
    for coll in a.collectives.split(","):
        nts, ourss = [], []
        for k in range(a.repeat):
            tag = "" if a.repeat == 1 else ".%d" % (k + 1)

            def nccl_tests():
                p = run([os.path.join(a.nccl_tests, coll + "_perf"), "-b", a.b, "-e", a.e, "-f", "2", "-g", str(ngpus),
                         "-w", a.w, "-n", a.n, "-c", "1"], env_nt, os.path.join(a.out, coll + tag + ".nccl-tests.txt"), 900)
                nts.append(rows(p.stdout))

            def nccl_check():
                p = run([a.nccl_check, coll, "-b", a.b, "-e", a.e, "-f", "2", "-w", a.w, "-n", a.n, "--timeout", "900",
                         "--nccl-lib", a.nccl_lib, "--json", os.path.join(a.out, coll + tag + ".nccl-check.json")],
                        env, os.path.join(a.out, coll + tag + ".nccl-check.txt"), 900)
                ourss.append(rows(p.stdout))

            order = [nccl_tests, nccl_check] if k % 2 == 0 else [nccl_check, nccl_tests]
            for step in order:
                step()
        rn, ro = median_rows(nts), median_rows(ourss)
        for size in sorted(rn):
            rng = lambda runs, key: "%.1f..%.1f" % (min(r[size][key] for r in runs if size in r),
                                                     max(r[size][key] for r in runs if size in r))
            if all(size in r for r in ourss):
                spread.append("%-15s %12d %-19s %-19s %-19s %-19s" % (
                    coll, size, rng(ourss, "oop"), rng(nts, "oop"), rng(ourss, "ip"), rng(nts, "ip")))
        for size in sorted(rn):
            if size not in ro:
                lines.append("%-15s %12d missing in nccl-check" % (coll, size))
                failures += 1
                continue
            r1 = ro[size]["oop"] / rn[size]["oop"] if rn[size]["oop"] else float("nan")
            r2 = ro[size]["ip"] / rn[size]["ip"] if rn[size]["ip"] else float("nan")
            ratios += [r1, r2]
            lines.append("%-15s %12d %10.2f %10.2f %7.3f %10.2f %10.2f %7.3f" % (coll, size, ro[size]["oop"], rn[size]["oop"], r1, ro[size]["ip"], rn[size]["ip"], r2))
    if ratios:
        inside = sum(1 for r in ratios if 0.97 <= r <= 1.03)
        lines.append("# points %d, within [0.97, 1.03]: %d, min %.3f, median %.3f, max %.3f" % (
            len(ratios), inside, min(ratios), statistics.median(ratios), max(ratios)))
    text = "\n".join(lines) + "\n"
    print(text, end="")
    with open(os.path.join(a.out, "ratios.txt"), "w") as fh:
        fh.write(text)
    if a.repeat > 1:
        with open(os.path.join(a.out, "spread.txt"), "w") as fh:
            fh.write("\n".join(spread) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
