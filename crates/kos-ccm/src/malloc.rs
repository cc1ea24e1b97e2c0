//! How kos-ccm asks glibc's allocator to behave. glibc gives each thread that contends for the
//! heap an arena of its own (up to 8 per core) and keeps every arena at its high-water mark, and
//! it raises its mmap threshold to the largest block freed so far, after which blocks of a few
//! MB (a pool-list page while it is received) come from those arenas and stay there. A controller
//! that peaks once (a create wave, a full refresh) then kept the peak for the rest of its life.
//! The binary applies these settings with `mallopt` before its runtime starts any thread; this
//! module only holds them (the library stays free of `unsafe`), so another process that runs the
//! controller (`kos bench ccm`) can apply the same through `GLIBC_TUNABLES`.

use std::ffi::OsString;

/// Arenas at most: two threads allocate without waiting on each other, and no more high-water
/// marks than that are kept.
pub const ARENA_MAX: i32 = 2;

/// Blocks at least this large are mmapped and given back when freed (glibc's default starting
/// point, kept fixed instead of rising with the largest block freed).
pub const MMAP_THRESHOLD: i32 = 128 * 1024;

/// Whether the environment already tunes glibc's allocator: an operator's own setting wins.
pub fn tuned_by_env(var: impl Fn(&str) -> Option<OsString>) -> bool {
    [
        "GLIBC_TUNABLES",
        "MALLOC_ARENA_MAX",
        "MALLOC_MMAP_THRESHOLD_",
    ]
    .iter()
    .any(|k| var(k).is_some())
}

/// The same settings as a `GLIBC_TUNABLES` value, for a process that runs the controller but
/// is not the kos-ccm binary.
pub fn glibc_tunables() -> String {
    format!("glibc.malloc.arena_max={ARENA_MAX}:glibc.malloc.mmap_threshold={MMAP_THRESHOLD}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operators_setting_wins() {
        assert!(!tuned_by_env(|_| None));
        assert!(tuned_by_env(
            |k| (k == "MALLOC_ARENA_MAX").then(|| "4".into())
        ));
        assert!(tuned_by_env(|k| (k == "GLIBC_TUNABLES").then(|| "x".into())));
    }

    #[test]
    fn the_tunables_name_both_settings() {
        let t = glibc_tunables();
        assert!(t.contains(&format!("arena_max={ARENA_MAX}")));
        assert!(t.contains(&format!("mmap_threshold={MMAP_THRESHOLD}")));
    }
}
