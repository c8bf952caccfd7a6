//! `tailbound doctor`: file system and writeback facts with advice.
