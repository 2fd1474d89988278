//! How printed rates read at any scale: a GPT-2-sized step of seconds printed `0 samples/s`,
//! and a bucket summed at megabytes a second `busbw 0.00 GB/s`.

/// `x` with three significant digits below 100 (`0.00447`, `4.47`, `44.7`), whole from 100 on
/// (`447`, as before for the rates that are that large).
pub(crate) fn three_digits(x: f64) -> String {
    if !x.is_finite() || x == 0.0 {
        return format!("{x:.0}");
    }
    let decimals = |v: f64| (2 - v.abs().log10().floor() as i64).max(0) as usize;
    let d = decimals(x);
    let rounded: f64 = format!("{x:.d$}").parse().unwrap_or(x);
    // Rounding up may reach the next power of ten (9.996 to 10.00): one decimal fewer then.
    let d = decimals(rounded).min(d);
    format!("{rounded:.d$}")
}

#[cfg(test)]
mod tests {
    use super::three_digits;

    #[test]
    fn small_rates_keep_three_digits_and_large_ones_read_whole() {
        let cases = [
            (0.004468, "0.00447"),
            (0.1, "0.100"),
            (4.467, "4.47"),
            (44.67, "44.7"),
            (446.7, "447"),
            // Rounded up to the next power of ten: still three digits.
            (99.96, "100"),
            (9.996, "10.0"),
            (0.9996, "1.00"),
        ];
        for (x, want) in cases {
            assert_eq!(three_digits(x), want, "{x}");
        }
        assert_eq!(three_digits(0.0), "0");
        assert_eq!(three_digits(12345.6), "12346");
    }
}
