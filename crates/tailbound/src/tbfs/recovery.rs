//! Recovery (skeleton).
