//! The copy kernels: plain memcpy (cached stores) everywhere, and on x86-64 a non-temporal copy
//! that streams the destination past the caches. Architecture-specific code stays behind
//! `cfg(target_arch)`; every other target (aarch64 included) builds the cached kernel only.

/// Cached copy: the C library's memcpy (ERMS/AVX variants on x86-64, NEON/SVE on aarch64).
pub fn cached(dst: &mut [u8], src: &[u8]) {
    dst.copy_from_slice(src);
}

/// Whether this target has a streaming kernel at all.
pub const HAS_STREAM: bool = cfg!(target_arch = "x86_64");

/// Non-temporal copy where the target has one, else `cached`. Ends with a store fence, so the
/// bytes are globally visible before any later store of this thread (the commit's release).
pub fn stream(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "stream copy: lengths differ");
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: both slices are valid for `len` bytes and do not overlap (one is borrowed
        // mutably, the other shared); SSE2 is part of the x86_64 baseline.
        unsafe { stream_x86(dst.as_mut_ptr(), src.as_ptr(), src.len()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    cached(dst, src);
}

/// Unaligned 16-byte loads, aligned 16-byte streaming stores (four per 64-byte line), then a
/// store fence.
///
/// # Safety
/// `dst` and `src` must be valid for `len` bytes and must not overlap.
#[cfg(target_arch = "x86_64")]
unsafe fn stream_x86(dst: *mut u8, src: *const u8, len: usize) {
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

/// CPU features that bear on the choice, as names (run-time detection).
pub fn cpu_features() -> Vec<&'static str> {
    #[allow(unused_mut)]
    let mut found = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        found.push("sse2");
        if std::arch::is_x86_feature_detected!("avx2") {
            found.push("avx2");
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            found.push("avx512f");
        }
        if std::arch::is_x86_feature_detected!("ermsb") {
            found.push("erms");
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        found.push("neon");
        if std::arch::is_aarch64_feature_detected!("sve") {
            found.push("sve");
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_kernels_copy_every_byte_at_any_alignment_and_size() {
        for len in [0, 1, 63, 64, 65, 1000, 4096 + 17, (1 << 20) + 77] {
            let src: Vec<u8> = (0..len + 64).map(|i| (i * 31 % 251) as u8).collect();
            for offset in [0usize, 1, 17, 63] {
                for kernel in [cached as fn(&mut [u8], &[u8]), stream] {
                    let mut dst = vec![0u8; len + 64];
                    kernel(&mut dst[offset..offset + len], &src[3..3 + len]);
                    assert_eq!(&dst[offset..offset + len], &src[3..3 + len], "len {len} offset {offset}");
                    assert!(dst[..offset].iter().all(|&b| b == 0) && dst[offset + len..].iter().all(|&b| b == 0));
                }
            }
        }
    }
}
