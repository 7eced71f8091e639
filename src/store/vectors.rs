//! The form the store keeps vectors in (schema version 12): each row as one little-endian `f32`
//! scale followed by one signed byte per dimension, the value being `byte × scale`. A row of
//! `d` dimensions takes `d + 4` bytes instead of `4d` (a quarter, plus the scale), which is what
//! brings a stored message under 8 KiB at 1,536 dimensions (`benches/scale_serve.rs`).
//!
//! A row is a [`CompactVector`]: the scale is its largest magnitude over 127 (symmetric, so
//! zero stays exactly zero and the largest component is exact), and each component is rounded
//! to the nearest step: the error of a component is at most half a step, `max|x| / 254`. For
//! the L2-normalised vectors the embedders return, a similarity moves by about 10⁻³ at most,
//! and the ranking change was measured on the retrieval benchmark (`mragent retrieve
//! --stored-vectors`, docs/retrieval.md).
//!
//! Written by hand rather than taken from a crate: it is two loops, and the crates that
//! quantise (usearch's own copy, candle's quantised tensors) keep formats of their own that the
//! store must not depend on to read its rows back.
//!
//! Version 11 stores held plain `f32` rows; [`compact_f32_rows`] converts them in place during
//! the migration (`schema::migrate_to`, `schema_pg::migrate`).

use super::StoreError;
use super::db::{Statements, params};
use crate::retrieval::vector::CompactVector;

/// Bytes a row takes on top of its dimensions (the scale).
const SCALE_BYTES: usize = 4;

/// Why a vector cannot be stored.
fn refuse(why: String) -> StoreError {
    StoreError::Corrupt(why)
}

/// Appends `row` in the compact form; refuses a row of another length or a non-finite value
/// (an embedding reply that is not a vector: never stored as garbage).
fn push_row(row: &[f32], dims: usize, bytes: &mut Vec<u8>) -> Result<(), StoreError> {
    if row.len() != dims {
        return Err(refuse(format!("vector of {} values, expected {dims}", row.len())));
    }
    let compact = CompactVector::new(row).map_err(|error| refuse(error.to_string()))?;
    bytes.extend(compact.scale.to_le_bytes());
    bytes.extend(compact.values.iter().map(|step| step.to_le_bytes()[0]));
    Ok(())
}

/// `rows` of `dims` values each, in the compact form.
pub(super) fn encode_vectors<'a>(
    rows: impl Iterator<Item = &'a Vec<f32>>,
    dims: usize,
) -> Result<Vec<u8>, StoreError> {
    let mut bytes = Vec::new();
    for row in rows {
        push_row(row, dims, &mut bytes)?;
    }
    Ok(bytes)
}

/// The rows of `bytes` (compact rows of `dims` dimensions); `None` when the length does not
/// divide into whole rows (an empty blob is no rows).
pub(super) fn decode_vectors(bytes: &[u8], dims: usize) -> Option<Vec<Vec<f32>>> {
    if bytes.is_empty() {
        return Some(Vec::new());
    }
    let width = dims + SCALE_BYTES;
    if dims == 0 || !bytes.len().is_multiple_of(width) {
        return None;
    }
    let rows = bytes.chunks_exact(width).map(|row| {
        let (scale, values) = row.split_at(SCALE_BYTES);
        let scale = f32::from_le_bytes([scale[0], scale[1], scale[2], scale[3]]);
        let values = values.iter().map(|&byte| i8::from_le_bytes([byte])).collect();
        CompactVector { scale, values }.to_f32()
    });
    Some(rows.collect())
}

/// `row` as the store gives it back: what a ranking over stored vectors sees.
pub(crate) fn round_trip(row: &[f32]) -> Result<Vec<f32>, StoreError> {
    let compact = CompactVector::new(row).map_err(|error| refuse(error.to_string()))?;
    Ok(compact.to_f32())
}

/// A blob of plain little-endian `f32` rows (schema version 11 and before) in the compact
/// form; `None` when it does not divide into rows of `dims`.
pub(super) fn compact_f32_rows(bytes: &[u8], dims: usize) -> Option<Result<Vec<u8>, StoreError>> {
    if bytes.is_empty() {
        return Some(Ok(Vec::new()));
    }
    if dims == 0 || !bytes.len().is_multiple_of(4 * dims) {
        return None;
    }
    let values: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|chunk| f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]))
        .collect();
    let rows: Vec<Vec<f32>> = values.chunks(dims).map(<[f32]>::to_vec).collect();
    Some(encode_vectors(rows.iter(), dims))
}

/// The tables and blob columns that hold vectors, each with its key columns and `dims`.
const STORED: [(&str, [&str; 2], &[&str]); 2] = [
    ("session_outputs", ["conversation_id", "session_number"], &["vectors", "units"]),
    ("embedder_words", ["embedder", "word"], &["vector"]),
];

/// Converts every vector of a version-11 database (plain `f32` rows) to the compact form, in
/// the migration's transaction: the keys are read first, then one row at a time is read,
/// converted and written back, so a large store is never held whole. Returns the rows
/// converted. A blob that is not whole rows of its `dims` stops the migration (the transaction
/// rolls back and the database keeps version 11): nothing is guessed.
pub(super) fn compact_stored_vectors(db: &dyn Statements) -> Result<u64, StoreError> {
    let mut converted = 0;
    for (table, [first, second], columns) in STORED {
        let keys = db.all(&format!("SELECT {first}, {second} FROM {table}"), params![])?;
        let read = format!(
            "SELECT dims, {} FROM {table} WHERE {first} = ?1 AND {second} = ?2",
            columns.join(", ")
        );
        let assignments: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(i, column)| format!("{column} = ?{}", i + 3))
            .collect();
        let write = format!(
            "UPDATE {table} SET {} WHERE {first} = ?1 AND {second} = ?2",
            assignments.join(", ")
        );
        for key in keys {
            let (one, two) = (key.0[0].clone(), key.0[1].clone());
            let rows = db.all(&read, &[one.clone(), two.clone()])?;
            let Some(row) = rows.first() else { continue };
            let dims = usize::try_from(row.get::<i64>(0)?)
                .map_err(|_| refuse(format!("{table}: negative dims")))?;
            let mut values = vec![one, two];
            for index in 1..=columns.len() {
                let bytes: Vec<u8> = row.get(index)?;
                let compact = compact_f32_rows(&bytes, dims).ok_or_else(|| {
                    refuse(format!(
                        "{table}: a blob of {} bytes is not rows of {dims}",
                        bytes.len()
                    ))
                })??;
                values.push(super::db::Value::Blob(compact));
            }
            db.run(&write, &values)?;
            converted += 1;
        }
    }
    Ok(converted)
}

#[cfg(test)]
pub(super) mod tests {
    use rand::{Rng as _, SeedableRng as _};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// `rows` as plain `f32` bytes: what a version-11 store holds.
    pub(in crate::store) fn f32_blob(rows: &[Vec<f32>]) -> Vec<u8> {
        rows.iter().flatten().flat_map(|value| value.to_le_bytes()).collect()
    }

    fn unit(rng: &mut ChaCha8Rng, dims: usize) -> Vec<f32> {
        let raw: Vec<f32> = (0..dims).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        crate::retrieval::vector::unit_length(raw)
    }

    #[test]
    fn every_component_comes_back_within_half_a_step_and_a_row_takes_dims_plus_four_bytes() {
        let mut rng = ChaCha8Rng::seed_from_u64(41);
        for case in 0..300 {
            let dims = [1, 2, 3, 384, 1536][case % 5];
            let spread = [1e-6f32, 1.0, 3.0e4][case % 3];
            let row: Vec<f32> = (0..dims).map(|_| rng.random_range(-spread..spread)).collect();
            let bytes = encode_vectors(std::iter::once(&row), dims).unwrap();
            assert_eq!(bytes.len(), dims + 4);
            let back = decode_vectors(&bytes, dims).unwrap().pop().unwrap();
            let largest = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let half_step = largest / 254.0 * 1.0001;
            for (x, y) in row.iter().zip(&back) {
                assert!(
                    (x - y).abs() <= half_step,
                    "{x} came back as {y} (half a step {half_step})"
                );
            }
            // Signs survive (a component under half a step may become zero).
            for (x, y) in row.iter().zip(&back) {
                assert!(x.signum() == y.signum() || *y == 0.0, "{x} became {y}");
            }
        }
    }

    #[test]
    fn similarities_of_unit_vectors_move_by_less_than_a_thousandth() {
        let mut rng = ChaCha8Rng::seed_from_u64(12);
        for dims in [384, 1536] {
            for _ in 0..200 {
                let (a, b) = (unit(&mut rng, dims), unit(&mut rng, dims));
                let exact = crate::retrieval::vector::dot(&a, &b);
                let stored = crate::retrieval::vector::dot(&round_trip(&a).unwrap(), &b);
                assert!((exact - stored).abs() < 1e-3, "{dims}: {exact} against {stored}");
            }
        }
    }

    #[test]
    fn zero_rows_and_empty_blobs_are_exact_and_bad_rows_are_refused() {
        assert_eq!(round_trip(&[0.0, 0.0, -0.0]).unwrap(), vec![0.0, 0.0, 0.0]);
        assert_eq!(decode_vectors(&[], 7), Some(Vec::new()));
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            assert!(encode_vectors(std::iter::once(&vec![1.0, bad]), 2).is_err());
        }
        assert!(encode_vectors(std::iter::once(&vec![1.0, 2.0]), 3).is_err());
        // A blob that is not whole rows is refused, never read short.
        let bytes = encode_vectors([vec![1.0, 2.0], vec![3.0, 4.0]].iter(), 2).unwrap();
        assert_eq!(bytes.len(), 12);
        assert_eq!(decode_vectors(&bytes[..11], 2), None);
        assert_eq!(decode_vectors(&bytes, 0), None);
        assert_eq!(decode_vectors(&bytes, 2).unwrap().len(), 2);
    }

    #[test]
    fn an_f32_blob_of_the_previous_schema_converts_to_the_rows_it_held() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let rows: Vec<Vec<f32>> = (0..5).map(|_| unit(&mut rng, 384)).collect();
        let converted = compact_f32_rows(&f32_blob(&rows), 384).unwrap().unwrap();
        assert_eq!(converted, encode_vectors(rows.iter(), 384).unwrap());
        assert_eq!(compact_f32_rows(&[], 384).unwrap().unwrap(), Vec::<u8>::new());
        assert!(compact_f32_rows(&[0; 10], 384).is_none());
    }
}
