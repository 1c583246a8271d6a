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

/// Unmaps nodectld's own code and read-only data from its address space (`MADV_DONTNEED` on
/// the binary's `r-x` and `r--` mappings that hold no private page): the pages stay in the page
/// cache, so the next pass maps back what it uses with minor faults (no read from disk), and
/// idle RSS is what idling touches instead of everything the busiest pass ran (with
/// fault-around most of the 5 MB of code and 2 MB of read-only data: the VM benchmark's idle
/// RSS was 8.5-9.5 MiB against a target of 8, issue 18). These pages are never written, so
/// nothing is lost: the kernel drops them the same way under memory pressure. A read-only
/// mapping with private (anonymous) pages is left alone: that is the relocated data the loader
/// made read-only afterwards (RELRO), which exists nowhere else. So are shared libraries and
/// writable mappings. Returns the bytes released.
pub(crate) fn release_code() -> usize {
    use std::io::Read;
    let here = release_code as fn() -> usize as usize;
    // A bounded read: nodectld has a few dozen mappings (~1 kB each in smaps).
    let mut smaps = String::new();
    let read = std::fs::File::open("/proc/self/smaps")
        .and_then(|f| f.take(4 << 20).read_to_string(&mut smaps));
    if read.is_err() {
        return 0;
    }
    let mut released = 0;
    for (start, end) in releasable(&smaps, here) {
        // SAFETY: [start, end) is a private, read-only file mapping of this process's own
        // binary without a private page (smaps said `Anonymous: 0 kB`, and a read-only mapping
        // gains none): MADV_DONTNEED only drops its page table entries, and later accesses
        // fault the same file pages back in.
        let rc =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        if rc == 0 {
            released += end - start;
        }
    }
    released
}

/// One mapping of `/proc/<pid>/smaps`: its range, permissions, path, and the kB of private
/// pages it holds in memory (`Anonymous:`) and on swap (`Swap:`).
struct Mapping<'a> {
    start: usize,
    end: usize,
    perms: &'a str,
    path: &'a str,
    anonymous_kb: Option<u64>,
    swap_kb: Option<u64>,
}

fn mappings(smaps: &str) -> Vec<Mapping<'_>> {
    let mut out: Vec<Mapping<'_>> = Vec::new();
    // Whether the last header line parsed: a `Key:` line belongs to it only then (a line this
    // parser does not understand never lends its values to the mapping before it).
    let mut current = false;
    for line in smaps.lines() {
        // The two counts read: a key seen twice for one mapping leaves its count unknown.
        if let Some((swap, v)) = [("Anonymous:", false), ("Swap:", true)]
            .into_iter()
            .find_map(|(key, swap)| Some((swap, line.strip_prefix(key)?)))
        {
            let v = v.split_whitespace().next().and_then(|v| v.parse().ok());
            if let (true, Some(m)) = (current, out.last_mut()) {
                let count = if swap {
                    &mut m.swap_kb
                } else {
                    &mut m.anonymous_kb
                };
                *count = if count.is_none() { v } else { None };
            }
            continue;
        }
        // Another `Key: value` line of the current mapping.
        if line
            .split_whitespace()
            .next()
            .is_some_and(|k| k.ends_with(':'))
        {
            continue;
        }
        // A mapping's first line: `start-end perms offset dev inode [path]`; anything else
        // ends the current mapping.
        current = false;
        let mut f = line.splitn(6, ' ');
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        else {
            continue;
        };
        let path = f.nth(3).unwrap_or("").trim();
        out.push(Mapping {
            start,
            end,
            perms,
            path,
            anonymous_kb: None,
            swap_kb: None,
        });
        current = true;
    }
    out
}

/// The mappings [`release_code`] may drop: those of the file that holds `addr` (this binary),
/// private and read-only (`r-xp`, `r--p`), with no private page in memory (`Anonymous: 0 kB`)
/// nor on swap (`Swap: 0 kB`: a relocated RELRO page swapped out is private data too).
fn releasable(smaps: &str, addr: usize) -> Vec<(usize, usize)> {
    let maps = mappings(smaps);
    let Some(own) = maps
        .iter()
        .find(|m| m.start <= addr && addr < m.end && m.perms == "r-xp" && m.path.starts_with('/'))
    else {
        return Vec::new();
    };
    maps.iter()
        .filter(|m| {
            m.path == own.path
                && matches!(m.perms, "r-xp" | "r--p")
                && m.anonymous_kb == Some(0)
                && m.swap_kb == Some(0)
                && m.start < m.end
        })
        .map(|m| (m.start, m.end))
        .collect()
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

    /// The resident kB of the mappings `ranges` in this process's smaps.
    fn resident_of(ranges: &[(usize, usize)]) -> u64 {
        let s = std::fs::read_to_string("/proc/self/smaps").unwrap();
        ranges
            .iter()
            .map(|(a, b)| {
                let at = s
                    .find(&format!("{a:x}-{b:x} "))
                    .expect("the mapping in smaps");
                s[at..]
                    .lines()
                    .find_map(|l| l.strip_prefix("Rss:"))
                    .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                    .unwrap()
            })
            .sum()
    }

    #[test]
    fn this_process_gives_back_its_code_and_runs_on() {
        let here = super::release_code as fn() -> usize as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let ranges = super::releasable(&smaps, here);
        assert!(
            ranges.iter().any(|(a, b)| *a <= here && here < *b),
            "the code mapping: {ranges:x?}"
        );
        // Every page touched, so all are resident.
        let touch = || -> u64 {
            ranges
                .iter()
                .flat_map(|(a, b)| (*a..*b).step_by(4096))
                .map(|p| unsafe { std::ptr::read_volatile(p as *const u8) } as u64)
                .sum()
        };
        let sum = touch();
        let before = resident_of(&ranges);
        let released = super::release_code();
        assert!(released >= ranges.iter().map(|(a, b)| b - a).sum::<usize>());
        let after = resident_of(&ranges);
        assert!(
            after < before / 2,
            "resident {before} kB before, {after} kB after"
        );
        // and the same bytes come back: code runs on
        assert_eq!(sum, touch());
        assert!(super::resident().is_some());
    }

    #[test]
    fn only_the_binarys_read_only_mappings_without_private_pages_are_released() {
        let smaps = "\
55d0c0000000-55d0c0229000 r--p 00000000 fd:01 1234                       /usr/bin/nodectld
Rss:                1200 kB
Anonymous:             0 kB
Swap:                  0 kB
55d0c0229000-55d0c0702000 r-xp 00228000 fd:01 1234                       /usr/bin/nodectld
Rss:                4000 kB
Anonymous:             0 kB
Swap:                  0 kB
55d0c0702000-55d0c0752000 r--p 00700000 fd:01 1234                       /usr/bin/nodectld
Rss:                 316 kB
Anonymous:           316 kB
Swap:                  0 kB
55d0c0752000-55d0c0755000 rw-p 0074f000 fd:01 1234                       /usr/bin/nodectld
Anonymous:            12 kB
Swap:                  0 kB
7f0000000000-7f0000100000 r-xp 00028000 fd:01 99                         /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
Swap:                  0 kB
7f0000200000-7f0000300000 r-xp 00000000 00:00 0
Anonymous:             0 kB
Swap:                  0 kB
";
        // the binary's read-only data and its code
        let both = [
            (0x55d0c0000000, 0x55d0c0229000),
            (0x55d0c0229000, 0x55d0c0702000),
        ];
        assert_eq!(super::releasable(smaps, 0x55d0c0300000), both);
        // an address outside the binary's code: nothing
        assert!(super::releasable(smaps, 0x7f0000200010).is_empty());
        assert!(super::releasable(smaps, 0x55d0c0000010).is_empty());
        // a read-only mapping whose private pages smaps does not report is kept
        let no_anon = smaps.replacen("Anonymous:             0 kB\n", "", 1);
        assert_eq!(
            super::releasable(&no_anon, 0x55d0c0300000),
            [(0x55d0c0229000, 0x55d0c0702000)]
        );
        // RELRO with its private pages all on swap shows Anonymous 0: kept
        let swapped = smaps.replace(
            "Anonymous:           316 kB\nSwap:                  0 kB",
            "Anonymous:             0 kB\nSwap:                316 kB",
        );
        assert_eq!(super::releasable(&swapped, 0x55d0c0300000), both);
        // a line the parser does not understand never lends a value to the mapping before it
        let garbled = smaps.replacen(
            "Rss:                 316 kB\nAnonymous:           316 kB",
            "Rss:                 316 kB\n?? garbled\nAnonymous:             0 kB",
            1,
        );
        assert_eq!(super::releasable(&garbled, 0x55d0c0300000), both);
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
