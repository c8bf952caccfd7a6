//! The real-time recorder (seed 000). Filled in by the recorder work.
