//! [`Path`]: where in a JSON envelope an error is, built on the stack and only formatted
//! when an error is reported.

use std::fmt;

/// A location such as `payload.items[2].name`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Path<'a> {
    /// `schema`, `payload` or `default`.
    Root(&'static str),
    /// A member of an object.
    Member(&'a Path<'a>, &'a str),
    /// An element of an array.
    Index(&'a Path<'a>, usize),
}

impl<'a> Path<'a> {
    /// The member `name` below this path.
    pub(crate) fn member(&'a self, name: &'a str) -> Path<'a> {
        Path::Member(self, name)
    }

    /// The element `index` below this path.
    pub(crate) fn index(&'a self, index: usize) -> Path<'a> {
        Path::Index(self, index)
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Depth is bounded by the JSON nesting limit (MAX_DEPTH).
        match self {
            Self::Root(name) => f.write_str(name),
            Self::Member(parent, name) => write!(f, "{parent}.{name}"),
            Self::Index(parent, index) => write!(f, "{parent}[{index}]"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_members_and_indexes() {
        let root = Path::Root("payload");
        let items = root.member("items");
        let second = items.index(2);
        assert_eq!(second.member("name").to_string(), "payload.items[2].name");
    }
}
