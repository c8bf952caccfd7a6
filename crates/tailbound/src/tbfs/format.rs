//! On-storage format (skeleton).
