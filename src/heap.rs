//! Estimates of the heap bytes a value holds, for caches bounded in bytes (the service's
//! conversation cache weighs each entry with them). An estimate, not an accounting: every heap
//! allocation counts its length plus [`ALLOCATION_OVERHEAD`] (the allocator's header and its
//! rounding up to size classes), containers count their elements and not their spare capacity,
//! and nested records of short strings are weighed by their JSON form ([`json`]).
//! `benches/scale_serve.rs` prints the cache's total next to the process's resident memory.

use std::io::Write;

/// Caps glibc's malloc arenas at `arenas` (what `MALLOC_ARENA_MAX` does), for the long-running
/// services: by default glibc keeps up to eight arenas per core, and the bytes an evicted
/// conversation gave back stay resident in whichever arena held them, so resident memory
/// drifts far above the cache's budget (`benches/scale_serve.rs`, 10,000 conversations, a
/// 512 MiB budget: 729 MiB resident with the default arenas, 612 MiB with two). Returns
/// whether the allocator took it (always false off glibc).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn cap_arenas(arenas: usize) -> bool {
    let arenas = libc::c_int::try_from(arenas).unwrap_or(libc::c_int::MAX);
    // SAFETY: `mallopt` only sets one of the allocator's tunables; glibc documents it as safe
    // to call at any time, from any thread, and it touches no memory of ours.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) == 1 }
}

/// Caps the allocator's arenas: nothing to cap off glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn cap_arenas(_arenas: usize) -> bool {
    false
}

/// Bytes counted per heap allocation beyond its length.
pub const ALLOCATION_OVERHEAD: usize = 32;

/// The heap bytes of a string.
pub fn text(text: &str) -> usize {
    if text.is_empty() { 0 } else { text.len() + ALLOCATION_OVERHEAD }
}

/// The heap bytes of an optional string.
pub fn optional_text(value: Option<&str>) -> usize {
    value.map_or(0, text)
}

/// The heap bytes of a slice of values without heap data of their own.
pub fn flat<T>(values: &[T]) -> usize {
    if values.is_empty() { 0 } else { std::mem::size_of_val(values) + ALLOCATION_OVERHEAD }
}

/// The heap bytes of a list of vectors (the outer list and each vector).
pub fn vectors(values: &[Vec<f32>]) -> usize {
    flat(values) + values.iter().map(|vector| flat(vector)).sum::<usize>()
}

/// The heap bytes of `(id, vector)` pairs.
pub fn named_vectors(values: &[(String, Vec<f32>)]) -> usize {
    flat(values) + values.iter().map(|(id, vector)| text(id) + flat(vector)).sum::<usize>()
}

/// The heap bytes of a serialisable record of strings and small values, as twice the length of
/// its JSON form: each string once, and about as much again for the structure (pointers,
/// lengths and allocation headers in place of the punctuation). Counted without writing the
/// JSON anywhere.
pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    let mut counter = Counter(0);
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.0 * 2,
        // Nothing this crate weighs fails to serialise; an estimate of zero only makes the
        // entry look smaller.
        Err(_) => 0,
    }
}

/// A writer that only counts.
struct Counter(usize);

impl Write for Counter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_lengths() {
        assert_eq!(text(""), 0);
        assert_eq!(text("abcd"), 4 + ALLOCATION_OVERHEAD);
        assert_eq!(flat::<f32>(&[0.0; 10]), 40 + ALLOCATION_OVERHEAD);
        let two = vec![vec![0.0f32; 8], vec![0.0f32; 8]];
        assert_eq!(vectors(&two), 2 * 24 + ALLOCATION_OVERHEAD + 2 * (32 + ALLOCATION_OVERHEAD));
        assert_eq!(json(&vec!["ab", "cd"]), 2 * "[\"ab\",\"cd\"]".len());
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_takes_the_arena_cap() {
        assert!(cap_arenas(64), "a cap above what this test process has is accepted");
    }
}
