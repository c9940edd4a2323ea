//! The localizer across processes. Every process runs the same deterministic [`Conductor`] on
//! the same vectors ([`decide_here`]): a round's results are summed over every process (each
//! group's value in its slot, [`slots`]: NCCL's all_reduce on the GPUs, the control plane's sum
//! in the GPU-less simulation), so every process decides for itself where its ranks stand next
//! (a [`ConductorStep`]) and no coordinator sits in the round. [`follow`] runs one caller's part. The
//! GPU runner and the GPU-less scale test (`nccl-check-sim`) both run exactly this;
//! [`decide_in`] (the coordinator alone deciding, replies through the star) stays for the
//! control-plane benchmark that measures the star.
//!
//! Same vectors, same steps: the localizer keeps no time and no randomness, and its hash sets
//! are only asked `contains`, never iterated (`schedule.rs`), so its decisions depend on the
//! summed vectors alone.

use super::layout::Layout;
use super::reasons::{self, MAX_REASON_CHARS};
use super::{Group, LocalizeError, Localizer, Round};
use crate::model::localization::{LocalizeSummary, Phase};
use nccl_check_contract::report::reason::Reason;
use serde::{Deserialize, Serialize};

/// Reasons a process is told at the end: its own node's first, then the others, up to this many
/// (the coordinator's report keeps them all).
pub const MAX_SHARED_REASONS: usize = 16;

/// One rank's place in a round: the group it is in, the rank it exchanges with, and whether it
/// reports the group's result (the first end of a pair does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Place {
    pub rank: u32,
    pub group: u32,
    pub peer: u32,
    pub leads: bool,
}

/// What one process does next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ConductorStep {
    /// Measure round `index` (of `groups` groups): the places of this process's ranks in it
    /// (none when they sit this round out; they still meet the others at its end).
    Round {
        index: u32,
        phase: Phase,
        groups: u32,
        mine: Vec<Place>,
    },
    /// The verdict.
    Done(LocalizeSummary),
}

impl ConductorStep {
    /// A step as a process receives it, checked against what that process is: every place is
    /// one of `mine` (its ranks), at most once, with a peer among `nranks` other than itself, in
    /// a group of the round. The coordinator is authenticated; this catches its bugs, not lies.
    pub fn check(&self, mine: &[usize], nranks: usize) -> Result<(), String> {
        let ConductorStep::Round {
            groups,
            mine: places,
            ..
        } = self
        else {
            return Ok(());
        };
        let mut seen = Vec::with_capacity(places.len());
        for p in places {
            let (rank, peer) = (p.rank as usize, p.peer as usize);
            if !mine.contains(&rank) || seen.contains(&rank) {
                return Err(format!(
                    "a place for rank {rank}, which is not this process's or twice"
                ));
            }
            if peer >= nranks || peer == rank || p.group >= *groups {
                return Err(format!(
                    "rank {rank}: peer {peer} of {nranks} in group {} of {groups}",
                    p.group
                ));
            }
            seen.push(rank);
        }
        Ok(())
    }
}

/// Values the coordinator knows without a round of pairs (each node's own GPUs, the allocation
/// collective): the runner measured them before, the simulation computes them.
pub type Known = Box<dyn FnMut(&Round) -> Vec<f64> + Send>;

/// The coordinator's side: runs the localizer and turns each round into every process's step.
pub struct Conductor {
    localizer: Option<Localizer>,
    layout: Layout,
    /// The process of every rank.
    process_of: Vec<u32>,
    /// Every process's node (one entry a process).
    node_of_process: Vec<Option<usize>>,
    /// The coordinator's process: its report keeps every reason.
    coordinator: u32,
    known: Known,
    pending: bool,
    pair_groups: usize,
    plan: &'static str,
    allocation_floor: Option<f64>,
}

impl Conductor {
    /// `process_of[r]`: the process rank of rank `r` (every process has at least one rank).
    pub fn new(
        localizer: Localizer,
        layout: Layout,
        process_of: Vec<u32>,
        coordinator: u32,
        plan: &'static str,
        allocation_floor: Option<f64>,
        known: Known,
    ) -> Conductor {
        let processes = process_of
            .iter()
            .map(|&p| p as usize + 1)
            .max()
            .unwrap_or(1);
        let mut node_of_process = vec![None; processes];
        for (rank, &p) in process_of.iter().enumerate().rev() {
            node_of_process[p as usize] = layout.node_of_rank(rank);
        }
        Conductor {
            localizer: Some(localizer.named(&layout.names)),
            layout,
            process_of,
            node_of_process,
            coordinator,
            known,
            pending: false,
            pair_groups: 0,
            plan,
            allocation_floor,
        }
    }

    /// Every process's next step, in process-rank order, given the results of the round asked
    /// for last (empty before the first). Rounds whose values are known run here at once.
    pub fn decide(&mut self, results: &[f64]) -> Result<Vec<ConductorStep>, LocalizeError> {
        let localizer = self
            .localizer
            .as_mut()
            .ok_or(LocalizeError::NoRoundPending)?;
        if std::mem::take(&mut self.pending) {
            localizer.record(results)?;
        } else if !results.is_empty() {
            return Err(LocalizeError::NoRoundPending);
        }
        while let Some(round) = localizer.next_round() {
            if round.phase.is_localization() {
                self.pending = true;
                self.pair_groups += round.groups.len();
                return Ok(self.places(&round));
            }
            localizer.record(&(self.known)(&round))?;
        }
        let verdict = self.localizer.take().map(Localizer::finish);
        let verdict = verdict.ok_or(LocalizeError::NoRoundPending)?;
        let summary = LocalizeSummary {
            plan: self.plan.into(),
            nodes: self.layout.names.len(),
            rails: self.layout.rails,
            rounds: verdict.rounds,
            localization_rounds: verdict.localization_rounds,
            allocation_busbw: verdict.allocation_busbw,
            allocation_floor: self.allocation_floor,
            pair_groups: self.pair_groups,
            reasons: reasons::reasons(&verdict),
            reasons_omitted: 0,
            round_times: Vec::new(),
            paths: None,
        };
        Ok((0..self.node_of_process.len())
            .map(|p| match p == self.coordinator as usize {
                true => ConductorStep::Done(summary.clone()),
                false => ConductorStep::Done(self.shared(&summary, p)),
            })
            .collect())
    }

    /// Every process's places in `round`: both ends of every pair, the first end leading.
    fn places(&self, round: &Round) -> Vec<ConductorStep> {
        let mut steps: Vec<Vec<Place>> = vec![Vec::new(); self.node_of_process.len()];
        for (i, g) in round.groups.iter().enumerate() {
            let Some((a, b)) = self.layout.pair_ranks(g) else {
                continue;
            };
            for (rank, peer, leads) in [(a, b, true), (b, a, false)] {
                if let Some(&p) = self.process_of.get(rank) {
                    steps[p as usize].push(Place {
                        rank: rank as u32,
                        group: i as u32,
                        peer: peer as u32,
                        leads,
                    });
                }
            }
        }
        steps
            .into_iter()
            .map(|mine| ConductorStep::Round {
                index: round.index as u32,
                phase: round.phase,
                groups: round.groups.len() as u32,
                mine,
            })
            .collect()
    }

    /// The summary as process `p` is told it: the reasons that name its node first, at most
    /// [`MAX_SHARED_REASONS`], each cut to a bounded length.
    fn shared(&self, all: &LocalizeSummary, p: usize) -> LocalizeSummary {
        let node = self
            .node_of_process
            .get(p)
            .copied()
            .flatten()
            .and_then(|n| self.layout.names.get(n));
        let names_mine = |r: &&Reason| {
            r.subject
                .as_ref()
                .is_some_and(|c| node.is_some_and(|n| c.names_node(n)))
        };
        let others = all.reasons.iter().filter(|r| !names_mine(r));
        let reasons: Vec<Reason> = (all.reasons.iter().filter(names_mine).chain(others))
            .take(MAX_SHARED_REASONS)
            .map(|r| Reason {
                message: r.message.chars().take(MAX_REASON_CHARS).collect(),
                ..r.clone()
            })
            .collect();
        LocalizeSummary {
            reasons_omitted: all.reasons.len() - reasons.len(),
            round_times: Vec::new(),
            reasons,
            ..all.clone()
        }
    }
}

/// The coordinator's decision in a gather, for a conductor kept in `slot`: made by `make` at the
/// first round, then asked for every process's next step; emptied once it hands out the verdict,
/// so the same slot serves the next localization of the process.
pub fn decide_in(
    slot: &mut Option<Conductor>,
    make: impl FnOnce() -> Result<Conductor, String>,
    results: &[f64],
) -> Result<Vec<ConductorStep>, String> {
    let conductor = match slot {
        Some(c) => c,
        None => slot.insert(make()?),
    };
    let steps = conductor
        .decide(results)
        .map_err(|e| format!("localization: {e}"))?;
    if matches!(steps.first(), Some(ConductorStep::Done(_))) {
        *slot = None;
    }
    Ok(steps)
}

/// A round's vector as one caller puts it in before the sum over every process: `len` slots,
/// the result of each group its ranks lead at the group's slot, every other slot 0. Each slot is
/// led by one rank only, so its sum is one value plus zeros: exact in any order of addition, the
/// same bits in every process (no rounding for a reduction tree to reorder).
pub fn slots(len: usize, entries: &[(u64, f64)]) -> Result<Vec<f64>, String> {
    let mut vector = vec![0.0; len];
    for &(group, value) in entries {
        let slot = usize::try_from(group)
            .ok()
            .and_then(|g| vector.get_mut(g))
            .ok_or_else(|| format!("a result for group {group} of a round of {len}"))?;
        *slot = value;
    }
    Ok(vector)
}

/// This caller's next step, decided here: this process's own conductor (in `slot`, made by
/// `make` at the first round, emptied at the verdict) is given the round's summed vector (`sums`,
/// empty before the first round), and of every process's steps this keeps those of the ranks in
/// `mine` of process `process`. Every process runs the same conductor on the same vectors, so
/// each learns what a coordinator deciding alone would have sent it, with nothing sent.
pub fn decide_here(
    slot: &mut Option<Conductor>,
    make: impl FnOnce() -> Result<Conductor, String>,
    sums: &[f64],
    process: u32,
    mine: &[usize],
) -> Result<ConductorStep, String> {
    let mut step = decide_in(slot, make, sums)?
        .into_iter()
        .nth(process as usize)
        .ok_or_else(|| format!("localization: no step for process rank {process}"))?;
    if let ConductorStep::Round { mine: places, .. } = &mut step {
        places.retain(|p| mine.contains(&(p.rank as usize)));
    }
    Ok(step)
}

/// The `coordinator` a process's own [`Conductor`] is made with: the process whose report
/// keeps every reason. Each process decides for itself and keeps the full list only if it
/// coordinates the check (`None` otherwise: its conductor then shares every process the bounded
/// list, its own node's first, as the coordinator's replies did).
pub fn keeper(process: u32, coordinates: bool) -> u32 {
    match coordinates {
        true => process,
        // No process has this rank: every summary is the shared one.
        false => u32::MAX,
    }
}

/// Why following the coordinator stopped.
#[derive(Debug)]
pub enum FollowError<E> {
    /// Gathering or measuring failed (the caller's own error).
    Caller(E),
    /// The coordinator's step does not fit this process.
    BadStep(String),
}

/// One caller's part in a localization the coordinator conducts (a GPU thread with one rank, or
/// a simulated process with several): `gather(len, entries)` hands in the results of the groups
/// its ranks lead and returns its next step; `measure(index, phase, groups, places)` runs one round and returns one
/// busbw (GB/s) per place. Every caller of every process calls `gather` once per round.
pub fn follow<E>(
    mine: &[usize],
    nranks: usize,
    mut gather: impl FnMut(usize, &[(u64, f64)]) -> Result<ConductorStep, E>,
    mut measure: impl FnMut(u32, Phase, u32, &[Place]) -> Result<Vec<f64>, E>,
) -> Result<LocalizeSummary, FollowError<E>> {
    let mut step = gather(0, &[]).map_err(FollowError::Caller)?;
    let mut times = Vec::new();
    loop {
        step.check(mine, nranks).map_err(FollowError::BadStep)?;
        let (index, phase, groups, places) = match step {
            ConductorStep::Done(mut summary) => {
                summary.round_times = times;
                return Ok(summary);
            }
            ConductorStep::Round {
                index,
                phase,
                groups,
                mine: places,
            } => (index, phase, groups, places),
        };
        let began = std::time::Instant::now();
        let values = measure(index, phase, groups, &places).map_err(FollowError::Caller)?;
        let measured = began.elapsed();
        let led: Vec<(&Place, f64)> = places.iter().zip(values).filter(|(p, _)| p.leads).collect();
        let entries: Vec<(u64, f64)> = led.iter().map(|(p, v)| (p.group as u64, *v)).collect();
        let readings = led.iter().map(|(p, v)| (p.rank, p.peer, *v)).collect();
        step = gather(groups as usize, &entries).map_err(FollowError::Caller)?;
        times.push(crate::model::localization::RoundTime {
            round: index,
            phase,
            measure_ms: measured.as_secs_f64() * 1e3,
            gather_ms: (began.elapsed() - measured).as_secs_f64() * 1e3,
            readings,
        });
    }
}

/// The group a place measures, as the localizer numbers nodes and rails.
pub fn group_of(layout: &Layout, place: &Place) -> Option<Group> {
    Some(Group::Pair {
        a: layout.locate(place.rank as usize)?,
        b: layout.locate(place.peer as usize)?,
    })
}

#[cfg(test)]
mod tests;
