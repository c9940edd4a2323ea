//! The GPU threads of one process acting together: barriers and sums across local threads and,
//! through the control plane, across processes. Every wait has the run's deadline, and the first
//! failure anywhere releases everyone at once.

use crate::rendezvous::{ControlPlane, PlaneError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

/// Why a team operation failed; the kind decides the exit code, the text says where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TeamError {
    /// The team had failed already (another thread or process first): this thread stops.
    Stopped(String),
    /// The other local GPU threads did not all arrive before the deadline.
    LocalDeadline(String),
    /// The sum over the processes failed.
    Plane(PlaneError),
}

impl std::fmt::Display for TeamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TeamError::Stopped(why) => write!(f, "stopped: {why}"),
            TeamError::LocalDeadline(m) => f.write_str(m),
            TeamError::Plane(e) => write!(f, "{e}"),
        }
    }
}

pub struct Team {
    n_local: usize,
    deadline: Instant,
    state: Mutex<State>,
    cv: Condvar,
    plane: Mutex<ControlPlane>,
    failed: AtomicBool,
}

struct State {
    generation: u64,
    arrived: usize,
    sums: Vec<f64>,
    result: Vec<f64>,
    failed: Option<String>,
}

impl Team {
    pub fn new(n_local: usize, plane: ControlPlane, deadline: Instant) -> Team {
        Team {
            n_local,
            deadline,
            state: Mutex::new(State {
                generation: 0,
                arrived: 0,
                sums: Vec::new(),
                result: Vec::new(),
                failed: None,
            }),
            cv: Condvar::new(),
            plane: Mutex::new(plane),
            failed: AtomicBool::new(false),
        }
    }

    /// Marks the team failed (first reason wins) and tells the other processes.
    pub fn fail(&self, why: &str) {
        self.failed.store(true, Ordering::Relaxed);
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.failed.is_none() {
            st.failed = Some(why.to_string());
            if let Ok(mut plane) = self.plane.try_lock() {
                plane.abort(why, self.deadline);
            }
        }
        self.cv.notify_all();
    }

    /// Cheap check for wait loops.
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// Element-wise sum of `values` over every rank of the job; also the barrier (empty values).
    pub fn sum(&self, values: &[f64]) -> Result<Vec<f64>, TeamError> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = &st.failed {
            return Err(TeamError::Stopped(why.clone()));
        }
        if st.sums.len() < values.len() {
            st.sums.resize(values.len(), 0.0);
        }
        st.sums.iter_mut().zip(values).for_each(|(s, v)| *s += v);
        st.arrived += 1;
        let gen = st.generation;
        if st.arrived == self.n_local {
            let local = std::mem::take(&mut st.sums);
            // The last local thread to arrive talks to the other processes for everyone.
            let global = {
                let mut plane = self.plane.lock().unwrap_or_else(|p| p.into_inner());
                plane.sum(gen, &local, self.deadline)
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

    pub fn barrier(&self) -> Result<(), TeamError> {
        self.sum(&[]).map(|_| ())
    }
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
        assert!(start.elapsed() < Duration::from_secs(1));
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
