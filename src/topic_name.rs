//! Kafka's rules for topic names, checked before a name reaches a broker.

/// Why `name` is not a valid Kafka topic name, or `None` when it is one: 1 to 249 characters
/// of ASCII letters, digits, `.`, `_` and `-`, and neither `.` nor `..` (Kafka's
/// `Topic.validate`).
pub(crate) fn topic_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.len() > 249 {
        Some("a topic name has 1 to 249 characters")
    } else if name == "." || name == ".." {
        Some("a topic name cannot be `.` or `..`")
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        Some("a topic name uses only ASCII letters, digits, '.', '_' and '-'")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_names_pass_and_others_say_why_not() {
        for ok in ["orders", "a.b_c-D9", &"x".repeat(249)] {
            assert_eq!(topic_name_problem(ok), None, "{ok}");
        }
        for (bad, why) in [
            ("", "1 to 249"),
            (&"x".repeat(250) as &str, "1 to 249"),
            (".", "`.` or `..`"),
            ("..", "`.` or `..`"),
            ("topic abc", "ASCII letters"),
            ("tôpic", "ASCII letters"),
            ("a/b", "ASCII letters"),
        ] {
            assert!(
                topic_name_problem(bad).is_some_and(|p| p.contains(why)),
                "{bad:?}"
            );
        }
    }
}
