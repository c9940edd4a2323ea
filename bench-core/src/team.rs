//! The GPU threads of one process acting together: barriers and sums across local threads and,
//! through the control plane, across processes. Every wait has the run's deadline, and the first
//! failure anywhere releases everyone at once.

use crate::rendezvous::ControlPlane;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

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
    pub fn sum(&self, values: &[f64]) -> Result<Vec<f64>, String> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = &st.failed {
            return Err(format!("stopped: {why}"));
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
                plane
                    .sum(gen, &local, self.deadline)
                    .map_err(|e| e.to_string())
            };
            match global {
                Ok(g) => st.result = g,
                Err(e) => {
                    self.failed.store(true, Ordering::Relaxed);
                    st.failed.get_or_insert(e.clone());
                    self.cv.notify_all();
                    return Err(e);
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
                return Err(msg);
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
                return Err(format!("stopped: {why}"));
            }
        }
    }

    pub fn barrier(&self) -> Result<(), String> {
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
        assert!(e.contains("GPU 1: CUDA error"), "{e}");
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
        assert!(e.contains("1 of 2 arrived"), "{e}");
    }
}
