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

/// Unmaps nodectld's own machine code from its address space (`MADV_DONTNEED` on the
/// executable's `r-x` mapping, found as the one holding this function): the pages stay in the
/// page cache, so the next pass maps back what it runs with minor faults (no read from disk),
/// and idle RSS is what idling touches instead of everything the busiest pass ran (with
/// fault-around most of the 5 MB of code: the VM benchmark's idle RSS was 8.5-9.5 MiB against
/// a target of 8, issue 18). Code is never written, so nothing is lost: the kernel drops these
/// pages the same way under memory pressure. Shared libraries and writable mappings (relocated
/// data) are left alone. Returns the bytes of the mapping (0 when it was not found).
pub(crate) fn release_code() -> usize {
    let here = release_code as fn() -> usize as usize;
    let Some((start, end)) = code_mapping(here) else {
        return 0;
    };
    // SAFETY: [start, end) is a private, read-only, executable file mapping of this process's
    // own binary (never written, so never a copy-on-write page): MADV_DONTNEED only drops its
    // page table entries and later accesses fault the same file pages back in.
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
    if rc == 0 {
        end - start
    } else {
        0
    }
}

/// The `r-xp` file mapping of `/proc/self/maps` that holds address `addr`.
fn code_mapping(addr: usize) -> Option<(usize, usize)> {
    use std::io::Read;
    // A bounded read: nodectld has a few dozen mappings (~100 bytes each).
    let mut text = String::new();
    std::fs::File::open("/proc/self/maps")
        .ok()?
        .take(1 << 20)
        .read_to_string(&mut text)
        .ok()?;
    text.lines().find_map(|l| parse_code_mapping(l, addr))
}

/// One `/proc/<pid>/maps` line, when it is a private read-only executable file mapping
/// holding `addr`.
fn parse_code_mapping(line: &str, addr: usize) -> Option<(usize, usize)> {
    let mut f = line.split_whitespace();
    let (range, perms) = (f.next()?, f.next()?);
    let inode = f.nth(2)?;
    let (a, b) = range.split_once('-')?;
    let (a, b) = (
        usize::from_str_radix(a, 16).ok()?,
        usize::from_str_radix(b, 16).ok()?,
    );
    (perms == "r-xp" && inode != "0" && a <= addr && addr < b && a < b).then_some((a, b))
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
    fn this_process_gives_back_its_code_and_runs_on() {
        let code = super::code_mapping(super::release_code as fn() -> usize as usize)
            .expect("the test binary's code");
        assert!(code.1 - code.0 > 4096, "{code:x?}");
        // Every page of the code mapping touched, so it is resident.
        let resident = || {
            let s = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let head = format!("{:x}-{:x} ", code.0, code.1);
            let at = s.find(&head).expect("the code mapping in smaps");
            s[at..]
                .lines()
                .find_map(|l| l.strip_prefix("Rss:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap()
        };
        let sum: u64 = (code.0..code.1)
            .step_by(4096)
            .map(|p| unsafe { std::ptr::read_volatile(p as *const u8) } as u64)
            .sum();
        let before = resident();
        assert_eq!(super::release_code(), code.1 - code.0);
        let after = resident();
        assert!(
            after < before / 2,
            "resident code {before} kB before, {after} kB after"
        );
        // and the same bytes come back: code runs on
        let again: u64 = (code.0..code.1)
            .step_by(4096)
            .map(|p| unsafe { std::ptr::read_volatile(p as *const u8) } as u64)
            .sum();
        assert_eq!(sum, again);
        assert!(super::resident().is_some());
    }

    #[test]
    fn only_a_private_executable_file_mapping_holding_the_address_is_code() {
        let line = "55d0c0a00000-55d0c0f00000 r-xp 00044000 fd:01 1234 /usr/bin/nodectld";
        assert_eq!(
            super::parse_code_mapping(line, 0x55d0c0a00010),
            Some((0x55d0c0a00000, 0x55d0c0f00000))
        );
        assert_eq!(super::parse_code_mapping(line, 0x55d0c0f00000), None);
        for other in [
            "55d0c0a00000-55d0c0f00000 rw-p 00044000 fd:01 1234 /usr/bin/nodectld",
            "55d0c0a00000-55d0c0f00000 r-xs 00044000 fd:01 1234 /usr/bin/nodectld",
            "55d0c0a00000-55d0c0f00000 r-xp 00000000 00:00 0",
            "garbage",
        ] {
            assert_eq!(
                super::parse_code_mapping(other, 0x55d0c0a00010),
                None,
                "{other}"
            );
        }
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
