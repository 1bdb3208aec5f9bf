//! Sharing one large copy between the calling thread and a few helpers.

/// Cores not busy right now: CPUs this process may use, less the runnable tasks the kernel
/// counts (including this one), read from /proc/loadavg's fourth field. 0 where unknown.
pub fn idle_cores() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let running = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().nth(3)?.split('/').next()?.parse::<usize>().ok());
    match running {
        Some(r) => cpus.saturating_sub(r.max(1)),
        None => 0,
    }
}

/// Copies `src` into `dst` in `n` pieces (64-byte aligned boundaries), the calling thread taking
/// the first and `n - 1` scoped threads the others; returns once every piece is done.
pub fn split(n: usize, kernel: fn(&mut [u8], &[u8]), dst: &mut [u8], src: &[u8]) {
    let piece = (src.len() / n).div_ceil(64) * 64;
    std::thread::scope(|scope| {
        let mut pieces = dst.chunks_mut(piece.max(64)).zip(src.chunks(piece.max(64)));
        let first = pieces.next();
        for (d, s) in pieces {
            scope.spawn(move || kernel(d, s));
        }
        if let Some((d, s)) = first {
            kernel(d, s);
        }
    });
}
