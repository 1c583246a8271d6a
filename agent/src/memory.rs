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
}
