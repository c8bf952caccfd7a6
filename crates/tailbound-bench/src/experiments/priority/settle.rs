//! Each case starts on a settled loop file system: what the case before it left dirty (a
//! buffered copy's gigabytes in the page cache, the journal commits of its deletes) is written
//! back first, so a case does not meet the previous case's writeback in the loop device's queue.
//! Without it, the tbfs cases, which follow the kernel cases' buffered copies, had single
//! 4 KiB writes held seconds in the device behind that writeback.

use super::PriorityRow;

/// Runs `settle` (a `syncfs` of the loop file system), then the case `run`; an error of either
/// is the case's.
pub(super) fn settled_case(
    settle: &mut dyn FnMut() -> std::io::Result<()>,
    run: &dyn Fn() -> Result<PriorityRow, String>,
) -> Result<PriorityRow, String> {
    settle().map_err(|e| format!("syncing the loop file system before the case: {e}"))?;
    run()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn row() -> PriorityRow {
        PriorityRow::from_histogram(
            "tbfs",
            "default".into(),
            super::super::Rate::FlatOut,
            &crate::stats::LatencyHistogram::new(),
            0.0,
            0.0,
        )
    }

    #[test]
    fn every_case_runs_after_the_file_system_is_settled_and_a_failed_settle_fails_it() {
        let order = RefCell::new(Vec::new());
        let mut settle = || {
            order.borrow_mut().push("settle");
            Ok(())
        };
        for _ in 0..2 {
            let r = settled_case(&mut settle, &|| {
                order.borrow_mut().push("case");
                Ok(row())
            });
            assert!(r.is_ok());
        }
        assert_eq!(*order.borrow(), ["settle", "case", "settle", "case"]);
        let mut failing = || Err(std::io::Error::other("no"));
        let ran = RefCell::new(false);
        let r = settled_case(&mut failing, &|| {
            *ran.borrow_mut() = true;
            Ok(row())
        });
        assert!(r.unwrap_err().contains("syncing the loop file system"));
        assert!(!*ran.borrow());
    }
}
