//! A case's row and the targets it is held to, apart from the runs that make it.

use serde::Serialize;

/// The targets.
pub const RATIO_ERROR_MAX: f64 = 0.03;
pub const TOTAL_VS_FIFO_MIN: f64 = 0.98;

/// Shares as the paper prints a ratio: scaled so the last tenant's share equals its weight
/// (`1.93:1` for 2:1).
pub fn ratio_string(weights: &[u32], shares: &[f64]) -> String {
    let (Some(&w_last), Some(&s_last)) = (weights.last(), shares.last()) else {
        return String::new();
    };
    if s_last <= 0.0 {
        return "-".into();
    }
    shares
        .iter()
        .map(|s| {
            let v = s / s_last * f64::from(w_last);
            if (v - v.round()).abs() < 0.005 {
                format!("{v:.0}")
            } else {
                format!("{v:.2}")
            }
        })
        .collect::<Vec<_>>()
        .join(":")
}

/// One case: a system, a weight set, an operation and a block size.
#[derive(Debug, Clone, Serialize)]
pub struct FairnessRow {
    pub system: &'static str,
    pub weights: Vec<u32>,
    pub op: &'static str,
    pub block_mb: u64,
    /// This case's measurement window ([`window_for`](super::window_for)).
    pub window_s: f64,
    pub shares_mb_per_s: Vec<f64>,
    pub ratio_error: f64,
    pub total_mb_per_s: f64,
    /// tbfs cases: each writer's counts over the case ([`super::WriterCounts`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub writers: Vec<super::WriterCounts>,
    /// The shares counted other ways ([`super::Accounting`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accounting: Option<super::Accounting>,
    /// tbfs cases: the pool's waits for the device under `meta` over the case (warm-up and
    /// window), every thread's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_waits: Option<crate::experiments::priority::phases::PoolWaits>,
}
