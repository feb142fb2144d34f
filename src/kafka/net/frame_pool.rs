//! Buffers for large response frames (and, with other limits, a producer's record batches),
//! reused once every slice of a frame is dropped.
//!
//! A ShareFetch answer is read into one buffer, and every record it brings is a slice of that
//! buffer, so the buffer lives until the application drops the last of those records. Left to
//! the allocator, buffers of a few MiB allocated and freed over and over cost far more resident
//! memory than they hold: glibc's malloc serves the first ones with `mmap` and returns them on
//! free, but raises its mmap threshold to the size of a freed block, so later buffers come from
//! its heaps, one per thread that allocates (any tokio worker), where freed buffers leave holes
//! that stay resident. Measured on the consumer benchmark, that was more resident memory than
//! the answers themselves (see benches/BENCHMARKS.md, "Peak RSS of the share consumer").
//!
//! So the reader of a connection takes the buffers of large frames from a [`FramePool`]:
//! a frame's buffer goes back to the pool when the frame's last slice is dropped, and the next
//! frame reuses it instead of allocating. The pool keeps at most [`IDLE_BUFFERS`] idle buffers,
//! each as large as some frame received on the connection, and is freed with the connection
//! once no frame of it is alive.
//!
//! A producer keeps a pool of its own, with other [`PoolLimits`], for the buffers it encodes
//! record batches into ([`take`](FramePool::take), [`freeze`](FramePool::freeze),
//! [`recycle`](FramePool::recycle)).

use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::{BufMut, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Frames shorter than this are allocated one by one (the allocator handles small blocks well).
pub(crate) const POOLED_FRAME_MIN: usize = 64 << 10;

/// Frames longer than this are allocated one by one too: glibc always maps blocks above its
/// largest mmap threshold (32 MiB on 64-bit targets) and unmaps them on free, so they leave no
/// holes, and an idle pool does not keep such large buffers.
pub(crate) const POOLED_FRAME_MAX: usize = 32 << 20;

/// The room a frame's buffer starts with when no idle buffer holds the whole frame; it
/// doubles as the bytes arrive (a frame's length is what the broker announced, not what it
/// sent).
pub(crate) const FIRST_ROOM: usize = 64 << 10;

/// The most idle buffers a pool keeps; more go back to the allocator.
pub(crate) const IDLE_BUFFERS: usize = 2;

/// Which buffers a pool takes back, and how many it keeps idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolLimits {
    /// Smallest capacity pooled; smaller buffers are allocated one by one.
    pub(crate) min: usize,
    /// Largest capacity pooled.
    pub(crate) max: usize,
    /// The most idle buffers kept.
    pub(crate) idle_buffers: usize,
    /// The most bytes (capacity) the idle buffers may hold together.
    pub(crate) idle_bytes: usize,
}

/// The limits of a connection's pool of response frames.
pub(crate) const FRAME_LIMITS: PoolLimits = PoolLimits {
    min: POOLED_FRAME_MIN,
    max: POOLED_FRAME_MAX,
    idle_buffers: IDLE_BUFFERS,
    idle_bytes: usize::MAX,
};

/// Reusable buffers: for the large frames of one connection (see the module's text), or the
/// record batches a producer encodes (a freshly allocated batch buffer costs its pages'
/// first-touch faults, each batch again).
pub(crate) struct FramePool {
    idle: Mutex<Vec<Vec<u8>>>,
    limits: PoolLimits,
}

/// Counts and limits only: an idle buffer still holds the bytes of the frame or batch it held.
impl std::fmt::Debug for FramePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (buffers, bytes) = {
            let idle = self.lock();
            (idle.len(), idle.iter().map(Vec::capacity).sum::<usize>())
        };
        f.debug_struct("FramePool")
            .field("idle_buffers", &buffers)
            .field("idle_bytes", &bytes)
            .field("limits", &self.limits)
            .finish()
    }
}

impl Default for FramePool {
    fn default() -> Self {
        Self::with_limits(FRAME_LIMITS)
    }
}

impl FramePool {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A pool with other limits than a connection's.
    pub(crate) fn with_limits(limits: PoolLimits) -> Self {
        Self {
            idle: Mutex::new(Vec::new()),
            limits,
        }
    }

    fn pools(&self, capacity: usize) -> bool {
        (self.limits.min..=self.limits.max).contains(&capacity)
    }

    /// An empty buffer to read a frame of `len` bytes into with
    /// [`read_from`](FrameBuffer::read_from); for a frame of a size the pool keeps (a
    /// connection's: [`POOLED_FRAME_MIN`] to [`POOLED_FRAME_MAX`] bytes), a buffer of the pool,
    /// which [`freeze`](FrameBuffer::freeze) turns into the frame.
    ///
    /// The buffer holds room for the whole frame only when an idle one that large is at hand;
    /// else it starts at [`FIRST_ROOM`] and grows as the bytes arrive, so what a frame's
    /// announced length makes this allocate stays within twice what was received.
    pub(crate) fn buffer(self: &Arc<Self>, len: usize) -> FrameBuffer {
        let room = len.min(FIRST_ROOM);
        if !self.pools(len) {
            return FrameBuffer::Plain(Vec::with_capacity(room));
        }
        let mut buf = self.take_idle(len).unwrap_or_default();
        buf.clear();
        buf.reserve_exact(room);
        FrameBuffer::Pooled(PooledBuffer {
            buf,
            pool: Arc::clone(self),
        })
    }

    /// An empty buffer with room for `capacity` bytes: one of the pool's (the smallest idle
    /// one that fits, else the largest idle one grown to `capacity`) when the pool keeps
    /// buffers of that size, else a new one.
    pub(crate) fn take(&self, capacity: usize) -> Vec<u8> {
        let mut buf = self.take_idle(capacity).unwrap_or_default();
        buf.clear();
        // Exactly the room asked for: a grown buffer does not double (the allocator may
        // round up).
        buf.reserve_exact(capacity);
        buf
    }

    /// When the pool keeps buffers of `capacity` bytes: the smallest idle buffer that holds
    /// `capacity`, else the largest idle one (still holding its old bytes).
    fn take_idle(&self, capacity: usize) -> Option<Vec<u8>> {
        if !self.pools(capacity) {
            return None;
        }
        let mut idle = self.lock();
        let fits = idle
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= capacity)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        let largest = || {
            idle.iter()
                .enumerate()
                .max_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i)
        };
        fits.or_else(largest).map(|i| idle.swap_remove(i))
    }

    /// `buf` as `Bytes` whose last slice, when dropped, gives the buffer back to the pool (a
    /// buffer of a size the pool keeps; another one is simply frozen).
    pub(crate) fn freeze(self: &Arc<Self>, buf: Vec<u8>) -> Bytes {
        if self.pools(buf.capacity()) {
            PooledBuffer {
                buf,
                pool: Arc::clone(self),
            }
            .freeze()
        } else {
            Bytes::from(buf)
        }
    }

    /// Takes back a buffer no longer used (one of a size the pool does not keep is freed).
    pub(crate) fn recycle(&self, buf: Vec<u8>) {
        if self.pools(buf.capacity()) {
            self.give_back(buf);
        }
    }

    /// Takes back a buffer of a size the pool keeps: of a frame or batch whose last slice was
    /// dropped, or recycled.
    fn give_back(&self, buf: Vec<u8>) {
        let mut idle = self.lock();
        let bytes: usize = idle.iter().map(Vec::capacity).sum();
        if idle.len() < self.limits.idle_buffers
            && bytes.saturating_add(buf.capacity()) <= self.limits.idle_bytes
        {
            idle.push(buf);
            return;
        }
        // Full: keep the larger buffers (they fit any frame a smaller one fits), within the
        // bytes allowed.
        if let Some((i, _)) = idle
            .iter()
            .enumerate()
            .min_by_key(|(_, b)| b.capacity())
            .filter(|(_, b)| b.capacity() < buf.capacity())
            .filter(|(_, b)| {
                bytes
                    .saturating_sub(b.capacity())
                    .saturating_add(buf.capacity())
                    <= self.limits.idle_bytes
            })
        {
            idle[i] = buf;
        }
    }

    /// The idle buffers held, and their bytes (for tests).
    #[cfg(test)]
    fn idle(&self) -> (usize, usize) {
        let idle = self.lock();
        (idle.len(), idle.iter().map(Vec::capacity).sum())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        // The lock is never held across anything that can panic; a poisoned one is still
        // a consistent list of buffers.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A buffer to read one frame into.
#[derive(Debug)]
pub(crate) enum FrameBuffer {
    /// A small (or very large) frame, allocated on its own.
    Plain(Vec<u8>),
    /// A large frame, in a buffer of the pool.
    Pooled(PooledBuffer),
}

impl FrameBuffer {
    fn vec_mut(&mut self) -> &mut Vec<u8> {
        match self {
            Self::Plain(b) => b,
            Self::Pooled(b) => &mut b.buf,
        }
    }

    /// The bytes the buffer has room for (for tests).
    #[cfg(test)]
    pub(crate) fn capacity(&mut self) -> usize {
        self.vec_mut().capacity()
    }

    /// Reads from `read` until the buffer holds `len` bytes, making room as they arrive:
    /// doubling it, from [`FIRST_ROOM`], whenever it is full, up to `len`. Reads nothing past
    /// `len`. An end of the stream before `len` bytes is [`io::ErrorKind::UnexpectedEof`].
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: the bytes read so far stay in the buffer, but a caller that drops
    /// this future has lost its place in the stream (the reader task gives up the connection).
    pub(crate) async fn read_from<R>(&mut self, read: &mut R, len: usize) -> io::Result<()>
    where
        R: AsyncRead + Unpin + ?Sized,
    {
        let buf = self.vec_mut();
        while buf.len() < len {
            if buf.len() == buf.capacity() {
                let room = buf.capacity().saturating_mul(2).max(FIRST_ROOM).min(len);
                buf.reserve_exact(room.saturating_sub(buf.len()));
            }
            let want = buf.capacity().min(len).saturating_sub(buf.len());
            if read.read_buf(&mut (&mut *buf).limit(want)).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(())
    }

    /// The frame, read: its slices keep the buffer, which goes back to the pool after the last.
    pub(crate) fn freeze(self) -> Bytes {
        match self {
            Self::Plain(b) => Bytes::from(b),
            Self::Pooled(b) => b.freeze(),
        }
    }
}

/// A buffer of the pool, not yet frozen into a frame.
#[derive(Debug)]
pub(crate) struct PooledBuffer {
    buf: Vec<u8>,
    pool: Arc<FramePool>,
}

impl PooledBuffer {
    fn freeze(self) -> Bytes {
        Bytes::from_owner(Frame {
            buf: self.buf,
            pool: self.pool,
        })
    }
}

/// The owner of a frozen pooled frame: when `Bytes` drops its last slice, the buffer goes back.
struct Frame {
    buf: Vec<u8>,
    pool: Arc<FramePool>,
}

impl AsRef<[u8]> for Frame {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIG: usize = 1 << 20;

    /// A frame of `len` bytes of `fill`, read into a buffer of `pool`.
    fn frame(pool: &Arc<FramePool>, len: usize, fill: u8) -> Bytes {
        let mut b = pool.buffer(len);
        read_into(&mut b, &vec![fill; len], len).expect("the bytes are all there");
        b.freeze()
    }

    /// Reads `len` bytes of `bytes` into `b`.
    fn read_into(b: &mut FrameBuffer, bytes: &[u8], len: usize) -> io::Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(b.read_from(&mut &bytes[..], len))
    }

    #[test]
    fn small_frames_do_not_touch_the_pool() {
        let pool = FramePool::new();
        let f = frame(&pool, POOLED_FRAME_MIN - 1, 7);
        assert_eq!(f.len(), POOLED_FRAME_MIN - 1);
        drop(f);
        assert_eq!(pool.idle(), (0, 0));
    }

    #[test]
    fn huge_frames_do_not_touch_the_pool() {
        let pool = FramePool::new();
        let f = frame(&pool, POOLED_FRAME_MAX + 1, 7);
        assert_eq!(f.len(), POOLED_FRAME_MAX + 1);
        drop(f);
        assert_eq!(pool.idle(), (0, 0));
        drop(frame(&pool, POOLED_FRAME_MAX, 7));
        assert_eq!(pool.idle(), (1, POOLED_FRAME_MAX));
    }

    #[test]
    fn a_buffer_comes_back_when_the_last_slice_of_its_frame_drops() {
        let pool = FramePool::new();
        let f = frame(&pool, BIG, 1);
        let slice = f.slice(10..20);
        drop(f);
        assert_eq!(pool.idle(), (0, 0), "a slice keeps the frame");
        assert_eq!(&slice[..], &[1; 10]);
        drop(slice);
        assert_eq!(pool.idle(), (1, BIG));
    }

    #[test]
    fn a_reused_buffer_holds_only_the_new_frame() {
        let pool = FramePool::new();
        drop(frame(&pool, BIG, 0xff));
        let f = frame(&pool, BIG / 2, 3);
        assert_eq!(f.len(), BIG / 2);
        assert!(f.iter().all(|&x| x == 3));
        assert_eq!(pool.idle(), (0, 0), "the idle buffer was reused");
        drop(f);
        assert_eq!(pool.idle(), (1, BIG), "with its capacity");
    }

    #[test]
    fn room_is_made_as_the_bytes_arrive_not_for_the_length_announced() {
        let pool = FramePool::new();
        for announced in [POOLED_FRAME_MAX, POOLED_FRAME_MAX + 1, 100 << 20] {
            let mut b = pool.buffer(announced);
            assert!(b.capacity() <= FIRST_ROOM, "{}", b.capacity());
            // 300 KiB arrive, then the stream ends.
            let sent = vec![9; 300 << 10];
            let error = read_into(&mut b, &sent, announced).expect_err("cut short");
            assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
            let room = b.capacity();
            assert!(
                (sent.len()..=2 * sent.len()).contains(&room),
                "{room} bytes of room for {} received, {announced} announced",
                sent.len()
            );
        }
    }

    #[test]
    fn nothing_past_the_frame_is_read() {
        let pool = FramePool::new();
        let mut bytes = vec![1; 200 << 10];
        bytes.extend_from_slice(&[2; 1000]);
        let mut stream = &bytes[..];
        let mut b = pool.buffer(200 << 10);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime
            .block_on(b.read_from(&mut stream, 200 << 10))
            .expect("read");
        let f = b.freeze();
        assert_eq!(f.len(), 200 << 10);
        assert!(f.iter().all(|&x| x == 1));
        assert_eq!(stream, &[2; 1000][..], "the next frame's bytes are left");
    }

    #[test]
    fn a_larger_frame_grows_an_idle_buffer_to_its_size_only() {
        let pool = FramePool::new();
        drop(frame(&pool, BIG, 0));
        let f = frame(&pool, 3 * BIG, 0);
        assert_eq!(f.len(), 3 * BIG);
        drop(f);
        let (n, bytes) = pool.idle();
        assert_eq!(n, 1);
        assert!((3 * BIG..4 * BIG).contains(&bytes), "{bytes}");
    }

    #[test]
    fn the_pool_keeps_at_most_its_idle_buffers_the_largest_ones() {
        let pool = FramePool::new();
        let frames: Vec<Bytes> = [BIG, 2 * BIG, 3 * BIG, 4 * BIG]
            .into_iter()
            .map(|len| frame(&pool, len, 0))
            .collect();
        assert_eq!(pool.idle(), (0, 0));
        drop(frames);
        let (n, bytes) = pool.idle();
        assert_eq!(n, IDLE_BUFFERS);
        assert_eq!(bytes, 7 * BIG);
    }

    const SMALL_LIMITS: PoolLimits = PoolLimits {
        min: 100,
        max: 10_000,
        idle_buffers: 3,
        idle_bytes: 5_000,
    };

    #[test]
    fn a_taken_buffer_comes_back_when_its_bytes_drop() {
        let pool = Arc::new(FramePool::with_limits(SMALL_LIMITS));
        let mut buf = pool.take(1_000);
        assert!(buf.is_empty() && buf.capacity() >= 1_000);
        buf.extend_from_slice(&[5; 1_000]);
        let bytes = pool.freeze(buf);
        let slice = bytes.slice(..10);
        drop(bytes);
        assert_eq!(pool.idle().0, 0, "a slice keeps the buffer");
        drop(slice);
        let (n, held) = pool.idle();
        assert_eq!(n, 1);
        // The next take of that size reuses it, emptied.
        let again = pool.take(900);
        assert!(again.is_empty());
        assert_eq!(again.capacity(), held);
        assert_eq!(pool.idle(), (0, 0));
    }

    #[test]
    fn sizes_outside_the_limits_are_not_pooled() {
        let pool = Arc::new(FramePool::with_limits(SMALL_LIMITS));
        drop(pool.freeze(Vec::with_capacity(50)));
        pool.recycle(Vec::with_capacity(20_000));
        assert_eq!(pool.idle(), (0, 0));
        pool.recycle(Vec::with_capacity(1_000));
        assert_eq!(pool.idle().0, 1);
    }

    #[test]
    fn idle_buffers_stay_within_their_count_and_bytes() {
        let pool = Arc::new(FramePool::with_limits(SMALL_LIMITS));
        for _ in 0..10 {
            pool.recycle(Vec::with_capacity(1_000));
        }
        let (n, bytes) = pool.idle();
        assert_eq!(n, SMALL_LIMITS.idle_buffers);
        assert!(bytes <= SMALL_LIMITS.idle_bytes, "{bytes}");
        // A larger buffer replaces a smaller one only within the bytes allowed.
        pool.recycle(Vec::with_capacity(4_000));
        let (_, after) = pool.idle();
        assert!(after <= SMALL_LIMITS.idle_bytes, "{after}");
        pool.recycle(Vec::with_capacity(2_500));
        let (n, after) = pool.idle();
        assert_eq!(n, SMALL_LIMITS.idle_buffers);
        assert!(after <= SMALL_LIMITS.idle_bytes, "{after}");
        assert!(
            after > bytes,
            "the larger buffer was kept: {after} vs {bytes}"
        );
    }

    #[test]
    fn debug_shows_counts_not_the_bytes_idle_buffers_held() {
        let pool = Arc::new(FramePool::with_limits(SMALL_LIMITS));
        drop(pool.freeze(vec![0xab; 1_000]));
        let shown = format!("{pool:?}");
        assert!(shown.contains("idle_buffers: 1"), "{shown}");
        assert!(
            !shown.contains("171"),
            "the buffer's bytes are shown: {shown}"
        );
    }

    #[test]
    fn a_frame_outlives_its_pool_handle() {
        let pool = FramePool::new();
        let f = frame(&pool, BIG, 3);
        drop(pool);
        assert_eq!(f[BIG - 1], 3);
    }
}
