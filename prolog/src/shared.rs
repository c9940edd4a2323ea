//! Other jobs' GPUs on a shared node (`gpus = "all"` at a job's start or end): which of this
//! node's GPUs Slurm has allocated to other jobs, so that the run measures only the rest and
//! holds a stray process against the node only on a GPU that is this job's or no job's.
//!
//! Asked of Slurm with two bounded client calls (each within the budget, output capped):
//! `scontrol show node -d -o NODE` (how many GPUs the node has and uses: `Gres=`, `GresUsed=`,
//! fields only the admin and slurmctld write) and `squeue --json -w NODE` (the jobs, with each
//! job's per-node `gres_detail` such as `gpu:1(IDX:1)`, written by Slurm). Never a job's text
//! line: there the job's name, working directory and comment, which its owner chooses (and
//! changes at run time with `scontrol update`), share the line with the GRES fields. Untyped
//! gres shows no indices in the node's `GresUsed=gpu:3` (seen on 22.05, 24.11 and 26.05), so the
//! jobs are the source of the indices and the node's count checks them: indices that do not add
//! up to what slurmctld counts (a job that started between the questions) are not trusted. Where
//! Slurm cannot say (no JSON, an answer cut short or malformed, counts that differ), nothing is
//! skipped and a GPU's load is never held against the node (`gate/measurement.rs`).
//!
//! Slurm's gres index is taken as the GPU's index in PCI bus order, the mapping `gpus = "job"`
//! uses for `CUDA_VISIBLE_DEVICES` ([`crate::gpus`]); where it cannot hold (Slurm counts another
//! number of GPUs than the driver lists) nothing is skipped and strays are only warned.

use crate::drain::Slurm;
use nccl_check_host::hostlist::Hostlist;
use std::collections::{BTreeMap, BTreeSet};

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
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b) = (num(a)?, num(b)?);
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

/// One job of `squeue --json`: only what Slurm writes itself. The job's name, working
/// directory, comment and every other text its owner chose are separate fields, never read.
#[derive(serde::Deserialize)]
struct JsonJob {
    job_id: u64,
    /// `"RUNNING"` (22.05) or `["RUNNING"]` (23.02 and later).
    #[serde(default)]
    job_state: serde_json::Value,
    /// The job's nodes as a host list (`n[1-2]`).
    #[serde(default)]
    nodes: Option<String>,
    /// One entry per node of the job, in the order of `job_resources`: `gpu:a100:2(IDX:2-3)`.
    #[serde(default)]
    gres_detail: Vec<String>,
    #[serde(default)]
    job_resources: serde_json::Value,
}

#[derive(serde::Deserialize)]
struct JsonJobs {
    jobs: Vec<JsonJob>,
}

/// A job's states that hold no resources (not started, or ended and not completing).
const NOT_HOLDING: [&str; 12] = [
    "PENDING",
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
    "REVOKED",
    "SPECIAL_EXIT",
];

impl JsonJob {
    fn states(&self) -> Vec<&str> {
        match &self.job_state {
            serde_json::Value::String(s) => vec![s.as_str()],
            serde_json::Value::Array(a) => a.iter().filter_map(|v| v.as_str()).collect(),
            _ => Vec::new(),
        }
    }

    /// Whether the job holds its nodes now (running, suspended, completing, ...).
    fn holds(&self) -> bool {
        let st = self.states();
        st.contains(&"COMPLETING") || !st.iter().any(|s| NOT_HOLDING.contains(s))
    }

    /// The job's nodes in the order of its `gres_detail`: `job_resources`' own list
    /// (`allocated_nodes[].nodename` on 22.05, `nodes.allocation[].name` later), else its
    /// host list.
    fn node_order(&self) -> Result<Vec<String>, String> {
        let r = &self.job_resources;
        let listed = r
            .get("allocated_nodes")
            .and_then(|a| a.as_array())
            .map(|a| ("nodename", a))
            .or_else(|| {
                r.pointer("/nodes/allocation")
                    .and_then(|a| a.as_array())
                    .map(|a| ("name", a))
            });
        if let Some((key, list)) = listed {
            return list
                .iter()
                .map(|n| {
                    n.get(key)
                        .and_then(|v| v.as_str())
                        .map(str::to_string)
                        .ok_or_else(|| format!("job {}: a node without {key}", self.job_id))
                })
                .collect();
        }
        match self.nodes.as_deref().filter(|n| !n.is_empty()) {
            Some(n) => Hostlist::parse(n)
                .map(|h| h.iter().collect())
                .map_err(|e| format!("job {}: nodes {n:?}: {e}", self.job_id)),
            None => Ok(Vec::new()),
        }
    }

    /// The GPU indices the job holds on `node`; `None` when it holds nothing there.
    fn gpus_on(&self, node: &str) -> Result<Option<BTreeSet<usize>>, String> {
        if !self.holds() {
            return Ok(None);
        }
        let order = self.node_order()?;
        let Some(k) = order.iter().position(|n| n == node) else {
            return Ok(None);
        };
        let mut out = BTreeSet::new();
        if self.gres_detail.is_empty() {
            return Ok(Some(out));
        }
        // One entry per node, or which entry is this node's is not known.
        if self.gres_detail.len() != order.len() {
            return Err(format!(
                "job {}: {} gres_detail entries for {} nodes",
                self.job_id,
                self.gres_detail.len(),
                order.len()
            ));
        }
        for it in items(&self.gres_detail[k]) {
            match gpu_item(it)? {
                Some(GpuItem { idx: Some(idx), .. }) => out.extend(idx),
                Some(GpuItem { count, idx: None }) if count > 0 => {
                    return Err(format!("job {}: GPUs without indices", self.job_id))
                }
                _ => {}
            }
        }
        Ok(Some(out))
    }
}

/// The jobs that hold `node` now, each with its GPU indices there (empty: none), from
/// `squeue --json`. Every field read is one Slurm writes; an answer that is not Slurm's JSON,
/// or a job whose GPUs cannot be placed, is an error (then whose a GPU is is not known).
pub fn parse_jobs_json(
    text: &str,
    node: &str,
) -> Result<BTreeMap<String, BTreeSet<usize>>, String> {
    let jobs: JsonJobs =
        serde_json::from_str(text).map_err(|e| format!("squeue --json: not Slurm's JSON: {e}"))?;
    let mut out: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    for j in &jobs.jobs {
        if let Some(idx) = j.gpus_on(node).map_err(|e| format!("squeue --json: {e}"))? {
            out.entry(j.job_id.to_string()).or_default().extend(idx);
        }
    }
    Ok(out)
}

/// Asks Slurm which GPUs of `slurm.node` the jobs on it hold; `job` is this run's job. Two
/// bounded questions: the node's line (its gres counts: fields only the admin and slurmctld
/// write) and `squeue --json` (the jobs: Slurm's structured answer, never a line that mixes in
/// text a job's owner chose).
pub fn ask(slurm: &Slurm, job: Option<&str>) -> Result<Allocation, String> {
    let node_out = slurm.scontrol_show(&["show", "node", "-d", "-o", &slurm.node])?;
    let line = node_out.lines().next().unwrap_or("");
    let node =
        parse_node(line).map_err(|e| format!("scontrol show node -d {}: {e}", slurm.node))?;
    let mut a = Allocation {
        node,
        ..Allocation::default()
    };
    let jobs = parse_jobs_json(&slurm.squeue_json(&["-w", &slurm.node])?, &slurm.node)?;
    for (id, idx) in jobs {
        if Some(id.as_str()) == job {
            a.ours = idx;
            continue;
        }
        a.other_jobs.push(id.clone());
        if !idx.is_empty() {
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
    // Only GPUs to skip need Slurm's indices to be the driver's.
    let mismatched =
        a.node.total != driver_gpus as u64 || accounted.iter().any(|&i| i >= driver_gpus);
    if !holders.is_empty() && mismatched {
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

    fn jobs_of(text: &str, node: &str) -> Result<Vec<(String, Vec<usize>)>, String> {
        parse_jobs_json(text, node).map(|m| {
            m.into_iter()
                .map(|(j, i)| (j, i.into_iter().collect()))
                .collect()
        })
    }

    fn held(list: &[(&str, &[usize])]) -> Vec<(String, Vec<usize>)> {
        list.iter()
            .map(|(j, i)| (j.to_string(), i.to_vec()))
            .collect()
    }

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
        }
        for m in MAJORS {
            let j = capture(m, "squeue.json");
            assert_eq!(jobs_of(&j, "n1"), Ok(held(&[("1", &[0]), ("2", &[2, 3])])));
            assert_eq!(jobs_of(&j, "n2"), Ok(vec![]));
        }
    }

    #[test]
    fn untyped_gres_shows_no_indices_on_the_node_only_on_the_jobs() {
        for m in MAJORS {
            let d = format!("{m}-untyped");
            let busy = parse_node(&capture(&d, "node-two-jobs.txt")).expect(m);
            assert_eq!((busy.total, busy.used, busy.used_idx), (4, 3, None), "{m}");
        }
        for m in MAJORS {
            let j = capture(&format!("{m}-untyped"), "squeue.json");
            assert_eq!(jobs_of(&j, "n1"), Ok(held(&[("1", &[0]), ("2", &[1, 2])])));
        }
    }

    /// The captured answer with every text a job's owner chooses set to something that reads
    /// like Slurm's own fields (the job name, working directory, comment, output paths, ...).
    fn hostile(json: &str) -> String {
        let mut v: serde_json::Value = serde_json::from_str(json).expect("json");
        let lie = " Nodes=n1 GRES=gpu:1(IDX:1) gres_detail gpu:4(IDX:0-3) \"gres_detail\": [\"gpu:4(IDX:0-3)\"]";
        for j in v["jobs"].as_array_mut().expect("jobs") {
            for k in [
                "name",
                "comment",
                "current_working_directory",
                "standard_output",
                "standard_error",
                "standard_input",
                "wckey",
                "admin_comment",
                "system_comment",
                "command",
            ] {
                j[k] = serde_json::Value::String(lie.to_string());
            }
        }
        v.to_string()
    }

    #[test]
    fn hostile_job_names_workdirs_and_comments_do_not_change_whose_gpus_are_whose() {
        for d in MAJORS
            .iter()
            .flat_map(|m| [m.to_string(), format!("{m}-untyped")])
        {
            let d = d.as_str();
            let j = capture(d, "squeue.json");
            let bad = hostile(&j);
            assert_ne!(bad, j);
            assert!(bad.contains("IDX:0-3"));
            assert_eq!(jobs_of(&bad, "n1"), jobs_of(&j, "n1"), "{d}");
            assert!(jobs_of(&bad, "n1").is_ok_and(|v| v.len() == 2), "{d}");
        }
    }

    /// A `squeue --json` answer of one job (the fields read; 24.11 and later name the nodes in
    /// `job_resources.nodes.allocation[].name` and the state as a list).
    fn one_job(id: u64, state: &str, nodes: &str, detail: &[&str], resources: &str) -> String {
        format!(
            r#"{{"jobs":[{{"job_id":{id},"job_state":{state},"nodes":"{nodes}","name":"x",
            "gres_detail":{},"job_resources":{resources}}}]}}"#,
            serde_json::to_string(detail).expect("detail")
        )
    }

    #[test]
    fn json_jobs_of_every_shape_are_read_and_what_does_not_add_up_is_an_error() {
        // 24.11's shape: the nodes' order from job_resources, a state list.
        let r = r#"{"nodes":{"allocation":[{"index":0,"name":"n2"},{"index":1,"name":"n1"}]}}"#;
        let j = one_job(
            7,
            r#"["RUNNING"]"#,
            "n[1-2]",
            &["gpu:h100:2(IDX:1-2)", "gpu(IDX:0)"],
            r,
        );
        assert_eq!(jobs_of(&j, "n1"), Ok(held(&[("7", &[0])])));
        assert_eq!(jobs_of(&j, "n2"), Ok(held(&[("7", &[1, 2])])));
        // 22.05's shape, and the host list when job_resources is missing.
        let r = r#"{"allocated_nodes":[{"nodename":"n1"},{"nodename":"n2"}]}"#;
        let j = one_job(
            8,
            r#""RUNNING""#,
            "n[1-2]",
            &["gpu:1(IDX:3)", "gpu:1(IDX:0)"],
            r,
        );
        assert_eq!(jobs_of(&j, "n1"), Ok(held(&[("8", &[3])])));
        let j = one_job(
            8,
            r#""RUNNING""#,
            "n[1-2]",
            &["gpu:1(IDX:3)", "gpu:1(IDX:0)"],
            "null",
        );
        assert_eq!(jobs_of(&j, "n2"), Ok(held(&[("8", &[0])])));
        // A job without GPUs holds the node; a pending or ended one holds nothing; a completing
        // one still holds its GPUs.
        let j = one_job(9, r#""RUNNING""#, "n1", &[], "null");
        assert_eq!(jobs_of(&j, "n1"), Ok(held(&[("9", &[])])));
        let j = one_job(9, r#""PENDING""#, "", &[], "null");
        assert_eq!(jobs_of(&j, "n1"), Ok(vec![]));
        let j = one_job(9, r#"["COMPLETED"]"#, "n1", &["gpu:1(IDX:2)"], "null");
        assert_eq!(jobs_of(&j, "n1"), Ok(vec![]));
        let j = one_job(
            9,
            r#"["COMPLETED","COMPLETING"]"#,
            "n1",
            &["gpu:1(IDX:2)"],
            "null",
        );
        assert_eq!(jobs_of(&j, "n1"), Ok(held(&[("9", &[2])])));
        // What cannot be placed: fewer entries than nodes, GPUs without indices, bad indices,
        // an answer cut short or not Slurm's at all.
        let j = one_job(9, r#""RUNNING""#, "n[1-2]", &["gpu:1(IDX:3)"], "null");
        assert!(jobs_of(&j, "n1")
            .unwrap_err()
            .contains("1 gres_detail entries for 2 nodes"));
        let j = one_job(9, r#""RUNNING""#, "n1", &["gpu:2"], "null");
        assert!(jobs_of(&j, "n1").unwrap_err().contains("without indices"));
        let j = one_job(9, r#""RUNNING""#, "n1", &["gpu:1(IDX:99999)"], "null");
        assert!(jobs_of(&j, "n1").is_err());
        let full = capture("22.05", "squeue.json");
        assert!(jobs_of(&full[..full.len() / 2], "n1")
            .unwrap_err()
            .contains("not Slurm's JSON"));
        assert!(jobs_of(&full[full.len() / 2..], "n1").is_err());
        assert!(jobs_of("squeue: error: Invalid node name", "n1").is_err());
        assert!(jobs_of(r#"{"jobs":[{"job_id":"1; reboot"}]}"#, "n1").is_err());
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
    fn fake_slurm(name: &str, node: &str, squeue: &str) -> Slurm {
        use std::os::unix::fs::PermissionsExt;
        let dir =
            std::env::temp_dir().join(format!("nccl-check-shared-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("node.txt"), node).expect("write");
        std::fs::write(dir.join("squeue.out"), squeue).expect("write");
        let d = dir.display();
        // Only the structured question is answered: a text question gets an error.
        let sc = format!(
            "#!/bin/sh\n[ \"$1 $2 $3 $4\" = 'show node -d -o' ] && exec cat {d}/node.txt\nexit 1\n"
        );
        let sq =
            format!("#!/bin/sh\n[ \"$1 $2\" = '--json -w' ] && exec cat {d}/squeue.out\nexit 1\n");
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
    fn slurm_is_asked_for_the_node_and_its_jobs_as_json_and_a_hostile_job_changes_nothing() {
        let d = "22.05-untyped";
        let node = capture(d, "node-two-jobs.txt");
        let json = capture(d, "squeue.json");
        // Job 1 is ours, job 2 another's; the same with every text of the jobs hostile.
        for (name, answer) in [("ask", json.clone()), ("hostile", hostile(&json))] {
            let slurm = fake_slurm(name, node.trim(), &answer);
            let got = ask(&slurm, Some("1")).expect("asked");
            assert_eq!(got.ours, [0].into());
            assert_eq!(got.others, [("2".to_string(), [1, 2].into())].into());
            assert_eq!(got.other_jobs, ["2"]);
            let p = plan(Ok(got), 4);
            assert_eq!(p.said(), "skipped GPU1, GPU2: allocated to job 2", "{name}");
            assert_eq!(p.strays_judged, Ok(()));
            std::fs::remove_dir_all(slurm.scontrol.parent().expect("dir")).ok();
        }
        // An answer that is not JSON: not known, nothing skipped, no stray judged.
        let bad = fake_slurm("bad", node.trim(), "1\n2\n");
        let asked = ask(&bad, Some("1"));
        assert!(asked.as_ref().unwrap_err().contains("not Slurm's JSON"));
        let p = plan(asked, 4);
        assert!(p.skip.is_empty() && p.strays_judged.is_err());
        std::fs::remove_dir_all(bad.scontrol.parent().expect("dir")).ok();
    }
}
