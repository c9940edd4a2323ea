use super::*;
use crate::localize::sim::{self, Fabric, Fault};
use crate::localize::{Code, LocalizeConfig};
use crate::meet::rendezvous::Member;
use crate::meet::topology::Topology;
use crate::model::floors::PairFloors;

/// `nodes` processes of `gpus` GPUs each (one process per node, as under `srun --nccl-check`).
fn layout(nodes: usize, gpus: usize) -> (Layout, Vec<u32>) {
    let members: Vec<Member> = (0..nodes)
        .map(|i| Member {
            proc_rank: i as u32,
            host: format!("n{i}"),
            pid: 1,
            ngpus: gpus as u32,
            first_rank: (i * gpus) as u32,
        })
        .collect();
    let t = Topology::new(&members);
    let process_of = (0..nodes * gpus).map(|r| (r / gpus) as u32).collect();
    (Layout::new(&t), process_of)
}

fn config(fabric: &Fabric) -> LocalizeConfig {
    LocalizeConfig {
        floors: PairFloors {
            allocation: Some(0.85 * fabric.allocation_nominal),
            ..PairFloors::default()
        },
        ..LocalizeConfig::default()
    }
}

/// What a distributed localization costs and finds.
struct Run {
    summaries: Vec<LocalizeSummary>,
    /// Largest message one process sent or received in any round, in bytes (JSON).
    largest_message: usize,
    /// Most bytes any one round moved, all processes together.
    largest_round: usize,
    gathers: usize,
}

/// Runs `follow` for every process against one `Conductor`, as the control plane would: each
/// process's entries go up, the coordinator's one `decide` makes every process's next step.
fn distributed(fabric: &Fabric, nodes: usize, gpus: usize, coordinator: u32) -> Run {
    let (layout, process_of) = layout(nodes, gpus);
    let localizer = Localizer::new(nodes, gpus, config(fabric)).unwrap();
    let mut known_fabric = fabric.clone();
    let mut conductor = Conductor::new(
        localizer,
        layout.clone(),
        process_of,
        coordinator,
        "adaptive",
        config(fabric).floors.allocation,
        Box::new(move |r| known_fabric.measure(r)),
    );
    let mut fabric = fabric.clone();
    let (mut largest_message, mut largest_round, mut gathers) = (0, 0, 0);
    // Lock-step: every process's entries of this round, then one decision.
    let mut entries: Vec<Vec<(u64, f64)>> = vec![Vec::new(); nodes];
    let mut len = 0;
    loop {
        let mut sums = vec![0.0; len];
        let mut round_bytes = 0;
        for e in &entries {
            let bytes = serde_json::to_vec(e).unwrap().len();
            largest_message = largest_message.max(bytes);
            round_bytes += bytes;
            for &(i, v) in e {
                sums[i as usize] += v;
            }
        }
        let steps = conductor.decide(&sums).unwrap();
        gathers += 1;
        assert_eq!(steps.len(), nodes);
        for (p, s) in steps.iter().enumerate() {
            let bytes = serde_json::to_vec(s).unwrap().len();
            if p != coordinator as usize {
                largest_message = largest_message.max(bytes);
                round_bytes += bytes;
            }
        }
        largest_round = largest_round.max(round_bytes);
        if let ConductorStep::Done(_) = steps[0] {
            let summaries = steps
                .into_iter()
                .map(|s| match s {
                    ConductorStep::Done(s) => s,
                    other => panic!("{other:?}"),
                })
                .collect();
            return Run {
                summaries,
                largest_message,
                largest_round,
                gathers,
            };
        }
        for (p, step) in steps.iter().enumerate() {
            let mine: Vec<usize> = (p * gpus..(p + 1) * gpus).collect();
            step.check(&mine, nodes * gpus).unwrap();
            let ConductorStep::Round {
                groups,
                mine: places,
                ..
            } = step
            else {
                unreachable!()
            };
            len = *groups as usize;
            entries[p] = places
                .iter()
                .filter(|pl| pl.leads)
                .map(|pl| {
                    let g = group_of(&layout, pl).unwrap();
                    (pl.group as u64, fabric.measure_group(&g))
                })
                .collect();
        }
    }
}

fn quiet(nodes: usize, gpus: usize, fault: Option<Fault>) -> Fabric {
    let mut f = Fabric::healthy(nodes, gpus, 3);
    f.noise = 0.0;
    if let Some(fault) = fault {
        f.inject(fault);
    }
    f
}

/// The distributed path finds exactly what the localizer finds when it sees every result itself
/// (`sim::simulate`, the simulation table's path), on the same noiseless fabric.
#[test]
fn the_conducted_localization_finds_what_the_localizer_finds_alone() {
    let faults = [
        None,
        Some(Fault::NodeNet {
            node: 5,
            factor: 0.5,
        }),
        Some(Fault::Nic {
            node: 2,
            rail: 3,
            factor: 0.4,
        }),
        Some(Fault::Link {
            a: 6,
            b: 7,
            factor: 0.3,
        }),
    ];
    for fault in faults {
        let (n, g) = (16, 4);
        let fabric = quiet(n, g, fault);
        let (layout, _) = layout(n, g);
        let alone = {
            let l = Localizer::new(n, g, config(&fabric)).unwrap();
            sim::simulate(l.named(&layout.names), &mut fabric.clone()).unwrap()
        };
        let want = reasons::reasons(&alone);
        let run = distributed(&fabric, n, g, 0);
        for s in &run.summaries {
            assert_eq!(s.reasons, want, "{fault:?}");
            assert_eq!(s.rounds, alone.rounds);
            assert_eq!(s.localization_rounds, alone.localization_rounds);
        }
        if fault.is_none() {
            assert!(want.is_empty());
            // Phases A and B at the coordinator, then straight to the verdict: one gather.
            assert_eq!((run.gathers, alone.localization_rounds), (1, 0));
        } else {
            assert!(!want.is_empty(), "{fault:?}");
            assert_eq!(run.gathers, alone.localization_rounds + 1);
        }
    }
}

/// O(1) bytes per process and O(N) per round: the largest message stays the same from 64 to
/// 1,024 nodes, and a round's bytes grow no faster than the number of nodes.
#[test]
fn per_process_messages_stay_small_and_rounds_grow_linearly() {
    let slow = |n: usize| {
        Some(Fault::NodeNet {
            node: n / 3,
            factor: 0.5,
        })
    };
    let small = distributed(&quiet(64, 8, slow(64)), 64, 8, 0);
    let large = distributed(&quiet(1024, 8, slow(1024)), 1024, 8, 0);
    assert!(large.gathers > 1 && small.gathers > 1);
    assert!(
        large.largest_message <= small.largest_message + 64,
        "{} vs {} bytes",
        small.largest_message,
        large.largest_message
    );
    assert!(large.largest_message < 2048, "{}", large.largest_message);
    let per_node = |r: &Run, n: usize| r.largest_round as f64 / n as f64;
    assert!(
        per_node(&large, 1024) <= 1.1 * per_node(&small, 64),
        "{} vs {} bytes per node",
        per_node(&small, 64),
        per_node(&large, 1024)
    );
    for s in &large.summaries {
        assert_eq!(s.reasons.len(), 1, "{:?}", s.reasons);
        assert_eq!(s.reasons[0].subject_text().as_deref(), Some("n341"));
    }
}

#[test]
fn many_findings_are_shared_own_node_first_and_the_coordinator_keeps_them_all() {
    let (n, g) = (64, 2);
    let mut fabric = quiet(n, g, None);
    for node in (0..n).step_by(3).take(20) {
        fabric.inject(Fault::Nic {
            node,
            rail: 1,
            factor: 0.3,
        });
    }
    let run = distributed(&fabric, n, g, 7);
    let all = &run.summaries[7];
    assert_eq!((all.reasons.len(), all.reasons_omitted), (20, 0));
    assert!(all
        .reasons
        .iter()
        .all(|r| r.code == nccl_check_contract::report::reason::ReasonCode::RailSlow));
    let own = &run.summaries[57]; // n57 is the 20th slow node: last in the list
    assert_eq!(own.reasons.len(), MAX_SHARED_REASONS);
    assert_eq!(own.reasons_omitted, 20 - MAX_SHARED_REASONS);
    assert!(
        own.reasons[0].message.starts_with("n57 "),
        "{}",
        own.reasons[0].message
    );
    // Exactly one mention of n57 among the shared reasons (no n5 for n57 mix-up).
    let healthy = &run.summaries[1];
    assert!(
        healthy.reasons[0].message.starts_with("n0 "),
        "{}",
        healthy.reasons[0].message
    );
    let _ = Code::RailSlow;
}

#[test]
fn a_step_that_does_not_fit_the_process_is_refused() {
    let round = |mine: Vec<Place>| ConductorStep::Round {
        index: 3,
        phase: Phase::Screen,
        groups: 4,
        mine,
    };
    let place = |rank, group, peer| Place {
        rank,
        group,
        peer,
        leads: true,
    };
    let mine = [8, 9];
    assert!(round(vec![place(8, 0, 2), place(9, 3, 30)])
        .check(&mine, 32)
        .is_ok());
    for (bad, why) in [
        (vec![place(7, 0, 2)], "a place for rank 7"),
        (vec![place(8, 0, 2), place(8, 1, 3)], "a place for rank 8"),
        (vec![place(8, 4, 2)], "group 4 of 4"),
        (vec![place(8, 0, 32)], "peer 32 of 32"),
        (vec![place(8, 0, 8)], "peer 8 of 32"),
    ] {
        let e = round(bad).check(&mine, 32).unwrap_err();
        assert!(e.contains(why), "{e}");
    }
}

#[test]
fn results_without_a_round_and_a_finished_conductor_are_errors() {
    let fabric = quiet(4, 2, None);
    let (layout, process_of) = layout(4, 2);
    let mut known = fabric.clone();
    let mut c = Conductor::new(
        Localizer::new(4, 2, config(&fabric)).unwrap(),
        layout,
        process_of,
        0,
        "adaptive",
        None,
        Box::new(move |r| known.measure(r)),
    );
    assert_eq!(c.decide(&[1.0]).unwrap_err(), LocalizeError::NoRoundPending);
    // Healthy with a floor: straight to the verdict, then nothing more to decide.
    assert!(matches!(c.decide(&[]).unwrap()[0], ConductorStep::Done(_)));
    assert_eq!(c.decide(&[]).unwrap_err(), LocalizeError::NoRoundPending);
}

/// The follower's side: it hands in only what its ranks lead, and stops at the verdict.
#[test]
fn a_follower_sends_only_the_groups_it_leads() {
    let steps = vec![
        ConductorStep::Round {
            index: 2,
            phase: Phase::Screen,
            groups: 6,
            mine: vec![
                Place {
                    rank: 4,
                    group: 1,
                    peer: 0,
                    leads: true,
                },
                Place {
                    rank: 5,
                    group: 4,
                    peer: 1,
                    leads: false,
                },
            ],
        },
        ConductorStep::Done(LocalizeSummary {
            plan: "adaptive".into(),
            nodes: 3,
            rails: 2,
            rounds: 3,
            localization_rounds: 1,
            allocation_busbw: None,
            allocation_floor: None,
            pair_groups: 6,
            reasons: vec![],
            reasons_omitted: 0,
            round_times: Vec::new(),
            paths: None,
        }),
    ];
    let mut steps = steps.into_iter();
    let mut sent = Vec::new();
    let summary = follow::<()>(
        &[4, 5],
        6,
        |len, led| {
            sent.push((len, led.to_vec()));
            Ok(steps.next().unwrap())
        },
        |_, _, _, places| {
            std::thread::sleep(std::time::Duration::from_millis(30));
            Ok(places.iter().map(|p| 10.0 + p.rank as f64).collect())
        },
    )
    .unwrap();
    assert_eq!(summary.localization_rounds, 1);
    assert_eq!(sent, vec![(0, vec![]), (6, vec![(1, 14.0)])]);
    // The process's own time per round, for the model's calibration: one entry per round.
    let [t] = summary.round_times.as_slice() else {
        panic!("{:?}", summary.round_times)
    };
    assert_eq!((t.round, t.phase), (2, Phase::Screen));
    assert!(t.measure_ms >= 30.0 && t.gather_ms < 30.0, "{t:?}");
    // What the pair it led read, for a run whose rounds found nothing to be read afterwards.
    assert_eq!(t.readings, [(4, 0, 14.0)]);
}

/// The slot's conductor is made once, kept between rounds, and emptied at the verdict.
#[test]
fn a_slot_keeps_one_conductor_until_the_verdict() {
    let fabric = quiet(
        8,
        2,
        Some(Fault::NodeNet {
            node: 3,
            factor: 0.5,
        }),
    );
    let (layout, process_of) = layout(8, 2);
    let mut made = 0;
    let mut make = || {
        made += 1;
        let mut known = fabric.clone();
        Ok(Conductor::new(
            Localizer::new(8, 2, config(&fabric)).unwrap(),
            layout.clone(),
            process_of.clone(),
            0,
            "adaptive",
            None,
            Box::new(move |r: &Round| known.measure(r)),
        ))
    };
    let mut slot = None;
    let mut results = Vec::new();
    let mut rounds = 0;
    loop {
        let steps = decide_in(&mut slot, &mut make, &results).unwrap();
        match &steps[0] {
            ConductorStep::Done(s) => {
                assert_eq!(s.localization_rounds, rounds);
                break;
            }
            ConductorStep::Round { groups, .. } => {
                rounds += 1;
                results = vec![40.0; *groups as usize];
                assert!(slot.is_some());
            }
        }
    }
    assert!(rounds >= 1);
    assert_eq!(made, 1);
    assert!(slot.is_none(), "emptied at the verdict");
}

/// Every process with its own conductor, fed the round's summed vector: each caller is one
/// rank (a GPU thread), decides its own step, and hands in only what it leads. Returns every
/// process's summary (from its first rank's caller) and the steps each caller took; checks at
/// every round that each caller's step is the coordinator's step for its process, cut to its
/// rank, from a lone coordinator fed the same vectors.
fn replicated(
    fabric: &Fabric,
    nodes: usize,
    gpus: usize,
    coordinator: u32,
) -> Vec<LocalizeSummary> {
    let (layout, process_of) = layout(nodes, gpus);
    let make = |keeps: u32| {
        let mut known = fabric.clone();
        let (layout, process_of) = (layout.clone(), process_of.clone());
        move || {
            Ok(Conductor::new(
                Localizer::new(nodes, gpus, config(fabric)).unwrap(),
                layout,
                process_of,
                keeps,
                "adaptive",
                config(fabric).floors.allocation,
                Box::new(move |r: &Round| known.measure(r)),
            ))
        }
    };
    let nranks = nodes * gpus;
    let mut slots_of: Vec<Option<Conductor>> = (0..nranks).map(|_| None).collect();
    let mut lone = None;
    let mut fabric = fabric.clone();
    let mut entries: Vec<Vec<(u64, f64)>> = vec![Vec::new(); nranks];
    let mut len = 0;
    loop {
        // The all_reduce: every rank's vector, summed in an order unlike the ranks' own.
        let mut sums = vec![0.0; len];
        for e in entries.iter().rev() {
            for (t, v) in sums.iter_mut().zip(slots(len, e).unwrap()) {
                *t += v;
            }
        }
        let want = decide_in(&mut lone, make(coordinator), &sums).unwrap();
        let mut done = Vec::new();
        for rank in 0..nranks {
            let p = (rank / gpus) as u32;
            let keeps = keeper(p, p == coordinator);
            let step = decide_here(&mut slots_of[rank], make(keeps), &sums, p, &[rank]).unwrap();
            step.check(&[rank], nranks).unwrap();
            match (&step, &want[p as usize]) {
                (ConductorStep::Done(s), ConductorStep::Done(w)) => {
                    assert_eq!(s, w, "rank {rank}");
                    if rank % gpus == 0 {
                        done.push(s.clone());
                    }
                }
                (
                    ConductorStep::Round {
                        index,
                        groups,
                        mine,
                        ..
                    },
                    ConductorStep::Round {
                        index: wi,
                        groups: wg,
                        mine: wm,
                        ..
                    },
                ) => {
                    assert_eq!((index, groups), (wi, wg));
                    let theirs: Vec<_> = wm.iter().filter(|pl| pl.rank as usize == rank).collect();
                    assert_eq!(mine.iter().collect::<Vec<_>>(), theirs, "rank {rank}");
                    len = *groups as usize;
                    entries[rank] = mine
                        .iter()
                        .filter(|pl| pl.leads)
                        .map(|pl| {
                            let g = group_of(&layout, pl).unwrap();
                            (pl.group as u64, fabric.measure_group(&g))
                        })
                        .collect();
                }
                other => panic!("rank {rank}: {other:?}"),
            }
        }
        if !done.is_empty() {
            assert_eq!(done.len(), nodes);
            assert!(
                slots_of.iter().all(Option::is_none),
                "emptied at the verdict"
            );
            return done;
        }
    }
}

/// The rounds' records carried by an all_reduce, every process deciding for itself.
/// Each rank's own conductor, fed the same summed vectors, takes the step a lone coordinator
/// would have sent it and ends with the same summary as the coordinator's path: the full list
/// at the coordinator, the shared one elsewhere.
#[test]
fn conductors_fed_the_same_vectors_take_the_coordinators_steps_and_reach_its_summary() {
    let faults = [
        None,
        Some(Fault::NodeNet {
            node: 5,
            factor: 0.5,
        }),
        Some(Fault::Nic {
            node: 2,
            rail: 1,
            factor: 0.4,
        }),
        Some(Fault::Link {
            a: 6,
            b: 7,
            factor: 0.3,
        }),
    ];
    for fault in faults {
        // Noise on: the vectors carry real-looking, unround numbers.
        let mut fabric = Fabric::healthy(12, 2, 7);
        if let Some(f) = fault {
            fabric.inject(f);
        }
        let by_coordinator = distributed(&fabric, 12, 2, 3).summaries;
        let by_everyone = replicated(&fabric, 12, 2, 3);
        assert_eq!(by_everyone, by_coordinator, "{fault:?}");
        if fault.is_some() {
            assert!(!by_everyone[3].reasons.is_empty(), "{fault:?}");
        }
    }
}

#[test]
fn a_rounds_vector_has_each_led_result_in_its_slot_and_refuses_a_slot_outside_it() {
    assert_eq!(
        slots(4, &[(2, 7.5), (0, 1.25)]).unwrap(),
        vec![1.25, 0.0, 7.5, 0.0]
    );
    assert_eq!(slots(0, &[]).unwrap(), Vec::<f64>::new());
    let e = slots(4, &[(4, 1.0)]).unwrap_err();
    assert_eq!(e, "a result for group 4 of a round of 4");
}
