//! See the parent module.
