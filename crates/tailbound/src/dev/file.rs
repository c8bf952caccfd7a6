//! File or block-device backend (skeleton: the helper implementing `dev` fills this in).
