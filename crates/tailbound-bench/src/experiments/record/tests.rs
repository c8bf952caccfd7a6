use super::*;

#[test]
fn catalogue_has_the_papers_columns_and_every_load() {
    let cases = catalogue();
    let names: Vec<String> = paper_cases().iter().map(|c| c.name.clone()).collect();
    assert_eq!(names.len(), 12);
    assert_eq!(names[0], "NONE");
    assert_eq!(names[11], "WPRE-SDATA-FON-BGALL");
    assert_eq!(cases.len(), 12 + 5 + LoadKind::ALL.len() * 6);
    for load in LoadKind::ALL {
        assert!(cases.iter().any(|c| c.name == "NONE" && c.load == load));
        assert!(cases
            .iter()
            .any(|c| c.name == TAILBOUND_DECOUPLED && c.load == load));
    }
    let mut ids: Vec<String> = cases.iter().map(RecordCase::id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), cases.len(), "case ids are unique");
}

#[test]
fn paper_designs_match_the_paper() {
    let all = paper_cases().into_iter().find(|c| c.name == "ALL").unwrap();
    assert_eq!(all.design.allocation, Allocation::Fallocate);
    assert_eq!(all.design.flush, FlushMode::SyncFileRange);
    assert_eq!(all.design.flusher, Flusher::Off);
    let none = &paper_cases()[0];
    assert_eq!(none.design, Design::conventional());
    assert!(!none.design.needs_root());
    assert!(all.design.needs_root());
}

#[test]
fn selectors_pick_by_name_or_id_and_reject_unknown() {
    let by_name = select_cases(&["tailbound".into()]).unwrap();
    assert_eq!(by_name.len(), LoadKind::ALL.len());
    let by_id = select_cases(&["NONE@buffered-writer".into(), "ALL".into()]).unwrap();
    assert_eq!(by_id.len(), 2);
    assert!(matches!(
        select_cases(&["NOPE".into()]),
        Err(RecordBenchError::UnknownCase(_))
    ));
}

fn row(name: &str, design: &str, load: &str, max_us: f64, misses: u64) -> CaseResult {
    CaseResult {
        name: name.into(),
        design: design.into(),
        load: load.into(),
        sets: 1,
        writes: 10,
        latency: LatencySummary {
            count: 10,
            min_us: 1.0,
            mean_us: 2.0,
            p50_us: 2.0,
            p99_us: 3.0,
            p999_us: 3.0,
            p9999_us: 3.0,
            max_us,
            deadline_misses: misses,
        },
        dropped: 0,
        worst_write: None,
        skipped: None,
        box_stats: None,
    }
}

#[test]
fn targets_are_the_issues_and_computed_from_the_rows() {
    let rows = vec![
        row("NONE", "c", "none", 170.0, 0),
        row("NONE", "c", "buffered-writer", 9000.0, 3),
        row(TAILBOUND, "t", "none", 110.0, 0),
        row(TAILBOUND, "t", "buffered-writer", 1500.0, 0),
        row(TAILBOUND_DECOUPLED, "t", "buffered-writer", 300.0, 0),
        row(
            TAILBOUND_DECOUPLED,
            PRODUCER_DESIGN,
            "buffered-writer",
            140.0,
            0,
        ),
        row(FLOOR, "f", "none", 17.0, 1),
        row(FLOOR, "f", "buffered-writer", 91.0, 0),
    ];
    let checks = check_targets(&rows);
    let names: Vec<&str> = checks.iter().map(|c| c.target.as_str()).collect();
    assert_eq!(
        names,
        [
            TARGET_HALF_OF_CONVENTIONAL,
            TARGET_NO_LOAD_CONVENTIONAL,
            TARGET_NO_LOAD_FLOOR,
            TARGET_PRODUCER_FLOOR,
            TARGET_NO_MISSES
        ]
    );
    // FLOOR's miss is the machine's, not a tailbound mode's.
    assert!(checks.iter().all(|c| c.met), "{checks:?}");
    // Each target fails on its own bound.
    let fail = |name: &str, producer: bool, load: &str, max_us: f64, misses: u64| {
        let mut rows = rows.clone();
        let r = rows
            .iter_mut()
            .find(|r| r.name == name && r.load == load && (r.design == PRODUCER_DESIGN) == producer)
            .unwrap();
        r.latency.max_us = max_us;
        r.latency.deadline_misses = misses;
        check_targets(&rows)
            .into_iter()
            .filter(|c| !c.met)
            .map(|c| c.target)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        fail(TAILBOUND, false, "buffered-writer", 4501.0, 0),
        [TARGET_HALF_OF_CONVENTIONAL]
    );
    assert_eq!(
        fail(TAILBOUND, false, "none", 171.0, 0),
        [TARGET_NO_LOAD_CONVENTIONAL, TARGET_NO_LOAD_FLOOR]
    );
    assert_eq!(
        fail(TAILBOUND, false, "none", 118.0, 0),
        [TARGET_NO_LOAD_FLOOR]
    );
    assert_eq!(
        fail(TAILBOUND_DECOUPLED, true, "buffered-writer", 142.0, 0),
        [TARGET_PRODUCER_FLOOR]
    );
    assert_eq!(
        fail(TAILBOUND_DECOUPLED, false, "buffered-writer", 300.0, 1),
        [TARGET_NO_MISSES]
    );
    // Without a FLOOR or a conventional row, those targets are not checked.
    let only = vec![row(TAILBOUND, "t", "none", 2000.0, 0)];
    let checks = check_targets(&only);
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0].target, TARGET_NO_MISSES);
}
