//! Unit tests of [`MemoryIndex`] ranking and querying.

use super::*;
use crate::retrieval::units::TurnUnit;

/// A unit vector in 3-D pointing at `angle` in the x-y plane, tilted by `z`.
fn vector(angle: f32, z: f32) -> Vec<f32> {
    let v = [angle.cos(), angle.sin(), z];
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / norm).collect()
}

/// Session n (1-based) has turns with the given texts and angles.
fn session(n: usize, turns: &[(&str, f32)]) -> (SessionUnits, UnitVectors) {
    let units = SessionUnits {
        session_id: format!("D{n}"),
        date: Some(format!("day {n}")),
        turns: turns
            .iter()
            .enumerate()
            .map(|(i, (text, _))| TurnUnit {
                dia_id: format!("D{n}:{}", i + 1),
                speaker: "Ann".into(),
                text: format!("Ann: {text}"),
            })
            .collect(),
        summary: None,
        keywords: None,
    };
    let turn_vectors: Vec<Vec<f32>> = turns.iter().map(|(_, angle)| vector(*angle, 0.1)).collect();
    let session_vector = crate::retrieval::units::normalised_mean(&turn_vectors);
    (
        units,
        UnitVectors {
            session: session_vector,
            turns: turn_vectors,
            summary: None,
            keywords: None,
            hybrid: None,
        },
    )
}

fn index() -> MemoryIndex {
    let mut index = MemoryIndex::new(IndexOptions::default());
    let sessions = [
        session(1, &[("we talked about gardening tomatoes", 0.0), ("the weather was mild", 0.2)]),
        session(2, &[("my cat Pepper chased a mouse", 1.5), ("cats sleep a lot", 1.4)]),
        session(3, &[("I bought new running shoes", 3.0), ("marathon training starts", 3.1)]),
        session(4, &[("Pepper the cat got sick", 1.55), ("the vet was kind", 1.2)]),
    ];
    for (units, vectors) in sessions {
        index.add_session(units, vectors).unwrap();
    }
    index.set_test_word_vectors();
    index
}

fn session_order(ranking: &Ranking, index: &MemoryIndex) -> Vec<String> {
    ranking.sessions.iter().map(|hit| index.session_id(hit.index).to_string()).collect()
}

#[test]
fn dense_lexical_and_fused_rankings_find_the_matching_sessions() {
    let index = index();
    let query = vector(1.54, 0.1);
    let turn = index.rank(Method::Turn, "what happened to Pepper", &query).unwrap();
    assert_eq!(&session_order(&turn, &index)[..2], ["D4", "D2"]);
    let turns = turn.turns.as_ref().unwrap();
    assert_eq!(index.turn_id(turns[0].index), "D4:1");

    let lexical = index.rank(Method::Bm25, "running marathon", &query).unwrap();
    assert_eq!(session_order(&lexical, &index)[0], "D3");
    assert_eq!(index.turn_id(lexical.turns.as_ref().unwrap()[0].index), "D3:2");

    let fused = index.rank(Method::Fusion, "Pepper cat sick", &query).unwrap();
    assert_eq!(session_order(&fused, &index)[0], "D4");
    assert_eq!(fused.sessions.len(), 4);
    assert_eq!(fused.turns.as_ref().unwrap().len(), 8);
}

#[test]
fn memgas_ranks_by_pagerank_mass_with_router_weights() {
    let index = index();
    let ranking = index.rank(Method::Memgas, "", &vector(1.54, 0.1)).unwrap();
    assert_eq!(ranking.router_weights.len(), 2);
    let total: f64 = ranking.router_weights.iter().map(|(_, w)| w).sum();
    assert!((total - 1.0).abs() < 1e-12);
    let mut top_two = session_order(&ranking, &index)[..2].to_vec();
    top_two.sort();
    assert_eq!(top_two, ["D2", "D4"]);
    // All 12 nodes are seeds (fewer than α = 15), so with the research code's sum per session
    // PageRank mass sums to 1 over sessions.
    let mut options = IndexOptions::default();
    options.memgas.session_score = SessionAggregate::Sum;
    let mut summed = index;
    summed.set_query_options(&options);
    let ranking = summed.rank(Method::Memgas, "", &vector(1.54, 0.1)).unwrap();
    let mass: f64 = ranking.sessions.iter().map(|hit| hit.score).sum();
    assert!((mass - 1.0).abs() < 1e-9);
}

#[test]
fn missing_units_and_bad_vectors_are_errors() {
    let mut index = index();
    assert_eq!(
        index.rank(Method::Summary, "x", &vector(0.0, 0.0)),
        Err(IndexError::Unavailable { method: Method::Summary, granularity: Granularity::Summary })
    );
    assert!(matches!(index.rank(Method::Turn, "x", &[1.0]), Err(IndexError::QueryDims { .. })));
    let (units, mut vectors) = session(5, &[("x", 0.0)]);
    vectors.turns.clear();
    assert!(matches!(index.add_session(units, vectors), Err(IndexError::BadVectors { .. })));
    assert_eq!(index.n_sessions(), 4);
}

#[test]
fn query_reports_ids_dates_and_turn_text() {
    let index = index();
    let hits = index.query("Pepper", &vector(1.54, 0.1), 2).unwrap();
    assert_eq!(hits.sessions.len(), 2);
    assert_eq!(hits.sessions[0].date.as_deref(), Some("day 4"));
    assert_eq!(hits.turns.len(), 2);
    assert!(hits.turns[0].text.contains("Pepper"));
    assert_eq!(hits.granularities, vec![Granularity::Session, Granularity::Turn]);
}

#[test]
fn greedy_selection_trades_relevance_for_redundancy_and_new_aspects() {
    use super::coverage::{Candidates, select_greedy};
    // Sessions 0 and 1 say the same thing (redundancy 0.9); 2 is less relevant but different
    // and holds the second aspect.
    let candidates = Candidates {
        relevance: vec![1.0, 0.9, 0.6],
        redundancy: vec![vec![1.0, 0.9, 0.1], vec![0.9, 1.0, 0.1], vec![0.1, 0.1, 1.0]],
        covers: vec![vec![true, false], vec![true, false], vec![false, true]],
        aspect_weights: vec![0.5, 0.5],
    };
    assert_eq!(select_greedy(&candidates, 0.0, 0.0), vec![0, 1, 2]);
    assert_eq!(select_greedy(&candidates, 0.5, 0.0), vec![0, 2, 1]);
    assert_eq!(select_greedy(&candidates, 0.0, 0.5), vec![0, 1, 2]);
    assert_eq!(select_greedy(&candidates, 0.0, 1.0), vec![0, 2, 1]);
    // Ties keep the fused order.
    let flat = Candidates {
        relevance: vec![0.5, 0.5, 0.5],
        redundancy: vec![vec![0.0; 3]; 3],
        covers: vec![vec![]; 3],
        aspect_weights: vec![],
    };
    assert_eq!(select_greedy(&flat, 1.0, 1.0), vec![0, 1, 2]);
}

#[test]
fn coverage_reranking_moves_a_session_with_the_missing_clause_up() {
    let mut options = IndexOptions::default();
    options.fusion.date = 0.0;
    let mut index = MemoryIndex::new(options);
    let sessions = [
        session(1, &[("Pepper the cat chased a mouse", 1.5), ("Pepper the cat ate", 1.5)]),
        session(2, &[("Pepper the cat slept all day", 1.5), ("more about the cat", 1.5)]),
        session(3, &[("the marathon in Boston was hard", 0.3), ("I ran it", 0.3)]),
    ];
    for (units, vectors) in sessions {
        index.add_session(units, vectors).unwrap();
    }
    index.set_test_word_vectors();
    let query = vector(1.5, 0.1);
    let question = "what did Pepper the cat do and which marathon did Ann run";
    let plain = index.fusion_with(&options.fusion, question, &query, &QueryWords::new()).unwrap();
    assert_eq!(session_order(&plain, &index)[2], "D3");
    let mut covering = options.fusion;
    covering.coverage = 2.0;
    let reranked = index.fusion_with(&covering, question, &query, &QueryWords::new()).unwrap();
    assert_eq!(session_order(&reranked, &index)[1], "D3");
    // Same input, same order.
    assert_eq!(
        reranked,
        index.fusion_with(&covering, question, &query, &QueryWords::new()).unwrap()
    );
}

#[test]
fn neighbour_weights_and_feedback_change_turn_scores() {
    let index = index();
    let query = vector(1.54, 0.1);
    let mut options = FusionOptions::dev_split();
    let base = index.fusion_with(&options, "vet", &query, &QueryWords::new()).unwrap();
    options.next_turn = 1.0;
    let with_next = index.fusion_with(&options, "vet", &query, &QueryWords::new()).unwrap();
    // D4:1 gains the score of D4:2 (the vet turn) that follows it.
    let score_of = |ranking: &Ranking, id: &str| {
        let turns = ranking.turns.as_ref().unwrap();
        turns.iter().find(|hit| index.turn_id(hit.index) == id).unwrap().score
    };
    // D4:2 ends its session: it gains only through its session's score, D4:1 also directly.
    let gain = |id: &str| score_of(&with_next, id) - score_of(&base, id);
    assert!(gain("D4:1") > gain("D4:2") + 0.1, "{} {}", gain("D4:1"), gain("D4:2"));
    options.next_turn = 0.0;
    options.prf_weight = 1.0;
    options.prf_turns = 2;
    let feedback = index.fusion_with(&options, "vet", &query, &QueryWords::new()).unwrap();
    assert_eq!(feedback.sessions.len(), 4);
    assert_ne!(feedback, base);
}

#[test]
fn memgas_session_scores_do_not_grow_with_session_size() {
    let mut options = IndexOptions::default();
    let mut index = MemoryIndex::new(options);
    // D1 is long and off-topic; D2 is short with one matching turn.
    let long: Vec<(&str, f32)> = (0..12).map(|_| ("gardening chat", 0.6)).collect();
    for (units, vectors) in [session(1, &long), session(2, &[("Pepper", 1.5)])] {
        index.add_session(units, vectors).unwrap();
    }
    let query = vector(1.5, 0.1);
    for aggregate in [SessionAggregate::RoutedMax, SessionAggregate::Max, SessionAggregate::Mean] {
        options.memgas.session_score = aggregate;
        index.set_query_options(&options);
        let ranking = index.rank(Method::Memgas, "", &query).unwrap();
        assert_eq!(session_order(&ranking, &index)[0], "D2", "{aggregate:?}");
    }
    // The paper's linear seeds summed per session: the long session wins by size.
    options.memgas = MemgasOptions::paper();
    options.memgas.n_seeds = 100;
    index.set_query_options(&options);
    let summed = index.rank(Method::Memgas, "", &query).unwrap();
    assert_eq!(session_order(&summed, &index)[0], "D1");
}

#[test]
fn the_router_moves_weight_to_the_peaked_granularity() {
    let mut index = MemoryIndex::new(IndexOptions::default());
    // Session k has one turn of its own (angle 0.3k) and three turns every session shares.
    for k in 1..=6 {
        let own = k as f32 * 0.3;
        let (units, vectors) =
            session(k, &[("own", own), ("shared", 3.5), ("shared", 3.5), ("shared", 3.5)]);
        index.add_session(units, vectors).unwrap();
    }
    let turn_weight = |query: Vec<f32>| {
        let ranking = index.rank(Method::Memgas, "", &query).unwrap();
        let total: f64 = ranking.router_weights.iter().map(|(_, w)| w).sum();
        assert!((total - 1.0).abs() < 1e-12);
        ranking.router_weights.iter().find(|(g, _)| *g == Granularity::Turn).unwrap().1
    };
    // Aimed at one session's own turn, the best turns single it out: turns weigh more than
    // when aimed at the shared turns, which every session matches equally well.
    let aimed = turn_weight(vector(0.9, 0.1));
    let shared = turn_weight(vector(3.5, 0.1));
    assert!(aimed > 0.53 && aimed > shared + 0.05, "{aimed} {shared}");
}

/// 8-D word vectors for the word test: "instruments", "violin" and "clarinet" close together;
/// the question's other words ("ann", "play") and the memory's other words on axes of their own.
fn word_vector(word: &str) -> Vec<f32> {
    let mut v = vec![0.0; 8];
    match word {
        "instruments" => v[0] = 1.0,
        "violin" => (v[0], v[1]) = (0.8, 0.6),
        "clarinet" => (v[0], v[2]) = (0.8, 0.6),
        "ann" => v[3] = 1.0,
        "play" => v[4] = 1.0,
        other => v[5 + other.len() % 3] = 1.0,
    }
    v
}

#[test]
fn soft_word_matching_lifts_turns_that_name_an_instance_of_the_question_word() {
    let fusion = FusionOptions { date: 0.0, word_match: 1.0, ..FusionOptions::dev_split() };
    let options = IndexOptions { fusion, ..IndexOptions::default() };
    let needs = IndexNeeds::for_methods(&[Method::Fusion], &options);
    assert!(needs.words);
    let mut index = MemoryIndex::with_needs(options, needs);
    // Dense vectors are all alike, so only the lexical channels separate the turns.
    let sessions = [
        session(1, &[("went hiking with friends", 1.0), ("playing my violin daily", 1.0)]),
        session(2, &[("baked bread today", 1.0), ("cooked pasta again", 1.0)]),
        session(3, &[("practised the clarinet", 1.0), ("watched movies", 1.0)]),
    ];
    for (units, vectors) in sessions {
        index.add_session(units, vectors).unwrap();
    }
    let question = "Which instruments does Ann play?";
    let query = vector(1.0, 0.1);
    // Until the memory's words have vectors, fusion refuses rather than ranking without them.
    assert!(matches!(
        index.rank(Method::Fusion, question, &query),
        Err(IndexError::Words(WordError::MissingVectors { .. }))
    ));
    let words = index.words_without_vectors();
    assert!(words.contains(&"violin".to_string()) && !words.contains(&"ann".to_string()));
    let vectors = words.iter().map(|w| word_vector(w)).collect();
    index.set_word_vectors(&words, vectors);
    assert!(index.words_without_vectors().is_empty());
    let missing = index.query_words_missing(question);
    assert_eq!(missing, vec!["ann", "instruments", "play"]);
    let query_words: QueryWords = missing.iter().map(|w| (w.clone(), word_vector(w))).collect();
    let ranking = index.rank_with_words(Method::Fusion, question, &query, &query_words).unwrap();
    let top: Vec<&str> =
        ranking.turns.as_ref().unwrap().iter().take(2).map(|t| index.turn_id(t.index)).collect();
    assert_eq!(top, vec!["D1:2", "D3:1"]);
    assert_eq!(session_order(&ranking, &index)[2], "D2");
    // Without the query's word vectors "instruments" matches nothing, and the violin turn
    // (which also says "playing", not "play") no longer leads by the word channel alone.
    let without = index.rank(Method::Fusion, question, &query).unwrap();
    assert_ne!(without.turns, ranking.turns);
}

#[test]
fn session_structure_links_a_session_to_its_units_and_turns_in_order() {
    let index = index();
    // Four sessions of a session node and two turns each; too few nodes for association edges.
    assert_eq!(index.graph().n_edges(), 0);
    let sorted = |list: &[(u32, f64)]| {
        let mut ids: Vec<u32> = list.iter().map(|(v, _)| *v).collect();
        ids.sort_unstable();
        ids
    };
    let mut options = MemgasOptions::paper();
    let plain = index.weighted_graph(&options);
    assert!(plain.iter().all(Vec::is_empty));
    options.structure = SessionStructure::SessionToUnits;
    let hub = index.weighted_graph(&options);
    assert_eq!(sorted(&hub[3]), [4, 5]);
    assert_eq!(hub[4], [(3, 1.0)]);
    options.structure = SessionStructure::SessionAndAdjacentTurns;
    let adjacent = index.weighted_graph(&options);
    assert_eq!(sorted(&adjacent[4]), [3, 5]);
    assert_eq!(sorted(&adjacent[5]), [3, 4]);
    // No edge leaves its session.
    for (node, list) in adjacent.iter().enumerate() {
        assert!(list.iter().all(|(v, w)| (*v as usize) / 3 == node / 3 && *w == 1.0));
    }
}

#[test]
fn session_edges_carry_a_matching_turn_s_mass_to_its_session() {
    let mut options = IndexOptions::default();
    options.memgas.n_seeds = 1;
    options.memgas.router = crate::retrieval::router::RouterFormula::Uniform;
    options.memgas.damping = 0.5;
    options.memgas.session_score = SessionAggregate::SessionPlusBest;
    let mut index = index();
    let query = vector(1.54, 0.1);
    let run = |index: &mut MemoryIndex, options: &IndexOptions| {
        index.set_query_options(options);
        index.rank(Method::Memgas, "", &query).unwrap()
    };
    // One seed (D4:1, the best turn) and no edges: only D4 scores.
    let alone = run(&mut index, &options);
    assert_eq!(session_order(&alone, &index)[0], "D4");
    assert!(alone.sessions[1].score == 0.0);
    // With session edges the seed's session node and its other turn receive mass too.
    options.memgas.structure = SessionStructure::SessionToUnits;
    let linked = run(&mut index, &options);
    assert_eq!(session_order(&linked, &index)[0], "D4");
    let turns = linked.turns.as_ref().unwrap();
    assert_eq!(index.turn_id(turns[0].index), "D4:1");
    assert_eq!(index.turn_id(turns[1].index), "D4:2");
    assert!(turns[1].score > 0.0 && turns[2].score == 0.0, "{turns:?}");
    assert!(linked.sessions[1].score == 0.0);
}
