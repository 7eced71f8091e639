use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::llm::{Embeddings, Usage};
use crate::retrieval::index::Method;
use crate::retrieval::units::TurnUnit;

/// Embeds a text as a unit vector from its bytes; counts the texts it was asked for.
#[derive(Default)]
struct CountingEmbedder {
    texts: AtomicUsize,
}

impl Embedder for CountingEmbedder {
    fn name(&self) -> &str {
        "counting"
    }
    async fn embed(&self, texts: &[String]) -> Result<Embeddings, crate::llm::Error> {
        self.texts.fetch_add(texts.len(), Ordering::SeqCst);
        let vectors = texts
            .iter()
            .map(|text| {
                let sum: f32 = text.bytes().map(f32::from).sum();
                let v = [sum.sin(), sum.cos(), text.len() as f32 / 100.0];
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.iter().map(|x| x / norm).collect()
            })
            .collect();
        Ok(Embeddings { vectors, usage: Usage::default() })
    }
}

fn sessions() -> Vec<SessionUnits> {
    (1..=3)
        .map(|n| SessionUnits {
            session_id: format!("D{n}"),
            date: Some(format!("day {n}")),
            turns: (1..=3)
                .map(|t| TurnUnit {
                    dia_id: format!("D{n}:{t}"),
                    speaker: "Ann".into(),
                    text: format!("Ann: turn {t} of session {n} about topic {}", n * t),
                })
                .collect(),
            summary: None,
            keywords: None,
        })
        .collect()
}

#[tokio::test]
async fn an_index_is_built_once_then_loaded_and_rebuilt_when_stale_or_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let cache = IndexFileCache::new(dir.path(), "locomo", "counting");
    let vectors = TextVectorCache::new(dir.path(), "locomo", "counting");
    let embedder = CountingEmbedder::default();
    let options = IndexOptions::default();
    let load = |sessions| cache.load_or_build("conv-1", sessions, &embedder, &vectors, options);

    let (built, source) = load(sessions()).await.unwrap();
    assert_eq!(source, IndexSource::Built);
    let path = cache.path("conv-1");
    let written = std::fs::read(&path).unwrap();
    let (loaded, source) = load(sessions()).await.unwrap();
    assert_eq!(source, IndexSource::Loaded);
    assert_eq!(std::fs::read(&path).unwrap(), written, "a load does not rewrite the file");
    assert_eq!(
        serde_json::to_string(&loaded).unwrap(),
        serde_json::to_string(&built).unwrap(),
        "the loaded index is the built one"
    );
    let query = embedder.embed(&["topic 4".to_string()]).await.unwrap().vectors.remove(0);
    assert_eq!(
        built.query("topic 4", &query, 2).unwrap(),
        loaded.query("topic 4", &query, 2).unwrap()
    );

    // Other units: stale, rebuilt.
    let mut changed = sessions();
    changed[0].turns[0].text.push_str(" (edited)");
    assert_eq!(load(changed).await.unwrap().1, IndexSource::Built);
    // A corrupt file: rebuilt and replaced.
    std::fs::write(&path, b"{\"key\": \"x\", \"ind").unwrap();
    assert_eq!(load(sessions()).await.unwrap().1, IndexSource::Built);
    assert_eq!(load(sessions()).await.unwrap().1, IndexSource::Loaded);
    // Other options: stale.
    let mut other = IndexOptions::default();
    other.memgas.n_seeds += 1;
    let (_, source) =
        cache.load_or_build("conv-1", sessions(), &embedder, &vectors, other).await.unwrap();
    assert_eq!(source, IndexSource::Built);
}

#[tokio::test]
async fn a_loaded_index_rebuilds_its_approximate_turn_index() {
    let dir = tempfile::tempdir().unwrap();
    let cache = IndexFileCache::new(dir.path(), "locomo", "counting");
    let vectors = TextVectorCache::new(dir.path(), "locomo", "counting");
    let embedder = CountingEmbedder::default();
    let mut options = IndexOptions::default();
    options.ann.threshold = 5;
    let load = |options| cache.load_or_build("conv-1", sessions(), &embedder, &vectors, options);

    let (built, source) = load(options).await.unwrap();
    assert_eq!(source, IndexSource::Built);
    assert!(built.is_approximate(), "9 turns reach the threshold of 5");
    let (loaded, source) = load(options).await.unwrap();
    assert_eq!(source, IndexSource::Loaded);
    assert!(loaded.is_approximate(), "the ANN graph is rebuilt on load");
    let query = embedder.embed(&["topic 4".to_string()]).await.unwrap().vectors.remove(0);
    for method in [Method::Turn, Method::Fusion] {
        assert_eq!(
            built.rank(method, "topic 4", &query).unwrap(),
            loaded.rank(method, "topic 4", &query).unwrap()
        );
    }
    // Other ANN settings: stale, rebuilt.
    let (exact, source) = load(IndexOptions::default()).await.unwrap();
    assert_eq!(source, IndexSource::Built);
    assert!(!exact.is_approximate());
}
