//! Request bodies: one encoded buffer, or a list of chunks the request is made of as they are
//! (a Produce request's record batches, which are not copied into the request), and the
//! frame they make after the length and request header, as a [`Buf`] for one vectored write.

use std::io::IoSlice;

use bytes::{Buf, Bytes};

/// The body of a request frame.
#[derive(Debug)]
pub(crate) enum Body {
    /// One encoded buffer.
    One(Bytes),
    /// Chunks, in order, that together are the encoded body.
    Chunks(Vec<Bytes>),
}

impl Body {
    /// The body's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.parts()
            .iter()
            .fold(0usize, |sum, part| sum.saturating_add(part.len()))
    }

    fn parts(&self) -> &[Bytes] {
        match self {
            Body::One(bytes) => std::slice::from_ref(bytes),
            Body::Chunks(chunks) => chunks,
        }
    }
}

impl From<Bytes> for Body {
    fn from(bytes: Bytes) -> Self {
        Body::One(bytes)
    }
}

/// A frame's bytes, head first, as a [`Buf`] whose [`chunks_vectored`](Buf::chunks_vectored)
/// gives every part: a writer that supports vectored writes gets the whole frame in one call.
#[derive(Debug)]
pub(crate) struct FrameBuf {
    /// The parts not yet written, the first one possibly in part (`Bytes::advance`).
    parts: Vec<Bytes>,
    /// Index of the first part with bytes left.
    at: usize,
    /// Bytes left in all parts.
    remaining: usize,
}

impl FrameBuf {
    /// The frame of `head` (length prefix and request header) and `body`.
    pub(crate) fn new(head: Bytes, body: Body) -> Self {
        let mut parts = Vec::with_capacity(1 + body.parts().len());
        parts.push(head);
        match body {
            Body::One(bytes) => parts.push(bytes),
            Body::Chunks(chunks) => parts.extend(chunks),
        }
        parts.retain(|part| !part.is_empty());
        let remaining = parts
            .iter()
            .fold(0usize, |sum, part| sum.saturating_add(part.len()));
        Self {
            parts,
            at: 0,
            remaining,
        }
    }
}

impl Buf for FrameBuf {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.parts.get(self.at).map_or(&[], |part| part)
    }

    fn advance(&mut self, mut cnt: usize) {
        // More than what is left is taken as all of it.
        while cnt > 0 {
            let Some(part) = self.parts.get_mut(self.at) else {
                break;
            };
            let step = cnt.min(part.len());
            part.advance(step);
            cnt -= step;
            self.remaining -= step;
            if part.is_empty() {
                self.at += 1;
            }
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let parts = self.parts.get(self.at..).unwrap_or_default();
        let mut n = 0;
        for (slot, part) in dst.iter_mut().zip(parts) {
            *slot = IoSlice::new(part);
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn frame(head: &[u8], chunks: &[Vec<u8>]) -> FrameBuf {
        FrameBuf::new(
            Bytes::copy_from_slice(head),
            Body::Chunks(chunks.iter().cloned().map(Bytes::from).collect()),
        )
    }

    proptest! {
        /// Read in steps of any size, by chunk or by vectored chunks, the frame gives the head
        /// and then the body's chunks, each byte once, and counts what is left.
        #[test]
        fn gives_head_then_chunks_in_any_steps(
            head in proptest::collection::vec(any::<u8>(), 0..8),
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..20), 0..6),
            steps in proptest::collection::vec((1usize..30, any::<bool>()), 1..40),
        ) {
            let expected: Vec<u8> = head.iter().copied().chain(chunks.iter().flatten().copied()).collect();
            let mut buf = frame(&head, &chunks);
            prop_assert_eq!(buf.remaining(), expected.len());
            let mut read = Vec::new();
            for (step, vectored) in steps.iter().copied().cycle().take(200) {
                if !buf.has_remaining() {
                    break;
                }
                // Like a writer: it takes up to `step` bytes of what it is offered.
                let offered: Vec<u8> = if vectored {
                    let mut slices = [IoSlice::new(&[]); 3];
                    let n = buf.chunks_vectored(&mut slices);
                    prop_assert!(n > 0);
                    slices[..n].iter().flat_map(|s| s.iter().copied()).collect()
                } else {
                    buf.chunk().to_vec()
                };
                prop_assert!(!offered.is_empty());
                let taken = step.min(offered.len());
                read.extend_from_slice(&offered[..taken]);
                buf.advance(taken);
                prop_assert_eq!(buf.remaining(), expected.len() - read.len());
            }
            prop_assert_eq!(read, expected);
        }
    }

    #[test]
    fn a_body_is_as_long_as_its_chunks() {
        let body = Body::Chunks(vec![
            Bytes::from_static(b"abc"),
            Bytes::new(),
            Bytes::from_static(b"de"),
        ]);
        assert_eq!(body.len(), 5);
        assert_eq!(Body::from(Bytes::from_static(b"xyz")).len(), 3);
    }

    #[test]
    fn advancing_past_the_end_takes_what_is_left() {
        let mut buf = frame(b"h", &[b"body".to_vec()]);
        buf.advance(100);
        assert_eq!(buf.remaining(), 0);
        assert!(buf.chunk().is_empty());
        let mut slices = [IoSlice::new(&[]); 2];
        assert_eq!(buf.chunks_vectored(&mut slices), 0);
    }
}
