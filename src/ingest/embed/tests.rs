use super::*;
use crate::llm::Embeddings;

/// Embeds a text as (length, number of spaces, 1), so results are easy to predict.
struct ShapeEmbedder;

impl Embedder for ShapeEmbedder {
    fn name(&self) -> &str {
        "shape"
    }
    async fn embed(&self, texts: &[String]) -> Result<Embeddings, llm::Error> {
        let vectors = texts
            .iter()
            .map(|text| vec![text.len() as f32, text.matches(' ').count() as f32, 1.0])
            .collect();
        Ok(Embeddings {
            vectors,
            usage: Usage { prompt_tokens: texts.len() as u64, completion_tokens: 0 },
        })
    }
}

fn provenance() -> StageProvenance {
    StageProvenance {
        stage: "embeddings".into(),
        sample_id: "conv-1".into(),
        model: "shape".into(),
        versions: BTreeMap::from([("rewrite".to_string(), "v1".to_string())]),
    }
}

#[tokio::test]
async fn vectors_are_normalised_and_survive_a_round_trip() {
    let texts = UnitTexts {
        sentence_ids: vec!["D1:1-1".into()],
        topic_ids: vec!["D1:t1".into()],
        texts: vec!["a b".into(), "abcd".into()],
    };
    let embedded = embed_texts(&ShapeEmbedder, &texts.texts).await.unwrap();
    assert_eq!(embedded.dims, 3);
    let norm: f32 = embedded.vectors[..3].iter().map(|v| v * v).sum();
    assert!((norm - 1.0).abs() < 1e-6);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("conv-1_embedding.bin");
    let planned =
        PlannedUnit { key: "session_1".into(), first_session: 1, input_hash: texts.input_hash() };
    let (mut cache, _) = EmbeddingStageCache::open(&path, provenance()).unwrap();
    cache.record_unit(&planned, &texts, embedded.clone()).await.unwrap();
    let questions = embed_texts(&ShapeEmbedder, &["who?".to_string()]).await.unwrap();
    cache.record_questions(vec!["conv-1:q1".into()], "qh".into(), questions).await.unwrap();

    let (cache, notices) = EmbeddingStageCache::open(&path, provenance()).unwrap();
    assert!(notices.is_empty());
    assert!(cache.unit_done(&planned));
    assert!(cache.questions_done("qh"));
    let all = cache.to_embeddings();
    assert_eq!(all.sentences["D1:1-1"], embedded.vectors[..3]);
    assert_eq!(all.topics["D1:t1"], embedded.vectors[3..]);
    assert_eq!(all.questions.len(), 1);
    assert_eq!(all.dims, 3);
}

#[tokio::test]
async fn a_stale_or_truncated_file_is_noticed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.bin");
    let (mut cache, _) = EmbeddingStageCache::open(&path, provenance()).unwrap();
    let embedded = embed_texts(&ShapeEmbedder, &["x".to_string()]).await.unwrap();
    cache.record_questions(vec!["q".into()], "qh".into(), embedded).await.unwrap();

    let mut newer = provenance();
    newer.versions.insert("rewrite".into(), "v2".into());
    let (cache, notices) = EmbeddingStageCache::open(&path, newer).unwrap();
    assert!(!cache.questions_done("qh"));
    assert!(
        notices[0].contains("prompt `rewrite` version v1, the current version is v2"),
        "{notices:?}"
    );

    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 2]).unwrap();
    let error = EmbeddingStageCache::open(&path, provenance()).unwrap_err();
    assert!(format!("{error:#}").contains("found 10 bytes"), "{error:#}");
}

#[tokio::test]
async fn a_wrong_vector_count_is_an_error() {
    struct Short;
    impl Embedder for Short {
        fn name(&self) -> &str {
            "short"
        }
        async fn embed(&self, _: &[String]) -> Result<Embeddings, llm::Error> {
            Ok(Embeddings { vectors: vec![vec![1.0]], usage: Usage::default() })
        }
    }
    let error = embed_texts(&Short, &["a".to_string(), "b".to_string()]).await.unwrap_err();
    assert_eq!(error.to_string(), "embedder returned 1 vectors for 2 texts");
}
