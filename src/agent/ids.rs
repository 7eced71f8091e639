//! Evidence ids shared by retrieval, the loop's final answer and the result line; a leaf module
//! (it imports nothing from `agent`), so every other part of the engine may use it.
//!
//! Ids look like `D1:3-2`: dialogue 1, turn 3, its second event (sentence). The turn part
//! (`D1:3`) is the *origin*, the id the dataset's evidence lists use. Retrieval shows events as
//! `<id>:<text>` lines, or `Time:<date> <id>:<text>` on the date-window route.

/// `D1:3-2` → `D1:3`; ids without a `-<n>` suffix are returned unchanged.
pub fn origin_of(id: &str) -> &str {
    match id.rsplit_once('-') {
        Some((origin, suffix))
            if origin.contains(':')
                && !suffix.is_empty()
                && suffix.bytes().all(|b| b.is_ascii_digit()) =>
        {
            origin
        }
        _ => id,
    }
}

/// For `Time:<date> <id>:<text>` lines, the part from the id on.
pub fn line_id_of_dated(line: &str) -> &str {
    match line.strip_prefix("Time:") {
        Some(rest) => rest.split_once(' ').map_or(rest, |(_, tail)| tail),
        None => line,
    }
}

/// The id part of an `id:text` line.
pub fn line_id(line: &str) -> &str {
    // Ids look like `D3:5-1`: the second `:` starts the text.
    let mut colons = line.match_indices(':').map(|(index, _)| index);
    match (colons.next(), colons.next()) {
        (Some(_), Some(second)) => &line[..second],
        _ => line,
    }
}
