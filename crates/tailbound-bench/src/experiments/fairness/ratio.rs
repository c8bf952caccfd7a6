//! The measure every case is judged by.

/// The largest relative deviation of any share from its weight's share; NaN when nothing moved.
pub fn ratio_error(weights: &[u32], shares: &[f64]) -> f64 {
    let w_total: f64 = weights.iter().map(|&w| f64::from(w)).sum();
    let s_total: f64 = shares.iter().sum();
    if w_total <= 0.0 || s_total <= 0.0 || weights.len() != shares.len() {
        return f64::NAN;
    }
    weights
        .iter()
        .zip(shares)
        .map(|(&w, &s)| {
            let expected = f64::from(w) / w_total;
            (s / s_total - expected).abs() / expected
        })
        .fold(0.0, f64::max)
}
