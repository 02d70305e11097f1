//! Conditional allreduce: the seed's semantics on threads split into sites (the SOR
//! application that must converge alike with either allreduce is tested in vargr-bench).

mod common;

use std::sync::{Arc, Mutex};

use common::run_ranks;
use vargr_coll::{CollError, CondOp, Hierarchy, Predicate};

/// `p` ranks in `sites` contiguous sites, one host per site.
fn sites(p: usize, sites: usize) -> Hierarchy {
    let site: Vec<u32> = (0..p).map(|r| (r * sites / p) as u32).collect();
    Hierarchy::new(site.clone(), site).unwrap()
}

#[test]
fn a_site_that_settles_the_test_alone_does_not_wait() {
    // Site 0 (ranks 0-2) contributes 10 each: its sum 30 >= 25 settles the test locally.
    // Sites 1 and 2 contribute 1 each: they need remote values (or the sequence rule).
    let out = Arc::new(Mutex::new(Vec::new()));
    let o = out.clone();
    run_ranks(9, Some(sites(9, 3)), move |c| {
        let mut cond = c
            .conditional(CondOp::Sum, Predicate::GreaterEq, 25.0)
            .unwrap();
        let v = if c.rank() < 3 { 10.0 } else { 1.0 };
        let mut results = Vec::new();
        for _ in 0..50 {
            results.push(cond.cond_allreduce(v).unwrap());
        }
        cond.close().unwrap();
        o.lock().unwrap().push((c.rank(), results));
    });
    for (rank, results) in out.lock().unwrap().iter() {
        for r in results {
            assert!(r.holds, "rank {rank}: {r:?}");
            if *rank < 3 {
                assert!(r.local && r.value == 30.0, "rank {rank}: {r:?}");
            } else {
                assert!(!r.local, "rank {rank}: {r:?}");
            }
        }
    }
}

#[test]
fn a_false_outcome_uses_every_site_and_agrees_everywhere() {
    // Sum is 9 < 100: never settled early; every rank must see the same global value.
    let out = Arc::new(Mutex::new(Vec::new()));
    let o = out.clone();
    run_ranks(9, Some(sites(9, 3)), move |c| {
        let mut cond = c
            .conditional(CondOp::Sum, Predicate::Greater, 1000.0)
            .unwrap();
        let mut seen = Vec::new();
        for i in 0..20 {
            // Vary by iteration so a stale tuple would give a wrong value.
            let r = cond.cond_allreduce(1.0 + i as f64).unwrap();
            seen.push((r.holds, r.value, r.remote_used));
        }
        o.lock().unwrap().push(seen);
    });
    let all = out.lock().unwrap();
    for seen in all.iter() {
        for (i, (holds, value, used)) in seen.iter().enumerate() {
            assert!(!holds);
            assert_eq!(*value, 9.0 * (1.0 + i as f64));
            assert_eq!(*used, 2);
        }
    }
}

#[test]
fn mixed_signs_and_undecidable_setups_are_refused() {
    let errs = Arc::new(Mutex::new(Vec::new()));
    let e = errs.clone();
    run_ranks(4, Some(sites(4, 2)), move |c| {
        assert!(matches!(
            c.conditional(CondOp::Max, Predicate::Less, 1.0),
            Err(CollError::CondPrecondition { .. })
        ));
        let mut cond = c.conditional(CondOp::Sum, Predicate::Greater, 5.0).unwrap();
        // Rank 1 (site 0) contributes a negative value: partial sums stop bounding the
        // total, so the call must fail rather than answer.
        let v = if c.rank() == 1 { -1.0 } else { 1.0 };
        let r = cond.cond_allreduce(v);
        e.lock()
            .unwrap()
            .push((c.rank(), r.map_err(|e| e.to_string())));
    });
    let errs = errs.lock().unwrap();
    for (rank, r) in errs.iter() {
        let msg = r.as_ref().expect_err("every rank fails");
        assert!(
            msg.contains("wrong sign") || msg.contains("site 0 failed"),
            "rank {rank}: {msg}"
        );
    }
}
