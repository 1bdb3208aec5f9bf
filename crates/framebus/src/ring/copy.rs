//! Copying a frame into its slot. A frame written into shared memory is read by another process
//! (or sent by a bridge), not by the writer, so for large frames the writer streams it past its
//! own caches: non-temporal stores skip the read-for-ownership of every destination line and do
//! not evict the writer's working set. On the 2-core EPYC VM a 6.2 MB (1080p RGB) copy into a
//! /dev/shm mapping runs at about 21 GB/s this way against about 12 GB/s through memcpy. Small
//! frames stay on memcpy: they are likely still in a cache when the reader gets to them.

/// Frames at least this large are copied with non-temporal stores (where the CPU has them).
pub const STREAM_MIN: usize = 4 << 20;

/// Copies `src` into `dst` (same length).
pub fn copy_frame(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_frame: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if src.len() >= STREAM_MIN {
        // SAFETY: both slices are valid for `len` bytes and do not overlap (one is borrowed
        // mutably, the other shared); SSE2 is part of the x86_64 baseline.
        unsafe { stream_copy(dst.as_mut_ptr(), src.as_ptr(), src.len()) };
        return;
    }
    dst.copy_from_slice(src);
}

/// Non-temporal copy: unaligned 16-byte loads, aligned 16-byte streaming stores, then a store
/// fence so the frame is globally visible before the commit's release store publishes it.
///
/// # Safety
/// `dst` and `src` must be valid for `len` bytes and must not overlap.
#[cfg(target_arch = "x86_64")]
unsafe fn stream_copy(dst: *mut u8, src: *const u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let head = ((64 - (dst as usize & 63)) & 63).min(len);
    // SAFETY: for every access below, offsets stay below `len`, inside both buffers (the
    // caller's contract); stores go to `dst + i` with `dst + head` 64-byte aligned, so every
    // streaming store is 16-byte aligned as _mm_stream_si128 requires.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, head);
        let mut i = head;
        while i + 64 <= len {
            let a = _mm_loadu_si128(src.add(i).cast::<__m128i>());
            let b = _mm_loadu_si128(src.add(i + 16).cast::<__m128i>());
            let c = _mm_loadu_si128(src.add(i + 32).cast::<__m128i>());
            let d = _mm_loadu_si128(src.add(i + 48).cast::<__m128i>());
            _mm_stream_si128(dst.add(i).cast::<__m128i>(), a);
            _mm_stream_si128(dst.add(i + 16).cast::<__m128i>(), b);
            _mm_stream_si128(dst.add(i + 32).cast::<__m128i>(), c);
            _mm_stream_si128(dst.add(i + 48).cast::<__m128i>(), d);
            i += 64;
        }
        std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i);
        _mm_sfence();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_byte_at_any_alignment_and_size() {
        for len in [0, 1, 63, 64, 65, 1000, STREAM_MIN - 1, STREAM_MIN, STREAM_MIN + 77] {
            let src: Vec<u8> = (0..len + 64).map(|i| (i * 31 % 251) as u8).collect();
            for offset in [0usize, 1, 17, 63] {
                let mut dst = vec![0u8; len + 64];
                copy_frame(&mut dst[offset..offset + len], &src[3..3 + len]);
                assert_eq!(&dst[offset..offset + len], &src[3..3 + len], "len {len} offset {offset}");
                assert!(dst[..offset].iter().all(|&b| b == 0) && dst[offset + len..].iter().all(|&b| b == 0));
            }
        }
    }
}
