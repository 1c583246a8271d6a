//! nodectld's own memory: giving back what a pass or a background request freed, and what the
//! process holds (for the metrics).

/// Gives freed memory back to the kernel. A pass frees far more than it keeps (the SELinux
/// file_contexts handle alone is over 10 MiB of small allocations), and glibc's allocator keeps
/// freed heap pages mapped: without this, nodectld's idle RSS would be its busiest moment's
/// (the VM tier's K5 measures it).
pub(crate) fn release_freed() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes no pointers; it only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// No transparent huge pages for this process (`PR_SET_THP_DISABLE`, inherited by threads):
/// nodectld's memory is small and idle, and where THP is `always` (Debian, Fedora) a 2 MiB
/// region the kernel backed with one huge page is resident whole. The VM benchmark found one:
/// a relabel worker's 2 MiB stack, kept by glibc's stack cache after the thread ended, fully
/// resident after a pass (11 MiB idle RSS instead of 9).
pub(crate) fn no_huge_pages() {
    // SAFETY: prctl with integer arguments only; it sets a flag on this process's mm.
    let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if rc != 0 {
        tracing::debug!(
            "PR_SET_THP_DISABLE refused: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// [`release_freed`], at most once per `every` (a caller every other process may trigger, such
/// as a status call on the bus, must not make nodectld spend its time trimming). `true` when it
/// trimmed.
pub(crate) fn release_freed_at_most_every(every: std::time::Duration) -> bool {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = crate::util::time::now_millis();
    let last = LAST.load(Ordering::Relaxed);
    let due = last == 0 || now.saturating_sub(last) >= every.as_millis() as u64;
    if due
        && LAST
            .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        release_freed();
        return true;
    }
    false
}

/// (resident, anonymous) bytes of this process, from `/proc/self/smaps_rollup`.
pub(crate) fn resident() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let kb = |key: &str| -> Option<u64> {
        s.lines()
            .find_map(|l| l.strip_prefix(key))?
            .split_whitespace()
            .next()?
            .parse::<u64>()
            .ok()
            .map(|k| k * 1024)
    };
    Some((kb("Rss:")?, kb("Anonymous:")?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_a_resident_size() {
        let (rss, anon) = super::resident().unwrap();
        assert!(rss > 0 && anon > 0 && anon <= rss, "{rss} {anon}");
        super::release_freed();
    }

    #[test]
    fn a_loop_of_status_calls_trims_once() {
        let every = std::time::Duration::from_secs(3600);
        let trims = (0..1000)
            .filter(|_| super::release_freed_at_most_every(every))
            .count();
        assert!(trims <= 1, "{trims} trims");
    }
}
