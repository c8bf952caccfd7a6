//! Memory-pool backend (skeleton: the helper implementing `dev` fills this in).
