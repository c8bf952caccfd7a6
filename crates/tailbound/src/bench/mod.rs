//! The experiment framework and experiments.
