//! A content-addressed on-disk cache of text embeddings, one file per bucket (conversation).
//!
//! Files live at `data/<dataset>/embedding/<embedder-name>/<bucket>.bin` and map the SHA-256 of
//! a text to its vector, so a change of unit-text options only adds entries and a rerun embeds
//! nothing. Writes go to a temporary file in the same directory that is then renamed over the
//! old one, so an interrupted run never leaves a truncated cache; deleting the directory is
//! always safe.
//!
//! Format (little-endian): the magic `MRGEMB01`, `u32` dimensions, `u32` entry count, then per
//! entry 32 bytes of SHA-256 and `dims` `f32` values.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use sha2::{Digest, Sha256};

use crate::llm::Embedder;

const MAGIC: &[u8; 8] = b"MRGEMB01";

/// Embedding cache of one embedder.
#[derive(Debug, Clone)]
pub struct TextVectorCache {
    dir: PathBuf,
}

type Key = [u8; 32];

impl TextVectorCache {
    /// The cache of `embedder_name` for `dataset` under `data_dir`
    /// (`<data_dir>/<dataset>/embedding/<embedder_name>`).
    pub fn new(data_dir: &Path, dataset: &str, embedder_name: &str) -> Self {
        Self { dir: data_dir.join(dataset).join("embedding").join(embedder_name) }
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Vectors of `texts` in order: cached ones read from the bucket file, the others computed
    /// by `embed` (called once, with the distinct missing texts) and written back. Returns the
    /// vectors and how many texts had to be embedded.
    pub fn get_or_embed(
        &self,
        bucket: &str,
        texts: &[String],
        embed: impl FnOnce(&[String]) -> anyhow::Result<Vec<Vec<f32>>>,
    ) -> anyhow::Result<(Vec<Vec<f32>>, usize)> {
        let mut lookup = self.lookup(bucket, texts)?;
        if !lookup.missing.is_empty() {
            let vectors = embed(&lookup.missing)?;
            self.fill(&mut lookup, vectors)?;
        }
        lookup.finish(texts)
    }

    /// [`TextVectorCache::get_or_embed`] for long jobs: the missing texts are embedded `batch`
    /// at a time, `progress` hears how many after each batch, and the bucket is written every
    /// `flush_every` (and when the job ends, fails or stops), so an interrupted run keeps what
    /// it embedded. Returns `None`, after writing what was done, once `stop` is set.
    pub fn get_or_embed_batched(
        &self,
        bucket: &str,
        texts: &[String],
        batching: Batching<'_>,
        mut embed: impl FnMut(&[String]) -> anyhow::Result<Vec<Vec<f32>>>,
        mut progress: impl FnMut(usize),
    ) -> anyhow::Result<Option<(Vec<Vec<f32>>, usize)>> {
        let mut lookup = self.lookup(bucket, texts)?;
        let mut last_flush = Instant::now();
        let mut unwritten = false;
        for (batch, keys) in lookup
            .missing
            .chunks(batching.size.max(1))
            .zip(lookup.missing_keys.chunks(batching.size.max(1)))
        {
            if batching.stop.load(Ordering::Relaxed) {
                if unwritten {
                    write_bucket(&lookup.path, &lookup.entries)?;
                }
                return Ok(None);
            }
            let vectors = match embed(batch) {
                Ok(vectors) if vectors.len() == batch.len() => vectors,
                outcome => {
                    if unwritten {
                        write_bucket(&lookup.path, &lookup.entries)?;
                    }
                    let vectors = outcome?;
                    anyhow::bail!(
                        "embedder returned {} vectors for {} texts",
                        vectors.len(),
                        batch.len()
                    );
                }
            };
            for (key, vector) in keys.iter().zip(vectors) {
                lookup.entries.insert(*key, vector);
            }
            unwritten = true;
            progress(batch.len());
            if last_flush.elapsed() >= batching.flush_every {
                write_bucket(&lookup.path, &lookup.entries)?;
                last_flush = Instant::now();
                unwritten = false;
            }
        }
        if unwritten {
            write_bucket(&lookup.path, &lookup.entries)?;
        }
        lookup.finish(texts).map(Some)
    }

    /// [`TextVectorCache::get_or_embed`] for async callers, embedding misses with `embedder`.
    pub async fn get_or_embed_with<E: Embedder>(
        &self,
        bucket: &str,
        texts: &[String],
        embedder: &E,
    ) -> anyhow::Result<(Vec<Vec<f32>>, usize)> {
        let mut lookup = self.lookup(bucket, texts)?;
        if !lookup.missing.is_empty() {
            let embeddings = embedder.embed(&lookup.missing).await.context("embedding texts")?;
            self.fill(&mut lookup, embeddings.vectors)?;
        }
        lookup.finish(texts)
    }

    fn lookup(&self, bucket: &str, texts: &[String]) -> anyhow::Result<Lookup> {
        let path = self.bucket_path(bucket);
        let entries = read_bucket(&path)?;
        let mut missing: Vec<String> = Vec::new();
        let mut missing_keys: Vec<Key> = Vec::new();
        for text in texts {
            let key = key(text);
            if !entries.contains_key(&key) && !missing_keys.contains(&key) {
                missing.push(text.clone());
                missing_keys.push(key);
            }
        }
        Ok(Lookup { path, entries, missing, missing_keys })
    }

    fn fill(&self, lookup: &mut Lookup, vectors: Vec<Vec<f32>>) -> anyhow::Result<()> {
        anyhow::ensure!(
            vectors.len() == lookup.missing.len(),
            "embedder returned {} vectors for {} texts",
            vectors.len(),
            lookup.missing.len()
        );
        for (key, vector) in lookup.missing_keys.iter().zip(vectors) {
            lookup.entries.insert(*key, vector);
        }
        write_bucket(&lookup.path, &lookup.entries)
    }

    fn bucket_path(&self, bucket: &str) -> PathBuf {
        let safe: String = bucket
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
            .collect();
        self.dir.join(format!("{safe}.bin"))
    }
}

/// How [`TextVectorCache::get_or_embed_batched`] splits and saves its work.
#[derive(Debug, Clone, Copy)]
pub struct Batching<'a> {
    /// Texts per embedder call.
    pub size: usize,
    /// Write the bucket at least this often while embedding.
    pub flush_every: Duration,
    /// Set to stop after the batch in flight (what was embedded is written first).
    pub stop: &'a AtomicBool,
}

/// A bucket read from disk and the texts it lacks.
struct Lookup {
    path: PathBuf,
    entries: HashMap<Key, Vec<f32>>,
    missing: Vec<String>,
    missing_keys: Vec<Key>,
}

impl Lookup {
    fn finish(self, texts: &[String]) -> anyhow::Result<(Vec<Vec<f32>>, usize)> {
        let vectors = texts
            .iter()
            .map(|text| {
                self.entries.get(&key(text)).cloned().context("embedding missing after cache fill")
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok((vectors, self.missing.len()))
    }
}

fn key(text: &str) -> Key {
    Sha256::digest(text.as_bytes()).into()
}

fn read_bucket(path: &Path) -> anyhow::Result<HashMap<Key, Vec<f32>>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
    };
    let corrupt =
        || anyhow::anyhow!("embedding cache {} is corrupt; delete it to rebuild", path.display());
    if bytes.len() < 16 || &bytes[..8] != MAGIC {
        return Err(corrupt());
    }
    let read_u32 = |at: usize| {
        u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize
    };
    let dims = read_u32(8);
    let count = read_u32(12);
    let entry_size = 32 + 4 * dims;
    if bytes.len() != 16 + count * entry_size {
        return Err(corrupt());
    }
    let mut entries = HashMap::with_capacity(count);
    for entry in bytes[16..].chunks_exact(entry_size) {
        let mut key = [0u8; 32];
        key.copy_from_slice(&entry[..32]);
        let vector = entry[32..]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect::<Vec<f32>>();
        entries.insert(key, vector);
    }
    Ok(entries)
}

fn write_bucket(path: &Path, entries: &HashMap<Key, Vec<f32>>) -> anyhow::Result<()> {
    let dir = path.parent().context("cache path has no parent")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let dims = entries.values().next().map_or(0, Vec::len);
    anyhow::ensure!(
        entries.values().all(|v| v.len() == dims),
        "vectors of different dimensions in one cache bucket"
    );
    // Sorted by key so the file content does not depend on hash-map order.
    let mut sorted: Vec<(&Key, &Vec<f32>)> = entries.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut bytes = Vec::with_capacity(16 + sorted.len() * (32 + 4 * dims));
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(dims as u32).to_le_bytes());
    bytes.extend_from_slice(&(sorted.len() as u32).to_le_bytes());
    for (key, vector) in sorted {
        bytes.extend_from_slice(key);
        for value in vector {
            bytes.extend_from_slice(&value.to_le_bytes());
        }
    }
    crate::fsutil::write_atomic(path, &bytes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn embeds_only_missing_texts_and_survives_a_reload() {
        let dir = tempfile::tempdir().unwrap();
        let cache = TextVectorCache::new(dir.path(), "locomo", "fake");
        let fake = |texts: &[String]| Ok(texts.iter().map(|t| vec![t.len() as f32, 1.0]).collect());
        let texts = vec!["a".to_string(), "bb".to_string(), "a".to_string()];
        let (vectors, embedded) = cache.get_or_embed("conv-1", &texts, fake).unwrap();
        assert_eq!(embedded, 2);
        assert_eq!(vectors, vec![vec![1.0, 1.0], vec![2.0, 1.0], vec![1.0, 1.0]]);
        let more = vec!["bb".to_string(), "ccc".to_string()];
        let (vectors, embedded) = cache.get_or_embed("conv-1", &more, fake).unwrap();
        assert_eq!((embedded, vectors[1].clone()), (1, vec![3.0, 1.0]));
        let (_, embedded) = cache
            .get_or_embed("conv-1", &texts, |_| -> anyhow::Result<Vec<Vec<f32>>> {
                panic!("cached")
            })
            .unwrap();
        assert_eq!(embedded, 0);
        assert!(dir.path().join("locomo/embedding/fake/conv-1.bin").is_file());
    }

    #[test]
    fn an_interrupted_batched_run_keeps_what_it_embedded() {
        let dir = tempfile::tempdir().unwrap();
        let cache = TextVectorCache::new(dir.path(), "LM", "fake");
        let texts: Vec<String> = (0..10).map(|i| format!("text {i}")).collect();
        let never = AtomicBool::new(false);
        let batching = Batching { size: 3, flush_every: Duration::from_secs(3600), stop: &never };
        // The third batch fails: the first two (6 texts) must be on disk even though the flush
        // interval never came round.
        let mut calls = 0;
        let failing = |batch: &[String]| {
            calls += 1;
            anyhow::ensure!(calls < 3, "embedder died");
            Ok(batch.iter().map(|t| vec![t.len() as f32]).collect())
        };
        let err = cache.get_or_embed_batched("q1", &texts, batching, failing, |_| {}).unwrap_err();
        assert!(err.to_string().contains("embedder died"));
        let mut embedded = Vec::new();
        let (_, count) = cache
            .get_or_embed("q1", &texts, |missing| {
                embedded.extend_from_slice(missing);
                Ok(missing.iter().map(|t| vec![t.len() as f32]).collect())
            })
            .unwrap();
        assert_eq!((count, embedded), (4, texts[6..].to_vec()));

        // A stop request ends the run after the batch in flight, with that batch written.
        let stop = AtomicBool::new(false);
        let batching = Batching { size: 2, flush_every: Duration::from_secs(3600), stop: &stop };
        let mut seen = 0;
        let fresh: Vec<String> = (0..6).map(|i| format!("fresh {i}")).collect();
        let outcome = cache
            .get_or_embed_batched(
                "q2",
                &fresh,
                batching,
                |batch| {
                    stop.store(true, Ordering::Relaxed);
                    Ok(batch.iter().map(|_| vec![1.0]).collect())
                },
                |n| seen += n,
            )
            .unwrap();
        assert!(outcome.is_none());
        assert_eq!(seen, 2);
        let (_, count) =
            cache.get_or_embed("q2", &fresh, |m| Ok(vec![vec![1.0]; m.len()])).unwrap();
        assert_eq!(count, 4, "the first batch was kept");
    }

    #[test]
    fn a_corrupt_bucket_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let cache = TextVectorCache::new(dir.path(), "locomo", "fake");
        std::fs::create_dir_all(cache.dir()).unwrap();
        std::fs::write(cache.dir().join("x.bin"), b"nonsense").unwrap();
        let err = cache.get_or_embed("x", &["a".to_string()], |_| Ok(vec![vec![0.0]])).unwrap_err();
        assert!(err.to_string().contains("corrupt"));
    }
}
