//! Progress bars for long runs: drawn on stderr when it is a terminal and `CI` is unset, silent
//! otherwise. Cheap to advance per operation (indicatif rate-limits its drawing).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A cloneable handle to one progress bar.
#[derive(Debug, Clone)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `len` steps labelled `label`.
    pub fn new(len: u64, label: &str) -> Progress {
        let visible = std::io::stderr().is_terminal() && std::env::var_os("CI").is_none();
        let bar = if visible {
            ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr())
        } else {
            ProgressBar::hidden()
        };
        bar.set_length(len);
        if let Ok(style) =
            ProgressStyle::with_template("{prefix:>32} [{bar:30}] {pos}/{len} {msg} (ETA {eta})")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(label.to_string());
        Progress { bar }
    }

    /// A bar that is never drawn, for runs whose output must stay clean; it still counts.
    pub fn hidden(len: u64) -> Progress {
        let bar = ProgressBar::hidden();
        bar.set_length(len);
        Progress { bar }
    }

    /// Advances by `n` steps; cheap enough to call once per operation.
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    /// Changes the number of steps, for work whose size is learned as it goes.
    pub fn set_length(&self, len: u64) {
        self.bar.set_length(len);
    }

    /// Moves to step `pos`.
    pub fn set_position(&self, pos: u64) {
        self.bar.set_position(pos);
    }

    pub fn set_message(&self, message: impl Into<String>) {
        self.bar.set_message(message.into());
    }

    pub fn position(&self) -> u64 {
        self.bar.position()
    }

    /// Removes the bar from the terminal.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_steps_whether_drawn_or_not() {
        let p = Progress::new(10, "test");
        let q = p.clone();
        p.inc(3);
        q.inc(2);
        p.set_message("halfway");
        assert_eq!(p.position(), 5);
        p.finish();
        let h = Progress::hidden(4);
        h.inc(4);
        assert_eq!(h.position(), 4);
    }
}
