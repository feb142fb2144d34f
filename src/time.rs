//! Time arithmetic that never panics: durations from users and brokers can be anything.

use tokio::time::Instant;

/// How far a deadline may lie: about a century, far beyond any run.
const FAR: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 24 * 3600);

/// `now + after`, saturating at about a century from `now` instead of panicking on overflow.
pub(crate) fn deadline_after(now: Instant, after: std::time::Duration) -> Instant {
    now.checked_add(after.min(FAR))
        .unwrap_or_else(|| now + std::time::Duration::from_secs(3600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_duration_saturates() {
        let now = Instant::now();
        assert!(deadline_after(now, std::time::Duration::MAX) > now);
        assert_eq!(
            deadline_after(now, std::time::Duration::from_millis(5)),
            now + std::time::Duration::from_millis(5)
        );
    }
}
