//! Repeated sets of one measurement, keeping the worst, as the papers report.

use std::io;

/// Every set's result and which one was worst.
#[derive(Debug, Clone)]
pub struct SetsResult<T> {
    pub sets: Vec<T>,
    /// Index in `sets` of the set with the largest key.
    pub worst: usize,
}

impl<T> SetsResult<T> {
    pub fn worst(&self) -> &T {
        &self.sets[self.worst]
    }

    pub fn into_worst(mut self) -> T {
        self.sets.swap_remove(self.worst)
    }
}

/// Runs `f(set)` for `set` in `0..sets` (at least one) and picks the set whose `key` is largest
/// (e.g. its maximum latency); the first such set wins a tie.
pub fn run_sets<T>(
    sets: u32,
    mut f: impl FnMut(u32) -> io::Result<T>,
    key: impl Fn(&T) -> f64,
) -> io::Result<SetsResult<T>> {
    let mut results = Vec::new();
    let mut worst = 0;
    for set in 0..sets.max(1) {
        let result = f(set)?;
        if !results.is_empty() && key(&result) > key(&results[worst]) {
            worst = results.len();
        }
        results.push(result);
    }
    Ok(SetsResult {
        sets: results,
        worst,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_set_is_the_one_with_the_largest_key() {
        let maxima = [3.0, 9.0, 4.0, 9.0, 1.0];
        let r = run_sets(5, |s| Ok(maxima[s as usize]), |m| *m).unwrap();
        assert_eq!(r.sets.len(), 5);
        assert_eq!(r.worst, 1);
        assert_eq!(*r.worst(), 9.0);
        assert_eq!(r.into_worst(), 9.0);
    }

    #[test]
    fn zero_sets_runs_one_and_errors_stop() {
        let r = run_sets(0, |_| Ok(1.0), |m| *m).unwrap();
        assert_eq!(r.sets.len(), 1);
        let err = run_sets(
            3,
            |s| {
                if s == 1 {
                    Err(io::Error::other("boom"))
                } else {
                    Ok(0.0)
                }
            },
            |m| *m,
        );
        assert!(err.is_err());
    }
}
