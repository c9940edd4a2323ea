//! The GPU threads of one process acting together: barriers, sums, minimums and gathers across
//! local threads and, through the control plane, across processes. Every wait has the run's deadline, and the first
//! failure anywhere releases everyone at once. While no operation runs (the GPUs measure), the
//! watch thread ([`Team::watch`]) tends the plane's connections, so a process that stops
//! answering mid-collective ends the check in an ERROR naming its node, not in a bare timeout.

use crate::meet::rendezvous::plane::frame::Op;
use crate::meet::rendezvous::plane::{Decide, Liveness};
use crate::meet::rendezvous::{ControlPlane, PlaneError};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Why a team operation failed; the kind decides the exit code, the text says where.
#[derive(Debug, Clone, PartialEq, Eq, strum::Display)]
pub enum TeamError {
    /// The team had failed already (another thread or process first): this thread stops.
    #[strum(to_string = "stopped: {0}")]
    Stopped(String),
    /// The other local GPU threads did not all arrive before the deadline.
    #[strum(to_string = "{0}")]
    LocalDeadline(String),
    /// The sum over the processes failed.
    #[strum(to_string = "{0}")]
    Plane(PlaneError),
}

pub struct Team {
    n_local: usize,
    deadline: Instant,
    state: Mutex<State>,
    cv: Condvar,
    plane: Mutex<ControlPlane>,
    failed: AtomicBool,
    /// What the watch found (a process gone, another's abort), if it failed the team first.
    lost: Mutex<Option<PlaneError>>,
    /// Whether the other processes were told of the failure (`fail` could not take the plane
    /// while an operation or the watch held it: the watch tells them then).
    told: AtomicBool,
}

/// What the local threads have put in so far this generation.
enum Pending {
    Nothing,
    Reduce {
        op: Op,
        values: Vec<f64>,
    },
    Gather {
        len: usize,
        entries: Vec<(u64, f64)>,
    },
}

/// What a generation gave back.
#[derive(Clone)]
enum Done {
    Values(Vec<f64>),
    Reply(Value),
}

struct State {
    generation: u64,
    arrived: usize,
    pending: Pending,
    result: Done,
    failed: Option<String>,
}

impl Pending {
    /// Adds one local thread's part; threads of one generation must all do the same operation.
    fn add(&mut self, part: Pending) -> Result<(), String> {
        match (&mut *self, part) {
            (Pending::Nothing, part) => *self = part,
            (Pending::Reduce { op, values }, Pending::Reduce { op: o, values: v }) if *op == o => {
                if values.len() < v.len() {
                    let fill = if o == Op::Min { f64::INFINITY } else { 0.0 };
                    values.resize(v.len(), fill);
                }
                values.iter_mut().zip(v).for_each(|(t, x)| o.combine(t, x));
            }
            (Pending::Gather { len, entries }, Pending::Gather { len: l, entries: e })
                if *len == l =>
            {
                entries.extend(e)
            }
            _ => return Err(
                "the GPU threads of this process are out of step (different operations at once)"
                    .into(),
            ),
        }
        Ok(())
    }
}

impl Team {
    pub fn new(n_local: usize, plane: ControlPlane, deadline: Instant) -> Team {
        Team {
            n_local,
            deadline,
            state: Mutex::new(State {
                generation: 0,
                arrived: 0,
                pending: Pending::Nothing,
                result: Done::Values(Vec::new()),
                failed: None,
            }),
            cv: Condvar::new(),
            plane: Mutex::new(plane),
            failed: AtomicBool::new(false),
            lost: Mutex::new(None),
            told: AtomicBool::new(false),
        }
    }

    /// Starts the watch thread: every `live.every` while no operation holds the plane, a pass
    /// of [`ControlPlane::tend`] (beats out, what arrived read); its first error fails the team
    /// and is kept for [`Team::lost`]. Ends with the team, at the deadline, or with the process.
    pub fn watch(self: &Arc<Self>, live: Liveness) -> std::io::Result<()> {
        if let Ok(mut plane) = self.plane.lock() {
            if matches!(*plane, ControlPlane::Alone) {
                return Ok(());
            }
            plane.set_liveness(live);
        }
        let team = self.clone();
        std::thread::Builder::new()
            .name("plane-watch".into())
            .spawn(move || {
                while Instant::now() < team.deadline {
                    std::thread::sleep(live.every);
                    if team.is_failed() {
                        team.tell();
                        return;
                    }
                    // An operation in progress beats and listens itself.
                    let tended = match team.plane.try_lock() {
                        Ok(mut plane) => plane.tend(team.deadline),
                        Err(_) => Ok(()),
                    };
                    // The plane's lock is released here: `fail` takes the state's, which an
                    // operation holds while it waits for the plane's.
                    if let Err(e) = tended {
                        team.lose(e);
                        return;
                    }
                }
            })
            .map(|_| ())
    }

    /// Tells the other processes why the team failed, if `fail` could not.
    fn tell(&self) {
        if self.told.load(Ordering::Relaxed) {
            return;
        }
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let why = st.failed.clone().unwrap_or_default();
        drop(st);
        if let Ok(mut plane) = self.plane.try_lock() {
            plane.abort(&why, self.deadline);
            self.told.store(true, Ordering::Relaxed);
        }
    }

    /// Fails the team with what the watch found, unless it had failed already.
    fn lose(&self, e: PlaneError) {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.failed.is_some() {
            return;
        }
        drop(st);
        if let Ok(mut lost) = self.lost.lock() {
            lost.get_or_insert(e.clone());
        }
        self.fail(&e.to_string());
    }

    /// What the watch found, when it was the first to fail the team: the reason the check
    /// ended, ahead of the GPU threads' own errors (which follow from it: their peers gone).
    pub fn lost(&self) -> Option<PlaneError> {
        self.lost.lock().ok().and_then(|l| l.clone())
    }

    /// What the watch found or, where it found nothing yet, another process's word that
    /// arrives within `within` ([`ControlPlane::last_word`]): asked when this process's own GPU
    /// work failed, since the others' reason may be why. The coordinator tells everyone of a
    /// process's own failure, that process too: hearing its own reason back is no other cause.
    pub fn lost_or_told(&self, within: Duration) -> Option<PlaneError> {
        if let Some(lost) = self.lost() {
            return Some(lost);
        }
        let own = self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .failed
            .clone();
        let word = self
            .plane
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last_word(within)?;
        let echo = own.is_some_and(|why| {
            let start: String = why.chars().take(80).collect();
            word.to_string().contains(&start)
        });
        (!echo).then_some(word)
    }

    /// Marks the team failed (first reason wins) and tells the other processes.
    pub fn fail(&self, why: &str) {
        self.failed.store(true, Ordering::Relaxed);
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.failed.is_none() {
            st.failed = Some(why.to_string());
            if let Ok(mut plane) = self.plane.try_lock() {
                plane.abort(why, self.deadline);
                self.told.store(true, Ordering::Relaxed);
            }
        }
        self.cv.notify_all();
    }

    /// Whether this process coordinates the check (or is alone in it): its report keeps every
    /// reason of the localization.
    pub fn coordinates(&self) -> bool {
        let plane = self.plane.lock().unwrap_or_else(|p| p.into_inner());
        matches!(*plane, ControlPlane::Alone | ControlPlane::Root { .. })
    }

    /// Cheap check for wait loops.
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// Element-wise sum of `values` over every rank of the job; also the barrier (empty values).
    pub fn sum(&self, values: &[f64]) -> Result<Vec<f64>, TeamError> {
        self.reduce(Op::Sum, values)
    }

    /// Element-wise minimum of `values` over every rank of the job.
    pub fn min(&self, values: &[f64]) -> Result<Vec<f64>, TeamError> {
        self.reduce(Op::Min, values)
    }

    fn reduce(&self, op: Op, values: &[f64]) -> Result<Vec<f64>, TeamError> {
        let part = Pending::Reduce {
            op,
            values: values.to_vec(),
        };
        match self.meet(part, None)? {
            Done::Values(v) => Ok(v),
            Done::Reply(_) => Err(out_of_step()),
        }
    }

    pub fn barrier(&self) -> Result<(), TeamError> {
        self.sum(&[]).map(|_| ())
    }

    /// Every rank's `entries` of a vector of `len` values, added up at the coordinator, whose
    /// `decide` (called once, in the coordinator's process only, by whichever of its threads
    /// arrives last) turns the whole vector into one reply per process, in process-rank order.
    /// Every thread of a process gets its process's reply; see [`ControlPlane::gather`].
    pub fn gather<R: Serialize + DeserializeOwned>(
        &self,
        len: usize,
        entries: &[(u64, f64)],
        mut decide: impl FnMut(&[f64]) -> Result<Vec<R>, String>,
    ) -> Result<R, TeamError> {
        let mut as_values = |sums: &[f64]| -> Result<Vec<Value>, String> {
            decide(sums)?
                .iter()
                .map(|r| serde_json::to_value(r).map_err(|e| e.to_string()))
                .collect()
        };
        let part = Pending::Gather {
            len,
            entries: entries.to_vec(),
        };
        match self.meet(part, Some(&mut as_values))? {
            Done::Reply(v) => serde_json::from_value(v).map_err(|e| {
                TeamError::Plane(PlaneError::Peer(format!(
                    "the coordinator's reply does not parse: {e}"
                )))
            }),
            Done::Values(_) => Err(out_of_step()),
        }
    }

    /// One generation: every local thread puts in its part; the last one to arrive talks to the
    /// other processes for everyone, the others wait for its result (or the deadline).
    fn meet(&self, part: Pending, decide: Option<Decide>) -> Result<Done, TeamError> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = &st.failed {
            return Err(TeamError::Stopped(why.clone()));
        }
        if let Err(why) = st.pending.add(part) {
            drop(st);
            self.fail(&why);
            return Err(TeamError::Stopped(why));
        }
        st.arrived += 1;
        let gen = st.generation;
        if st.arrived == self.n_local {
            let pending = std::mem::replace(&mut st.pending, Pending::Nothing);
            let global = {
                let mut plane = self.plane.lock().unwrap_or_else(|p| p.into_inner());
                match (pending, decide) {
                    (Pending::Reduce { op, values }, _) => plane
                        .reduce(gen, op, &values, self.deadline)
                        .map(Done::Values),
                    (Pending::Gather { len, entries }, Some(decide)) => plane
                        .gather(gen, len, &entries, self.deadline, decide)
                        .map(Done::Reply),
                    (Pending::Gather { .. }, None) | (Pending::Nothing, _) => plane
                        .reduce(gen, Op::Sum, &[], self.deadline)
                        .map(Done::Values),
                }
            };
            match global {
                Ok(g) => st.result = g,
                Err(e) => {
                    self.failed.store(true, Ordering::Relaxed);
                    st.failed.get_or_insert(e.to_string());
                    self.cv.notify_all();
                    return Err(TeamError::Plane(e));
                }
            }
            st.arrived = 0;
            st.generation += 1;
            self.cv.notify_all();
            return Ok(st.result.clone());
        }
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let msg = format!(
                    "waiting for the other local GPU threads ({} of {} arrived)",
                    st.arrived, self.n_local
                );
                return Err(TeamError::LocalDeadline(msg));
            }
            st = self
                .cv
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            if st.generation != gen {
                return Ok(st.result.clone());
            }
            if let Some(why) = &st.failed {
                return Err(TeamError::Stopped(why.clone()));
            }
        }
    }
}

fn out_of_step() -> TeamError {
    TeamError::Stopped("the GPU threads of this process are out of step".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn threads_sum_and_meet() {
        let team = Arc::new(Team::new(
            4,
            ControlPlane::Alone,
            Instant::now() + Duration::from_secs(5),
        ));
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let t = team.clone();
                std::thread::spawn(move || {
                    let a = t.sum(&[i as f64, 1.0]).unwrap();
                    t.barrier().unwrap();
                    let b = t.sum(&[2.0]).unwrap();
                    (a, b)
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), (vec![6.0, 4.0], vec![8.0]));
        }
    }

    #[test]
    fn threads_take_minimums_and_gather_one_reply_for_the_process() {
        let team = Arc::new(Team::new(
            3,
            ControlPlane::Alone,
            Instant::now() + Duration::from_secs(5),
        ));
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let handles: Vec<_> = (0..3)
            .map(|i| {
                let (t, calls) = (team.clone(), calls.clone());
                std::thread::spawn(move || {
                    let m = t.min(&[10.0 - i as f64, i as f64]).unwrap();
                    let reply: Vec<String> = t
                        .gather(4, &[(i as u64, 1.0 + i as f64), (3, 1.0)], |sums| {
                            calls.fetch_add(1, Ordering::SeqCst);
                            Ok(vec![sums.iter().map(|s| s.to_string()).collect::<Vec<_>>()])
                        })
                        .unwrap();
                    (m, reply)
                })
            })
            .collect();
        for h in handles {
            let (m, reply) = h.join().unwrap();
            assert_eq!(m, vec![8.0, 0.0]);
            assert_eq!(reply, ["1", "2", "3", "3"]);
        }
        // Only the last thread to arrive decides, once for the process.
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn threads_doing_different_operations_at_once_fail_the_team() {
        let team = Arc::new(Team::new(
            2,
            ControlPlane::Alone,
            Instant::now() + Duration::from_secs(5),
        ));
        let t = team.clone();
        let summer = std::thread::spawn(move || t.sum(&[1.0]));
        std::thread::sleep(Duration::from_millis(100));
        let e = team.min(&[1.0]).unwrap_err();
        assert!(e.to_string().contains("out of step"), "{e}");
        assert!(summer.join().unwrap().is_err());
    }

    #[test]
    fn a_failure_releases_the_waiting_threads_at_once() {
        let team = Arc::new(Team::new(
            2,
            ControlPlane::Alone,
            Instant::now() + Duration::from_secs(30),
        ));
        let t = team.clone();
        let waiter = std::thread::spawn(move || t.barrier());
        std::thread::sleep(Duration::from_millis(100));
        let start = Instant::now();
        team.fail("GPU 1: CUDA error");
        let e = waiter.join().unwrap().unwrap_err();
        assert_eq!(e, TeamError::Stopped("GPU 1: CUDA error".into()));
        assert_eq!(e.to_string(), "stopped: GPU 1: CUDA error");
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_missing_thread_ends_at_the_deadline() {
        let team = Team::new(
            2,
            ControlPlane::Alone,
            Instant::now() + Duration::from_millis(200),
        );
        let e = team.barrier().unwrap_err();
        assert_eq!(
            e,
            TeamError::LocalDeadline(
                "waiting for the other local GPU threads (1 of 2 arrived)".into()
            )
        );
    }
}

/// The watch over loopback: a process that stops answering mid-measure, one whose connection
/// is cut, a coordinator that goes quiet, an operation waiting on a silent process.
#[cfg(test)]
mod watch_tests {
    use super::*;
    use crate::meet::rendezvous::plane::tests::star;
    use std::time::Duration;

    fn quick() -> Liveness {
        Liveness {
            every: Duration::from_millis(50),
            silence: Duration::from_millis(400),
        }
    }

    fn watched(plane: ControlPlane, secs: u64) -> Arc<Team> {
        let t = Arc::new(Team::new(
            1,
            plane,
            Instant::now() + Duration::from_secs(secs),
        ));
        t.watch(quick()).unwrap();
        t
    }

    /// Waits (bounded) until the team has failed; how long that took.
    fn until_failed(t: &Team, within: Duration) -> Duration {
        let start = Instant::now();
        while !t.is_failed() && start.elapsed() < within {
            std::thread::sleep(Duration::from_millis(10));
        }
        start.elapsed()
    }

    fn lost_text(t: &Team) -> String {
        t.lost().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn a_member_that_stops_answering_mid_measure_is_named_by_the_coordinator_and_everyone_learns_it(
    ) {
        let (root, leaves) = star(4, 0);
        let root = watched(root, 30);
        let mut teams = Vec::new();
        let mut silent = None;
        for (r, plane) in leaves {
            if r == 2 {
                // It beats once, then its link goes down: it holds the connection, says nothing.
                let mut plane = plane;
                plane.tend(Instant::now() + Duration::from_secs(1)).unwrap();
                silent = Some(plane);
            } else {
                teams.push(watched(plane, 30));
            }
        }
        // Healthy for a while: three silences' worth of beats, nobody failed.
        std::thread::sleep(Duration::from_millis(150));
        assert!(!root.is_failed());
        let took = until_failed(&root, Duration::from_secs(5));
        assert!(took < Duration::from_secs(4), "{took:?}");
        let e = lost_text(&root);
        assert!(
            e.starts_with("node h2 (process rank 2) stopped answering the control plane for"),
            "{e}"
        );
        assert!(matches!(root.lost(), Some(PlaneError::Lost(_))));
        for t in &teams {
            until_failed(t, Duration::from_secs(2));
            let e = lost_text(t);
            assert!(
                e.starts_with("another process gave up: node h2 (process rank 2) stopped"),
                "{e}"
            );
        }
        drop(silent);
    }

    #[test]
    fn a_member_whose_connection_is_cut_is_named_at_once() {
        let (root, mut leaves) = star(3, 0);
        let root = watched(root, 30);
        let (_, cut) = leaves.remove(1);
        let other = watched(leaves.remove(0).1, 30);
        std::thread::sleep(Duration::from_millis(100));
        drop(cut);
        let took = until_failed(&root, Duration::from_secs(5));
        assert!(took < quick().silence, "{took:?}");
        let e = lost_text(&root);
        assert!(
            e.starts_with("node h2 (process rank 2) went away: the connection was closed"),
            "{e}"
        );
        until_failed(&other, Duration::from_secs(2));
        assert!(
            lost_text(&other).contains("node h2"),
            "{}",
            lost_text(&other)
        );
    }

    #[test]
    fn members_name_a_coordinator_that_goes_quiet_and_it_names_its_own_node() {
        let (root, leaves) = star(3, 0);
        // The coordinator's node lost its link (after one beat): its watch hears nobody, nobody
        // hears it.
        let mut root = root;
        root.tend(Instant::now() + Duration::from_secs(1)).unwrap();
        let quiet_root = Arc::new(Team::new(1, root, Instant::now() + Duration::from_secs(30)));
        let teams: Vec<Arc<Team>> = leaves.into_iter().map(|(_, p)| watched(p, 30)).collect();
        for t in &teams {
            let took = until_failed(t, Duration::from_secs(5));
            assert!(took < Duration::from_secs(4), "{took:?}");
            let e = lost_text(t);
            assert!(
                e.starts_with("the coordinator (127.0.0.1:") && e.contains("stopped answering"),
                "{e}"
            );
        }
        drop(quiet_root);
        // The coordinator's own view when it hears none of the others (they are alive, but
        // nothing of theirs reaches it).
        let (mut plane, mut leaves) = star(3, 0);
        plane.set_liveness(quick());
        for (_, l) in leaves.iter_mut() {
            l.tend(Instant::now() + Duration::from_secs(1)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
        plane.tend(Instant::now() + Duration::from_secs(1)).unwrap(); // heard them once
        std::thread::sleep(quick().silence + Duration::from_millis(100));
        let e = plane
            .tend(Instant::now() + Duration::from_secs(1))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("none of the other 2 processes answered")
                && e.to_string().contains("this node (h0)"),
            "{e}"
        );
        drop(leaves);
    }

    #[test]
    fn a_failure_while_the_plane_is_busy_still_reaches_the_others() {
        let (root, mut leaves) = star(2, 0);
        let root = watched(root, 30);
        let member = watched(leaves.remove(0).1, 30);
        {
            // An operation (or the watch's pass) holds the plane when the GPU thread fails.
            let _busy = member.plane.lock().unwrap();
            member.fail("GPU 0 (rank 1): CUDA error 999");
        }
        let took = until_failed(&root, Duration::from_secs(5));
        assert!(took < Duration::from_secs(4), "{took:?}");
        let e = lost_text(&root);
        assert_eq!(
            e,
            "process rank 1 (h1) gave up: GPU 0 (rank 1): CUDA error 999"
        );
    }

    #[test]
    fn an_operation_waiting_on_a_silent_member_names_it_long_before_its_deadline() {
        let (mut root, mut leaves) = star(3, 0);
        root.set_liveness(quick());
        let (_, mut silent) = leaves.remove(1);
        silent
            .tend(Instant::now() + Duration::from_secs(1))
            .unwrap();
        let mut live = leaves.remove(0).1;
        live.set_liveness(quick());
        let deadline = Instant::now() + Duration::from_secs(20);
        let member = std::thread::spawn(move || live.sum(1, &[1.0], deadline));
        let start = Instant::now();
        let e = root.sum(1, &[1.0], deadline).unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        assert!(
            matches!(&e, PlaneError::Lost(m) if m.starts_with("node h2 (process rank 2) stopped")),
            "{e:?}"
        );
        // The member that did answer waited beaten, then got the coordinator's word.
        let em = member.join().unwrap().unwrap_err();
        assert!(em.to_string().contains("node h2"), "{em}");
        drop(silent);
    }

    #[test]
    fn a_member_whose_own_work_failed_reads_the_word_the_coordinator_sent_before_it_exited() {
        let (mut root, mut leaves) = star(2, 0);
        let member = Team::new(
            1,
            leaves.remove(0).1,
            Instant::now() + Duration::from_secs(30),
        );
        // Nothing said: its own error stands, after the wait.
        let start = Instant::now();
        assert_eq!(member.lost_or_told(Duration::from_millis(150)), None);
        assert!(
            start.elapsed() >= Duration::from_millis(150),
            "{:?}",
            start.elapsed()
        );
        let why = "node h9 (process rank 9) stopped answering the control plane for 12.5 s";
        root.abort(why, Instant::now() + Duration::from_secs(1));
        drop(root); // the coordinator exits: NCCL's sockets close, the word is already sent
        assert_eq!(
            member.lost_or_told(Duration::from_millis(500)),
            Some(PlaneError::Aborted(format!(
                "another process gave up: {why}"
            )))
        );
        // A member whose own GPU failed first hears its own reason back: its error stands.
        let (mut root, mut leaves) = star(2, 0);
        let member = Team::new(
            1,
            leaves.remove(0).1,
            Instant::now() + Duration::from_secs(30),
        );
        member.fail("GPU 0 (rank 1): CUDA error 999 (an Xid of this node)");
        let e = root
            .tend(Instant::now() + Duration::from_secs(1))
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("process rank 1 (h1) gave up: GPU 0"),
            "{e}"
        );
        assert_eq!(member.lost_or_told(Duration::from_millis(300)), None);
        // The coordinator has no one above it to hear from.
        let (root, _leaves) = star(2, 0);
        let root = Team::new(1, root, Instant::now() + Duration::from_secs(30));
        assert_eq!(root.lost_or_told(Duration::from_millis(50)), None);
    }

    /// Seen on 8 emulated nodes (tests/gpu/fabric.sh link-down, 2 of 4 runs,
    /// bench-core/benchmarks/results/2026-12-03-h200x1-gpu-rows): the coordinator waited on a
    /// process that lived but was stuck in NCCL with the dead node. That process's beats kept
    /// every wait slice busy, so the coordinator beat nobody; everyone gave up on it, and the
    /// stuck process was named instead of the dead one, which the coordinator never looked at.
    #[test]
    fn waiting_on_a_live_but_stuck_member_the_coordinator_still_beats_and_names_the_dead_one() {
        let (mut root, mut leaves) = star(4, 0);
        root.set_liveness(quick());
        let (_, mut dead) = leaves.remove(2);
        dead.tend(Instant::now() + Duration::from_secs(1)).unwrap();
        root.tend(Instant::now() + Duration::from_secs(1)).unwrap(); // everyone heard once
        let (_, mut stuck) = leaves.remove(1);
        let (_, mut answered) = leaves.remove(0);
        stuck.set_liveness(quick());
        answered.set_liveness(quick());
        let deadline = Instant::now() + Duration::from_secs(20);
        // Alive and chatty (its watch beats), but its GPU thread never reaches the operation.
        let stuck = std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(5));
            if let Err(e) = stuck.tend(deadline) {
                return e;
            }
        });
        let answered = std::thread::spawn(move || answered.sum(1, &[1.0], deadline));
        let start = Instant::now();
        let e = root.sum(1, &[1.0], deadline).unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        assert!(
            matches!(&e, PlaneError::Lost(m) if m.starts_with("node h3 (process rank 3) stopped")),
            "{e:?}"
        );
        for (who, e) in [
            ("answered", answered.join().unwrap().unwrap_err()),
            ("stuck", stuck.join().unwrap()),
        ] {
            let e = e.to_string();
            assert!(
                e.starts_with("another process gave up: node h3 "),
                "{who}: {e}"
            );
        }
        drop(dead);
    }
}
