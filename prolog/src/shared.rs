//! Other jobs' GPUs on a shared node (`gpus = "all"` at a job's start or end): which of this
//! node's GPUs Slurm has allocated to other jobs, so that the run measures only the rest and
//! holds a stray process against the node only on a GPU that is this job's or no job's.
//!
//! Asked of Slurm with bounded client calls (each within the budget, output capped):
//! `scontrol show node -d -o NODE` (how many GPUs the node has and uses: `Gres=`, `GresUsed=`),
//! `squeue -h -w NODE -o %A` (the jobs on it) and `scontrol show job -d -o JOB` for each (its
//! per-node `GRES=gpu:1(IDX:1)`). Untyped gres shows no indices in the node's `GresUsed=gpu:3`
//! (seen on 22.05, 24.11 and 26.05), so the jobs' lines are the source of the indices and the
//! node's count checks them: a job line may carry text its owner chose (a job name, a path), so
//! indices that do not add up to what slurmctld counts are not trusted.
//!
//! Slurm's gres index is taken as the GPU's index in PCI bus order, the mapping `gpus = "job"`
//! uses for `CUDA_VISIBLE_DEVICES` ([`crate::gpus`]); where it cannot hold (Slurm counts another
//! number of GPUs than the driver lists) nothing is skipped and strays are only warned.

use crate::drain::Slurm;
use nccl_check_contract::hostlist::Hostlist;
use std::collections::{BTreeMap, BTreeSet};

/// More jobs than this on one node: not asked one by one (the budget would not cover it).
pub const MAX_JOBS: usize = 64;
/// A gres index above this is not a GPU index (guards the set arithmetic against garbage).
const MAX_INDEX: usize = 1023;

/// A node's gpu gres as `scontrol show node -d` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeGres {
    /// `Gres=gpu:h100:2,gpu:a100:2`: 4.
    pub total: u64,
    /// `GresUsed=...`: how many are allocated (to any job, this one included).
    pub used: u64,
    /// `GresUsed=gpu:h100:1(IDX:0),...`: the indices, where shown (typed gres only).
    pub used_idx: Option<BTreeSet<usize>>,
}

/// What Slurm says about this node's GPUs and the jobs holding them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Allocation {
    pub node: NodeGres,
    /// The GPUs of this job (none without gres/gpu).
    pub ours: BTreeSet<usize>,
    /// Every other job on the node with its GPU indices here.
    pub others: BTreeMap<String, BTreeSet<usize>>,
    /// Every other job on the node, GPUs or not.
    pub other_jobs: Vec<String>,
}

/// What one run does about other jobs' GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// GPU index (Slurm's = PCI order) to the other jobs holding it: not measured, not judged.
    pub skip: BTreeMap<usize, Vec<String>>,
    /// Whether a process on a measured GPU can be held against the node: Ok when every measured
    /// GPU is known to be this job's or no job's; Err says why not.
    pub strays_judged: Result<(), String>,
}

impl Plan {
    /// `skipped GPU1, GPU2: allocated to job 42; GPU3: allocated to jobs 43, 44`; empty when
    /// nothing is skipped.
    pub fn said(&self) -> String {
        let mut by_jobs: Vec<(String, Vec<usize>)> = Vec::new();
        for (gpu, jobs) in &self.skip {
            let who = match jobs.as_slice() {
                [one] => format!("job {one}"),
                many => format!("jobs {}", many.join(", ")),
            };
            match by_jobs.iter_mut().find(|(w, _)| *w == who) {
                Some((_, gpus)) => gpus.push(*gpu),
                None => by_jobs.push((who, vec![*gpu])),
            }
        }
        let parts: Vec<String> = by_jobs
            .iter()
            .map(|(who, gpus)| {
                let g: Vec<String> = gpus.iter().map(|i| format!("GPU{i}")).collect();
                format!("{}: allocated to {who}", g.join(", "))
            })
            .collect();
        if parts.is_empty() {
            String::new()
        } else {
            format!("skipped {}", parts.join("; "))
        }
    }
}

/// Splits a gres list at the commas outside parentheses (`gpu:2(IDX:0,2),gpu:a100:1(IDX:3)`).
fn items(list: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&list[start..]);
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

/// One gpu entry of a gres list.
struct GpuItem {
    count: u64,
    /// The indices, where the list shows them.
    idx: Option<BTreeSet<usize>>,
}

/// One gpu item: `gpu:h100:2(IDX:0-1)` is 2, {0, 1}; `gpu:3` 3 without indices;
/// `gpu(IDX:0)` (Slurm before 21.08) 1, {0}. `None` for another gres (`shard:...`).
fn gpu_item(item: &str) -> Result<Option<GpuItem>, String> {
    let (head, paren) = match item.split_once('(') {
        Some((h, p)) => (h, Some(p.strip_suffix(')').ok_or("unclosed '('")?)),
        None => (item, None),
    };
    let mut parts = head.split(':');
    if parts.next() != Some("gpu") {
        return Ok(None);
    }
    let rest: Vec<&str> = parts.collect();
    let idx = match paren.and_then(|p| p.strip_prefix("IDX:")) {
        Some(list) => Some(parse_idx(list)?),
        None => None,
    };
    // The count is the last field when it is a number (`gpu:h100` alone is a type, count 1).
    let count = match rest.last().map(|c| c.parse::<u64>()) {
        Some(Ok(n)) => n,
        _ => idx.as_ref().map_or(1, |i| i.len() as u64),
    };
    Ok(Some(GpuItem { count, idx }))
}

/// `0-2,5` as {0, 1, 2, 5}; `N/A` and empty are none.
pub fn parse_idx(list: &str) -> Result<BTreeSet<usize>, String> {
    let mut out = BTreeSet::new();
    if list.is_empty() || list == "N/A" {
        return Ok(out);
    }
    for part in list.split(',') {
        let num = |s: &str| {
            s.parse::<usize>()
                .ok()
                .filter(|&n| n <= MAX_INDEX)
                .ok_or_else(|| format!("IDX {list:?}: {s:?} is not a GPU index"))
        };
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(part)?, num(part)?),
        };
        if a > b {
            return Err(format!("IDX {list:?}: {part:?} runs backwards"));
        }
        out.extend(a..=b);
    }
    Ok(out)
}

/// The `Gres=` and `GresUsed=` of one `scontrol show node -d -o NODE` line.
pub fn parse_node(line: &str) -> Result<NodeGres, String> {
    let field = |k: &str| line.split_whitespace().find_map(|t| t.strip_prefix(k));
    let mut g = NodeGres::default();
    let gres = field("Gres=").ok_or("no Gres= in scontrol show node -d")?;
    for it in items(gres) {
        if let Some(item) = gpu_item(it)? {
            g.total += item.count;
        }
    }
    let used = field("GresUsed=").unwrap_or("");
    for it in items(used) {
        if let Some(GpuItem { count, idx }) = gpu_item(it)? {
            g.used += count;
            if let Some(idx) = idx {
                g.used_idx.get_or_insert_with(BTreeSet::new).extend(idx);
            }
        }
    }
    Ok(g)
}

/// The GPU indices `node` holds for the job of one `scontrol show job -d -o JOB` line: the
/// `GRES=` (`GRES_IDX=` before 21.08) after each `Nodes=` that names `node`.
pub fn parse_job(line: &str, node: &str) -> Result<BTreeSet<usize>, String> {
    let mut here = false;
    let mut out = BTreeSet::new();
    for t in line.split_whitespace() {
        if let Some(list) = t.strip_prefix("Nodes=") {
            here = Hostlist::parse(list).is_ok_and(|h| h.contains(node));
        } else if let Some(g) = t
            .strip_prefix("GRES=")
            .or_else(|| t.strip_prefix("GRES_IDX="))
        {
            if here {
                for it in items(g) {
                    if let Some(GpuItem { idx: Some(idx), .. }) = gpu_item(it)? {
                        out.extend(idx);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// `squeue -h -o %A`: one job id per line, digits only.
pub fn parse_squeue(out: &str) -> Result<Vec<String>, String> {
    let mut ids = Vec::new();
    for l in out.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if !l.bytes().all(|b| b.is_ascii_digit()) || l.len() > 20 {
            return Err(format!("squeue: {:?} is not a job id", l.escape_debug()));
        }
        if !ids.iter().any(|i| i == l) {
            ids.push(l.to_string());
        }
    }
    Ok(ids)
}

/// Asks Slurm which GPUs of `slurm.node` the jobs on it hold; `job` is this run's job.
pub fn ask(slurm: &Slurm, job: Option<&str>) -> Result<Allocation, String> {
    let node_out = slurm.scontrol_show(&["show", "node", "-d", "-o", &slurm.node])?;
    let line = node_out.lines().next().unwrap_or("");
    let node =
        parse_node(line).map_err(|e| format!("scontrol show node -d {}: {e}", slurm.node))?;
    let mut a = Allocation {
        node,
        ..Allocation::default()
    };
    let ids = parse_squeue(&slurm.squeue(&["-h", "-w", &slurm.node, "-o", "%A"])?)?;
    a.other_jobs = ids
        .iter()
        .filter(|i| Some(i.as_str()) != job)
        .cloned()
        .collect();
    if a.node.used == 0 {
        return Ok(a);
    }
    if ids.len() > MAX_JOBS {
        return Err(format!(
            "{} jobs on {} (more than {MAX_JOBS} are not asked one by one)",
            ids.len(),
            slurm.node
        ));
    }
    for id in ids {
        let out = match slurm.scontrol_show(&["show", "job", "-d", "-o", &id]) {
            Ok(o) => o,
            // It ended between the two questions: its GPUs are free now.
            Err(e) if e.contains("Invalid job id") => continue,
            Err(e) => return Err(e),
        };
        let idx = parse_job(out.lines().next().unwrap_or(""), &slurm.node)
            .map_err(|e| format!("scontrol show job -d {id}: {e}"))?;
        if Some(id.as_str()) == job {
            a.ours = idx;
        } else if !idx.is_empty() {
            a.others.insert(id, idx);
        }
    }
    Ok(a)
}

/// What to skip and whether strays can be judged, from Slurm's answer (or why it could not be
/// had) and the number of GPUs the driver lists.
pub fn plan(asked: Result<Allocation, String>, driver_gpus: usize) -> Plan {
    let unjudged = |why: String| Plan {
        skip: BTreeMap::new(),
        strays_judged: Err(why),
    };
    let a = match asked {
        Ok(a) => a,
        Err(e) => {
            return unjudged(format!(
                "Slurm could not say which GPUs other jobs hold ({e}): every GPU checked"
            ))
        }
    };
    let mut holders: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (job, idx) in &a.others {
        for &i in idx {
            holders.entry(i).or_default().push(job.clone());
        }
    }
    if a.node.total == 0 && !a.other_jobs.is_empty() {
        return unjudged(format!(
            "other jobs run on this node (job {}) and Slurm gives no job GPUs here (no gres/gpu): \
             whose a GPU is is not known, every GPU checked",
            a.other_jobs.join(", ")
        ));
    }
    let accounted: BTreeSet<usize> = a.ours.iter().chain(holders.keys()).copied().collect();
    // What the jobs' lines claim must be what slurmctld counts for the node (a job's line can
    // carry text its owner chose; a job may also have started between the questions).
    if accounted.len() as u64 != a.node.used
        || a.node.used_idx.as_ref().is_some_and(|u| *u != accounted)
    {
        return unjudged(format!(
            "Slurm counts {} GPUs in use on this node but its jobs account for {} ({}): \
             nothing skipped, every GPU checked",
            a.node.used,
            accounted.len(),
            list(&accounted)
        ));
    }
    if holders.is_empty() {
        return Plan {
            skip: holders,
            strays_judged: Ok(()),
        };
    }
    if a.node.total != driver_gpus as u64 || accounted.iter().any(|&i| i >= driver_gpus) {
        return unjudged(format!(
            "other jobs hold GPUs {} but Slurm has {} GPUs on this node and the driver lists \
             {driver_gpus}: which GPU is which is not known, nothing skipped, every GPU checked",
            list(&holders.keys().copied().collect()),
            a.node.total
        ));
    }
    Plan {
        skip: holders,
        strays_judged: Ok(()),
    }
}

fn list(s: &BTreeSet<usize>) -> String {
    let v: Vec<String> = s.iter().map(|i| i.to_string()).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured with tests/prolog/capture/gres-capture.sh: one node n1 with four GPUs, job 1 on
    /// `--gres=gpu:1` and job 2 on `--gres=gpu:2` (typed: `gpu:a100:2`; the node has
    /// `gpu:h100:2,gpu:a100:2`).
    fn capture(dir: &str, file: &str) -> String {
        let p = format!(
            "{}/tests/data/shared/{dir}/{file}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&p).expect(&p)
    }

    const MAJORS: [&str; 3] = ["22.05", "24.11", "26.05"];

    #[test]
    fn typed_gres_of_every_major_gives_counts_and_indices() {
        for m in MAJORS {
            let v = capture(m, "version.txt");
            assert!(v.contains(m), "{m}: {v}");
            let idle = parse_node(&capture(m, "node-idle.txt")).expect(m);
            assert_eq!((idle.total, idle.used), (4, 0), "{m}");
            assert_eq!(idle.used_idx, Some(BTreeSet::new()), "{m}");
            let busy = parse_node(&capture(m, "node-two-jobs.txt")).expect(m);
            assert_eq!((busy.total, busy.used), (4, 3), "{m}");
            assert_eq!(busy.used_idx, Some([0, 2, 3].into()), "{m}");
            assert_eq!(parse_job(&capture(m, "job-a.txt"), "n1"), Ok([0].into()));
            assert_eq!(parse_job(&capture(m, "job-b.txt"), "n1"), Ok([2, 3].into()));
            assert_eq!(
                parse_job(&capture(m, "job-b.txt"), "n2"),
                Ok(BTreeSet::new())
            );
            assert_eq!(
                parse_squeue(&capture(m, "squeue.txt").replace(" RUNNING", "")).map(|v| v.len()),
                Ok(2)
            );
        }
    }

    #[test]
    fn untyped_gres_shows_no_indices_on_the_node_only_on_the_jobs() {
        for m in MAJORS {
            let d = format!("{m}-untyped");
            let busy = parse_node(&capture(&d, "node-two-jobs.txt")).expect(m);
            assert_eq!((busy.total, busy.used, busy.used_idx), (4, 3, None), "{m}");
            assert_eq!(parse_job(&capture(&d, "job-a.txt"), "n1"), Ok([0].into()));
            assert_eq!(
                parse_job(&capture(&d, "job-b.txt"), "n1"),
                Ok([1, 2].into())
            );
        }
    }

    #[test]
    fn gres_lists_of_every_shape_are_read() {
        let n = |gres: &str, used: &str| {
            parse_node(&format!(
                "NodeName=x Gres={gres} GresDrain=N/A GresUsed={used} State=MIXED"
            ))
        };
        let g = n("gpu:4(S:0-1),shard:8", "gpu:2(IDX:0,3),shard:0(0/2,0/2)").expect("ok");
        assert_eq!((g.total, g.used, g.used_idx), (4, 2, Some([0, 3].into())));
        assert_eq!(n("(null)", "").expect("ok"), NodeGres::default());
        assert!(n("gpu:4", "gpu:1(IDX:x)").is_err());
        assert!(n("gpu:4", "gpu:1(IDX:3-1)").is_err());
        assert!(n("gpu:4", "gpu:1(IDX:99999)").is_err());
        // Slurm before 21.08 wrote GRES_IDX=gpu(IDX:0); a job on two nodes has one Nodes= each.
        let j = "JobId=7 NodeList=n[1-2] Nodes=n1 CPU_IDs=0 Mem=0 GRES_IDX=gpu(IDX:0) \
                 Nodes=n2 CPU_IDs=0-1 Mem=0 GRES=gpu:h100:2(IDX:1-2) MinCPUsNode=1";
        assert_eq!(parse_job(j, "n1"), Ok([0].into()));
        assert_eq!(parse_job(j, "n2"), Ok([1, 2].into()));
        let both = "JobId=8 Nodes=n[1-2] CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:3)";
        assert_eq!(parse_job(both, "n2"), Ok([3].into()));
        assert!(parse_squeue("12\n13\n").is_ok());
        assert!(parse_squeue("12_1\n").is_err());
    }

    fn alloc(total: u64, used: u64, ours: &[usize], others: &[(&str, &[usize])]) -> Allocation {
        Allocation {
            node: NodeGres {
                total,
                used,
                used_idx: None,
            },
            ours: ours.iter().copied().collect(),
            others: others
                .iter()
                .map(|(j, i)| (j.to_string(), i.iter().copied().collect()))
                .collect(),
            other_jobs: others.iter().map(|(j, _)| j.to_string()).collect(),
        }
    }

    #[test]
    fn other_jobs_gpus_are_skipped_and_named_and_the_rest_judged() {
        let p = plan(Ok(alloc(4, 3, &[0], &[("42", &[1]), ("43", &[3])])), 4);
        assert_eq!(p.strays_judged, Ok(()));
        assert_eq!(p.skip.keys().copied().collect::<Vec<_>>(), [1, 3]);
        assert_eq!(
            p.said(),
            "skipped GPU1: allocated to job 42; GPU3: allocated to job 43"
        );
        let p = plan(Ok(alloc(8, 3, &[], &[("42", &[3, 5, 6])])), 8);
        assert_eq!(p.said(), "skipped GPU3, GPU5, GPU6: allocated to job 42");
        // No other job: nothing skipped, everything judged, whatever the mapping.
        let p = plan(Ok(alloc(4, 1, &[2], &[])), 0);
        assert_eq!((p.skip.len(), p.strays_judged.clone()), (0, Ok(())));
        assert_eq!(p.said(), "");
    }

    #[test]
    fn an_unknown_mapping_or_an_unanswered_question_skips_nothing_and_judges_no_stray() {
        // The driver lists 2 GPUs, Slurm 4: which is which is not known.
        let p = plan(Ok(alloc(4, 1, &[], &[("42", &[1])])), 2);
        assert!(p.skip.is_empty());
        assert!(p.strays_judged.unwrap_err().contains("not known"));
        // A job's line claims more than slurmctld counts (text its owner chose, or a race).
        let p = plan(Ok(alloc(4, 1, &[], &[("42", &[0, 1, 2, 3])])), 4);
        assert!(p.skip.is_empty());
        assert!(p
            .strays_judged
            .unwrap_err()
            .contains("counts 1 GPUs in use"));
        // Typed gres: the node's own indices must be the jobs'.
        let mut a = alloc(4, 1, &[], &[("42", &[1])]);
        a.node.used_idx = Some([2].into());
        assert!(plan(Ok(a), 4).strays_judged.is_err());
        // Without gres/gpu beside other jobs: any GPU may be theirs.
        let mut a = alloc(0, 0, &[], &[]);
        a.other_jobs = vec!["42".into()];
        assert!(plan(Ok(a), 4)
            .strays_judged
            .unwrap_err()
            .contains("no gres/gpu"));
        assert_eq!(plan(Ok(alloc(0, 0, &[], &[])), 4).strays_judged, Ok(()));
        let p = plan(Err("scontrol: no answer".into()), 4);
        assert!(p.skip.is_empty());
        assert!(p.strays_judged.unwrap_err().contains("no answer"));
    }
    /// A directory with a fake `scontrol` and `squeue` that print canned answers.
    fn fake_slurm(name: &str, node: &str, squeue: &str, jobs: &[(&str, &str)]) -> Slurm {
        use std::os::unix::fs::PermissionsExt;
        let dir =
            std::env::temp_dir().join(format!("nccl-check-shared-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let mut sc = format!(
            "#!/bin/sh\nif [ \"$2\" = node ]; then cat <<'EOF'\n{node}\nEOF\nexit 0; fi\ncase \"$5\" in\n"
        );
        for (id, line) in jobs {
            sc.push_str(&format!("{id}) cat <<'EOF'\n{line}\nEOF\n;;\n"));
        }
        sc.push_str(
            "*) echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1;;\nesac\n",
        );
        let sq = format!("#!/bin/sh\ncat <<'EOF'\n{squeue}\nEOF\n");
        for (f, text) in [("scontrol", sc), ("squeue", sq)] {
            let p = dir.join(f);
            std::fs::write(&p, text).expect("write");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        Slurm {
            scontrol: dir.join("scontrol"),
            node: "n1".into(),
            slurm_conf: None,
            deadline: crate::budget::Deadline::after(std::time::Duration::from_secs(10)),
        }
    }

    #[test]
    fn slurm_is_asked_for_the_node_its_jobs_and_each_job_and_an_ended_job_is_no_holder() {
        let d = "22.05-untyped";
        let node = capture(d, "node-two-jobs.txt");
        let (a, b) = (capture(d, "job-a.txt"), capture(d, "job-b.txt"));
        // Job 1 is ours, job 2 another's, job 3 ended between the questions.
        let slurm = fake_slurm(
            "ask",
            node.trim(),
            "1\n2\n3",
            &[("1", a.trim()), ("2", b.trim())],
        );
        let got = ask(&slurm, Some("1")).expect("asked");
        assert_eq!(got.ours, [0].into());
        assert_eq!(got.others, [("2".to_string(), [1, 2].into())].into());
        assert_eq!(got.other_jobs, ["2", "3"]);
        let p = plan(Ok(got), 4);
        assert_eq!(p.said(), "skipped GPU1, GPU2: allocated to job 2");
        assert_eq!(p.strays_judged, Ok(()));
        // A job id that is not one, and too many jobs, are not asked further.
        let bad = fake_slurm("bad", node.trim(), "1\n$(reboot)", &[]);
        assert!(ask(&bad, Some("1")).unwrap_err().contains("not a job id"));
        let many: Vec<String> = (1..=MAX_JOBS + 1).map(|i| i.to_string()).collect();
        let lots = fake_slurm("lots", node.trim(), &many.join("\n"), &[]);
        assert!(ask(&lots, Some("1")).unwrap_err().contains("jobs on n1"));
        for s in [slurm, bad, lots] {
            std::fs::remove_dir_all(s.scontrol.parent().expect("dir")).ok();
        }
    }
}
