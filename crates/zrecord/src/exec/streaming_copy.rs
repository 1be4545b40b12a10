//! Copies that write around the cache, for batches too big to stay in it.
//!
//! Writing a line that is not in the cache first reads it from memory (a
//! read for ownership), so a plain copy into a batch much bigger than the
//! cache moves every destination byte twice. Streaming (non-temporal)
//! stores write whole lines straight to memory. On the benchmark's workload
//! C (raw image records, 38.5 MB batches), `bench/gather_micro.py C raw`
//! gathered at about 10 GB/s with plain copies once the consumer kept its
//! previous batch, and at 16–17 GB/s with streaming stores (bench/README.md,
//! "Streaming stores"). Batches that fit the cache keep plain copies, so the
//! consumer finds them cached.

/// Batches at least this big are written with streaming stores: many times
/// a core's L2, so their lines would leave it before the consumer reads
/// them anyway.
pub(crate) const STREAMING_MIN_BATCH: usize = 16 << 20;

/// Records shorter than this are copied plainly even into a big batch: a
/// streaming store pays off only over whole runs of lines. (Streaming
/// copies exist on x86-64 only; elsewhere every copy is plain.)
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const STREAMING_MIN_RECORD: usize = 4 << 10;

/// How raw records are copied into their slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RawCopy {
    /// Ordinary stores: the bytes stay cached.
    Cached,
    /// Streaming stores (on x86-64) for records of at least
    /// [`STREAMING_MIN_RECORD`]; plain copies elsewhere.
    Streaming,
}

impl RawCopy {
    /// The copy for a batch of `bytes` destination bytes.
    pub(crate) fn for_batch(bytes: usize) -> RawCopy {
        if bytes >= STREAMING_MIN_BATCH {
            RawCopy::Streaming
        } else {
            RawCopy::Cached
        }
    }

    /// Copies `src` into `dst`, which have the same length. A streaming
    /// copy is complete (fenced) when it returns, so the usual
    /// synchronisation hands the bytes to other threads.
    pub(crate) fn copy(self, dst: &mut [u8], src: &[u8]) {
        #[cfg(target_arch = "x86_64")]
        if self == RawCopy::Streaming && src.len() >= STREAMING_MIN_RECORD {
            return stream_x86_64(dst, src);
        }
        dst.copy_from_slice(src);
    }
}

/// Copies 64-byte lines with SSE2 (part of every x86-64): unaligned loads,
/// streaming stores to whole destination lines. Lines are taken from four
/// pages at once, interleaved, as glibc does for its own streaming copies:
/// four streams keep more memory requests in flight than one (on workload C,
/// `bench/gather_micro.py C raw`: one stream 13 GB/s, two 15, four 17). The
/// head before the first line boundary and the tail shorter than a line are
/// copied plainly.
#[cfg(target_arch = "x86_64")]
fn stream_x86_64(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "a copy between slices of one length");
    let head = dst.as_ptr().align_offset(LINE).min(dst.len());
    dst[..head].copy_from_slice(&src[..head]);
    let body = (dst.len() - head) / LINE * LINE;
    let (d, s) = (
        dst[head..head + body].as_mut_ptr(),
        src[head..head + body].as_ptr(),
    );
    let groups = body / (STREAMS * PAGE) * (STREAMS * PAGE);
    for group in (0..groups).step_by(STREAMS * PAGE) {
        for line in (group..group + PAGE).step_by(LINE) {
            // SAFETY: `line + 3 * PAGE + LINE <= groups <= body`: all four
            // lines lie inside the body of both slices, and are whole lines
            // of `dst`.
            unsafe {
                stream_line(d.add(line), s.add(line));
                stream_line(d.add(line + PAGE), s.add(line + PAGE));
                stream_line(d.add(line + 2 * PAGE), s.add(line + 2 * PAGE));
                stream_line(d.add(line + 3 * PAGE), s.add(line + 3 * PAGE));
            }
        }
    }
    for line in (groups..body).step_by(LINE) {
        // SAFETY: `line + LINE <= body`, as above.
        unsafe { stream_line(d.add(line), s.add(line)) };
    }
    // Streaming stores are not ordered with later stores (such as the one
    // that publishes the batch to another thread) until fenced.
    // SAFETY: SSE is always there on x86-64.
    unsafe { std::arch::x86_64::_mm_sfence() };
    let done = head + body;
    dst[done..].copy_from_slice(&src[done..]);
}

#[cfg(target_arch = "x86_64")]
const LINE: usize = 64;
#[cfg(target_arch = "x86_64")]
const PAGE: usize = 4096;
/// Pages copied at once, interleaved.
#[cfg(target_arch = "x86_64")]
const STREAMS: usize = 4;

/// Copies one 64-byte line from `s` to `d`.
///
/// # Safety
/// Both must be valid for 64 bytes, and `d` 16-byte aligned.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn stream_line(d: *mut u8, s: *const u8) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    let (d, s) = (d as *mut __m128i, s as *const __m128i);
    // SAFETY: the caller's promise; SSE2 is always there on x86-64.
    unsafe {
        let a = _mm_loadu_si128(s);
        let b = _mm_loadu_si128(s.add(1));
        let c = _mm_loadu_si128(s.add(2));
        let e = _mm_loadu_si128(s.add(3));
        _mm_stream_si128(d, a);
        _mm_stream_si128(d.add(1), b);
        _mm_stream_si128(d.add(2), c);
        _mm_stream_si128(d.add(3), e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length around the thresholds and every misalignment of both
    /// sides copies exactly the source, and not a byte outside the slot.
    #[test]
    fn streaming_copies_are_exact_at_any_alignment() {
        let src: Vec<u8> = (0..40_033u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for len in [
            0, 1, 63, 64, 4095, 4096, 4097, 4160, 5000, 8191, 8192, 16_383, 16_384, 16_449, 32_868,
            40_000,
        ] {
            for src_off in [0, 1, 15, 33] {
                for dst_off in [0, 1, 8, 15, 16, 47] {
                    let mut dst = vec![0xEEu8; len + 128];
                    let slot = &mut dst[dst_off..dst_off + len];
                    RawCopy::Streaming.copy(slot, &src[src_off..src_off + len]);
                    assert_eq!(&dst[dst_off..dst_off + len], &src[src_off..src_off + len]);
                    assert!(dst[..dst_off].iter().all(|&b| b == 0xEE), "{len} {dst_off}");
                    assert!(
                        dst[dst_off + len..].iter().all(|&b| b == 0xEE),
                        "{len} {dst_off}"
                    );
                }
            }
        }
    }

    #[test]
    fn only_big_batches_stream() {
        assert_eq!(RawCopy::for_batch(STREAMING_MIN_BATCH - 1), RawCopy::Cached);
        assert_eq!(RawCopy::for_batch(STREAMING_MIN_BATCH), RawCopy::Streaming);
    }
}
