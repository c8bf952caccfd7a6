//! Light victims chosen by what they give back, when free space is below the reserve.
//!
//! A light pass's copies may use as much of the reserve as their victims give back once the
//! copies are durable (`Cleaning::gain`, checked by `Engine::ensure_space`). Victims chosen
//! only from what is free beyond the reserve leave a pool whose free space fell below it (a
//! checkpoint of deletes may use the reserve, and so may the cleaner's own) with no light pass
//! at all, though mostly dead segments would repay the room their copies borrow: every later
//! checkpoint then answers `NoSpace` however much of the pool is dead.

use crate::tbfs::limits::MIN_RECLAIMABLE;
use crate::tbfs::state::{Engine, State};

impl Engine {
    /// The most of `candidates` (light ones), emptiest first, whose copies the space check of
    /// `move_live` admits with the reserve their victims give back: at most `most`, none if no
    /// number of them fits. Emptiest first: here what counts is the room a pass gives back.
    pub(super) fn light_victims_repaying_reserve(
        &self,
        m: &State,
        candidates: &[usize],
        most: usize,
    ) -> Vec<usize> {
        let sb = self.segment_blocks();
        let mut ranked: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&s| 1.0 - m.seg.live(s) as f64 / sb as f64 >= MIN_RECLAIMABLE)
            .collect();
        ranked.sort_by_key(|&s| m.seg.live(s));
        let free = self.free_blocks(m);
        let (reserve, _) = self.space_margins(m);
        let mut live = 0u64;
        let mut fits = 0;
        for (n, &s) in ranked.iter().take(most).enumerate() {
            live += u64::from(m.seg.live(s));
            // As `move_live` asks: the copies and their summaries, less the victims' room
            // beyond them off the reserve.
            let copies = live + live / 64 + 2;
            let gain = ((n as u64 + 1) * sb).saturating_sub(copies);
            if self.space_needed(copies) + reserve.saturating_sub(gain) <= free {
                fits = n + 1;
            }
        }
        ranked.truncate(fits);
        ranked
    }
}
