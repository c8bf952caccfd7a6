//! A full pool's refusals. Once cleaning has found no room for a call, a later call that needs
//! as much is refused without cleaning again while no block has left the live tree or a pin
//! since: with no more blocks to reclaim, cleaning again would only copy the same live blocks
//! and write the same checkpoints, for the same answer.

/// The last call refused after cleaning, while nothing has been freed since.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    last: Option<Refused>,
}

#[derive(Debug, Clone, Copy)]
struct Refused {
    /// Blocks the refused call needed.
    need: u64,
    /// Blocks live or pinned when it was refused.
    used: u64,
}

impl Refusals {
    /// Cleaning left no room for a call needing `need` blocks, with `used` blocks live or
    /// pinned.
    pub(crate) fn refused(&mut self, need: u64, used: u64) {
        self.last = Some(Refused { need, used });
    }

    /// Whether cleaning for `need` blocks is known to end as the last refusal did: it needs
    /// as much, and no fewer blocks are in use (`used`, counted only while a refusal stands).
    /// Once blocks were freed the refusal is forgotten.
    pub(crate) fn futile(&mut self, need: u64, used: impl FnOnce() -> u64) -> bool {
        let Some(r) = self.last else {
            return false;
        };
        if used() < r.used {
            self.last = None;
            return false;
        }
        need >= r.need
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_stands_until_blocks_are_freed_or_less_is_asked() {
        let mut r = Refusals::default();
        assert!(!r.futile(10, || 1000));
        r.refused(10, 1000);
        assert!(r.futile(10, || 1000));
        assert!(r.futile(11, || 1001));
        assert!(!r.futile(9, || 1000), "a smaller call may fit");
        assert!(!r.futile(10, || 999), "a block was freed");
        assert!(!r.futile(10, || 1000), "forgotten once a block was freed");
    }
}
