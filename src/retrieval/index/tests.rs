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
    // All 12 nodes are seeds (fewer than α = 15), so PageRank mass sums to 1 over sessions.
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
