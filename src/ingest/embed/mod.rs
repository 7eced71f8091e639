//! Stage 3 — embeddings of rewritten sentences, topics and questions (behaviour of §6 of the
//! reference), through the `llm::Embedder` trait, and their per-sample cache.
//!
//! Texts have line breaks turned into spaces and are trimmed before embedding, as the reference
//! does; vectors are L2-normalised before they are stored, so a dot product is a cosine.
//!
//! Cache: `data/<dataset>/embedding/<embedder>/<sample>_embedding.bin`, one file per sample,
//! rewritten atomically after each unit (so a crash keeps every finished unit). Layout: the
//! 8-byte magic `MRAGEMB1`, a little-endian `u64` header length, a JSON header (provenance,
//! dimension, and per unit its ids and input hash, then the questions' ids), then every vector
//! as little-endian `f32`, in header order. The format is hand-written because it is this small:
//! a JSON header plus raw floats needs no serialisation crate, and JSON numbers would triple the
//! size of 3072-dimensional vectors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::dataset::Question;
use crate::ingest::cache::{FORMAT, PlannedUnit, StageProvenance, mismatch};
use crate::ingest::unit::INPUT_HASH_BYTES;
use crate::llm::{self, Embedder, Usage};
use crate::memory::input::SessionRewrite;
use crate::text::short_hash;

/// File magic; the trailing digit is the layout version.
const MAGIC: &[u8; 8] = b"MRAGEMB1";

/// The embeddings of one sample, by id, in dialogue (and question) order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SampleEmbeddings {
    /// Embedder name.
    pub embedder: String,
    /// Vector dimension (0 when nothing was embedded).
    pub dims: usize,
    /// Sentence id → unit vector.
    pub sentences: IndexMap<String, Vec<f32>>,
    /// Topic id (`D<n>:t<k>`) → unit vector.
    pub topics: IndexMap<String, Vec<f32>>,
    /// Question id → unit vector.
    pub questions: IndexMap<String, Vec<f32>>,
}

/// What stage 3 embeds for one unit: its sentences then its topics.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UnitTexts {
    /// Sentence ids, in order.
    pub(crate) sentence_ids: Vec<String>,
    /// Topic ids, in order.
    pub(crate) topic_ids: Vec<String>,
    /// Sentence texts then topic texts, cleaned.
    pub(crate) texts: Vec<String>,
}

impl UnitTexts {
    /// The texts of a unit's rewrite.
    pub(crate) fn of(record: &SessionRewrite) -> Self {
        let sentence_ids = record.sentences.iter().map(|sentence| sentence.id.clone()).collect();
        let topic_ids = record.topics.iter().map(|topic| topic.id.clone()).collect();
        let texts = record
            .sentences
            .iter()
            .map(|sentence| clean(&sentence.text))
            .chain(record.topics.iter().map(|topic| clean(&topic.text)))
            .collect();
        Self { sentence_ids, topic_ids, texts }
    }

    /// Hash of ids and texts; cached vectors are reused only for identical input.
    pub(crate) fn input_hash(&self) -> String {
        hash_of(&(&self.sentence_ids, &self.topic_ids, &self.texts))
    }
}

/// The question ids and cleaned texts of a sample, and their hash.
pub(crate) fn question_texts(questions: &[Question]) -> (Vec<String>, Vec<String>, String) {
    let ids: Vec<String> = questions.iter().map(|question| question.id.clone()).collect();
    let texts: Vec<String> = questions.iter().map(|question| clean(&question.question)).collect();
    let hash = hash_of(&(&ids, &texts));
    (ids, texts, hash)
}

fn hash_of(value: &impl Serialize) -> String {
    // Serialising plain vectors of strings cannot fail; an empty hash would only force a rebuild.
    short_hash(&serde_json::to_vec(value).unwrap_or_default(), INPUT_HASH_BYTES)
}

/// Line breaks become spaces; surrounding whitespace goes.
fn clean(text: &str) -> String {
    text.replace(['\r', '\n'], " ").trim().to_string()
}

/// Vectors from one embedding pass: flattened rows, their dimension and the cost.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Embedded {
    /// Row-major, `texts.len() × dims`, each row L2-normalised.
    pub(crate) vectors: Vec<f32>,
    /// Dimension.
    pub(crate) dims: usize,
    /// Tokens billed.
    pub(crate) usage: Usage,
}

/// Why an embedding pass failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EmbedError {
    /// The embedder failed.
    #[error(transparent)]
    Llm(#[from] llm::Error),
    /// The embedder answered with the wrong number or shape of vectors.
    #[error("embedder returned {0}")]
    Shape(String),
}

/// Embed `texts` (none: no call) and normalise the vectors.
pub(crate) async fn embed_texts<E: Embedder>(
    embedder: &E,
    texts: &[String],
) -> Result<Embedded, EmbedError> {
    if texts.is_empty() {
        return Ok(Embedded { vectors: Vec::new(), dims: 0, usage: Usage::default() });
    }
    let response = embedder.embed(texts).await?;
    if response.vectors.len() != texts.len() {
        return Err(EmbedError::Shape(format!(
            "{} vectors for {} texts",
            response.vectors.len(),
            texts.len()
        )));
    }
    let dims = response.vectors.first().map_or(0, Vec::len);
    if dims == 0 || response.vectors.iter().any(|vector| vector.len() != dims) {
        return Err(EmbedError::Shape("empty vectors or vectors of different lengths".into()));
    }
    let mut vectors = Vec::with_capacity(texts.len() * dims);
    for vector in &response.vectors {
        let norm = vector.iter().map(|value| value * value).sum::<f32>().sqrt();
        let scale = if norm > 0.0 { 1.0 / norm } else { 1.0 };
        vectors.extend(vector.iter().map(|value| value * scale));
    }
    Ok(Embedded { vectors, dims, usage: response.usage })
}

/// One unit's vectors as cached.
#[derive(Debug, Clone, PartialEq)]
struct EmbeddedUnits {
    header: UnitHeader,
    vectors: Vec<f32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct UnitHeader {
    unit: String,
    first_session: u32,
    input_hash: String,
    sentence_ids: Vec<String>,
    topic_ids: Vec<String>,
}

impl UnitHeader {
    fn rows(&self) -> usize {
        self.sentence_ids.len() + self.topic_ids.len()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct QuestionHeader {
    input_hash: String,
    question_ids: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
struct QuestionVectors {
    header: QuestionHeader,
    vectors: Vec<f32>,
}

#[derive(Debug, Serialize, Deserialize)]
struct FileHeader {
    format: u32,
    #[serde(flatten)]
    provenance: StageProvenance,
    dims: usize,
    units: Vec<UnitHeader>,
    questions: Option<QuestionHeader>,
}

/// An open embedding cache for one sample.
#[derive(Debug)]
pub(crate) struct EmbeddingStageCache {
    path: PathBuf,
    provenance: StageProvenance,
    dims: usize,
    units: BTreeMap<u32, EmbeddedUnits>,
    questions: Option<QuestionVectors>,
}

impl EmbeddingStageCache {
    /// Open the cache at `path`, keeping it only if it matches `provenance` (same rules and
    /// messages as the JSON stage caches).
    pub(crate) fn open(
        path: &Path,
        provenance: StageProvenance,
    ) -> anyhow::Result<(Self, Vec<String>)> {
        let mut cache = Self {
            path: path.to_path_buf(),
            provenance: provenance.clone(),
            dims: 0,
            units: BTreeMap::new(),
            questions: None,
        };
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok((cache, Vec::new()));
            }
            Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
        };
        let (header, floats) = decode(&bytes).with_context(|| {
            format!("cannot read the embedding cache (delete it to rebuild): {}", path.display())
        })?;
        if let Some(reason) = mismatch(header.format, &header.provenance, &provenance) {
            let notice = format!(
                "embedding cache {} is stale ({reason}): rebuilding the embedding stage",
                path.display()
            );
            return Ok((cache, vec![notice]));
        }
        cache.dims = header.dims;
        let mut offset = 0;
        for unit in header.units {
            let len = unit.rows() * header.dims;
            let vectors = floats[offset..offset + len].to_vec();
            offset += len;
            cache.units.insert(unit.first_session, EmbeddedUnits { header: unit, vectors });
        }
        if let Some(questions) = header.questions {
            let len = questions.question_ids.len() * header.dims;
            cache.questions = Some(QuestionVectors {
                header: questions,
                vectors: floats[offset..offset + len].to_vec(),
            });
        }
        Ok((cache, Vec::new()))
    }

    /// Whether `planned` (whose input hash is that of its [`UnitTexts`]) is cached.
    pub(crate) fn unit_done(&self, planned: &PlannedUnit) -> bool {
        self.units.get(&planned.first_session).is_some_and(|unit| {
            unit.header.unit == planned.key && unit.header.input_hash == planned.input_hash
        })
    }

    /// Whether the questions with hash `input_hash` are cached.
    pub(crate) fn questions_done(&self, input_hash: &str) -> bool {
        self.questions.as_ref().is_some_and(|questions| questions.header.input_hash == input_hash)
    }

    /// Drop units that are not in `plan`.
    pub(crate) fn retain_planned(&mut self, plan: &[PlannedUnit]) {
        self.units.retain(|first, unit| {
            plan.iter()
                .any(|planned| planned.first_session == *first && planned.key == unit.header.unit)
        });
    }

    /// Store a unit's vectors and write the file.
    pub(crate) async fn record_unit(
        &mut self,
        planned: &PlannedUnit,
        texts: &UnitTexts,
        embedded: Embedded,
    ) -> anyhow::Result<()> {
        self.adopt_dims(embedded.dims)?;
        let header = UnitHeader {
            unit: planned.key.clone(),
            first_session: planned.first_session,
            input_hash: planned.input_hash.clone(),
            sentence_ids: texts.sentence_ids.clone(),
            topic_ids: texts.topic_ids.clone(),
        };
        self.units
            .insert(planned.first_session, EmbeddedUnits { header, vectors: embedded.vectors });
        self.write().await
    }

    /// Store the questions' vectors and write the file.
    pub(crate) async fn record_questions(
        &mut self,
        ids: Vec<String>,
        input_hash: String,
        embedded: Embedded,
    ) -> anyhow::Result<()> {
        self.adopt_dims(embedded.dims)?;
        self.questions = Some(QuestionVectors {
            header: QuestionHeader { input_hash, question_ids: ids },
            vectors: embedded.vectors,
        });
        self.write().await
    }

    fn adopt_dims(&mut self, dims: usize) -> anyhow::Result<()> {
        if dims == 0 {
            return Ok(());
        }
        let stored =
            self.units.values().any(|unit| !unit.vectors.is_empty()) || self.questions.is_some();
        if stored && self.dims != 0 && self.dims != dims {
            bail!(
                "embedder `{}` returned {dims}-dimensional vectors, but {} holds {}-dimensional ones",
                self.provenance.model,
                self.path.display(),
                self.dims
            );
        }
        self.dims = dims;
        Ok(())
    }

    async fn write(&self) -> anyhow::Result<()> {
        let header = FileHeader {
            format: FORMAT,
            provenance: self.provenance.clone(),
            dims: self.dims,
            units: self.units.values().map(|unit| unit.header.clone()).collect(),
            questions: self.questions.as_ref().map(|questions| questions.header.clone()),
        };
        let floats = self
            .units
            .values()
            .map(|unit| unit.vectors.as_slice())
            .chain(self.questions.iter().map(|q| q.vectors.as_slice()));
        crate::fsutil::write_atomic_async(self.path.clone(), encode(&header, floats)?).await
    }

    /// Everything cached, by id.
    pub(crate) fn to_embeddings(&self) -> SampleEmbeddings {
        let mut out = SampleEmbeddings {
            embedder: self.provenance.model.clone(),
            dims: self.dims,
            ..SampleEmbeddings::default()
        };
        let dims = self.dims.max(1);
        for unit in self.units.values() {
            let mut rows = unit.vectors.chunks(dims);
            for id in &unit.header.sentence_ids {
                out.sentences
                    .insert(id.clone(), rows.next().map(<[f32]>::to_vec).unwrap_or_default());
            }
            for id in &unit.header.topic_ids {
                out.topics.insert(id.clone(), rows.next().map(<[f32]>::to_vec).unwrap_or_default());
            }
        }
        if let Some(questions) = &self.questions {
            for (id, row) in
                questions.header.question_ids.iter().zip(questions.vectors.chunks(dims))
            {
                out.questions.insert(id.clone(), row.to_vec());
            }
        }
        out
    }
}

fn encode<'a>(
    header: &FileHeader,
    floats: impl Iterator<Item = &'a [f32]>,
) -> anyhow::Result<Vec<u8>> {
    let header_json =
        serde_json::to_vec(header).context("serialising the embedding cache header")?;
    let mut bytes = Vec::with_capacity(16 + header_json.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(header_json.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&header_json);
    for slice in floats {
        for value in slice {
            bytes.extend_from_slice(&value.to_le_bytes());
        }
    }
    Ok(bytes)
}

/// The memory part of an embedding cache file's `bytes` (provenance, dimension, units and their
/// vectors) without the questions' vectors, so that an edited question leaves it unchanged;
/// `None` when the file cannot be read as an embedding cache.
pub fn memory_part(bytes: &[u8]) -> Option<Vec<u8>> {
    let (mut header, floats) = decode(bytes).ok()?;
    let rows: usize = header.units.iter().map(UnitHeader::rows).sum();
    header.questions = None;
    let mut memory = serde_json::to_vec(&header).ok()?;
    for value in floats.get(..rows * header.dims)? {
        memory.extend_from_slice(&value.to_le_bytes());
    }
    Some(memory)
}

fn decode(bytes: &[u8]) -> anyhow::Result<(FileHeader, Vec<f32>)> {
    if bytes.len() < 16 || &bytes[..8] != MAGIC {
        bail!("not an mragent embedding file (bad magic)");
    }
    let mut length = [0u8; 8];
    length.copy_from_slice(&bytes[8..16]);
    let header_len =
        usize::try_from(u64::from_le_bytes(length)).context("header length overflows")?;
    let header_end = 16usize
        .checked_add(header_len)
        .filter(|end| *end <= bytes.len())
        .context("truncated header")?;
    let header: FileHeader =
        serde_json::from_slice(&bytes[16..header_end]).context("bad header")?;
    let rows: usize = header.units.iter().map(UnitHeader::rows).sum::<usize>()
        + header.questions.as_ref().map_or(0, |questions| questions.question_ids.len());
    let body = &bytes[header_end..];
    if body.len() != rows * header.dims * 4 {
        bail!("expected {rows} vectors of {} floats, found {} bytes", header.dims, body.len());
    }
    let floats = body
        .chunks_exact(4)
        .map(|chunk| f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]))
        .collect();
    Ok((header, floats))
}

#[cfg(test)]
mod tests;
