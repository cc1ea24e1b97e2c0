//! "Did you mean …?": the known name nearest to one given, for messages about typos.

/// Levenshtein distance, in characters.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The name of `known` nearest to `given`, if it is at most `max` edits away.
pub(crate) fn closest<'a>(
    given: &str,
    known: impl IntoIterator<Item = &'a str>,
    max: usize,
) -> Option<&'a str> {
    known
        .into_iter()
        .map(|k| (edit_distance(given, k), k))
        .min()
        .filter(|(d, _)| *d <= max)
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_within_reach() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        let known = ["floating-network-id", "subnet-id"];
        assert_eq!(
            closest("floating-netwrok-id", known, 3),
            Some("floating-network-id")
        );
        assert_eq!(closest("hunter2", known, 3), None);
    }
}
