//! Okapi BM25 over the text units of one conversation, built incrementally.
//!
//! Hand-written rather than taken from the `bm25` crate: we need an index that grows one session
//! at a time alongside the association graph, dense scores for every unit (for rank fusion), and
//! exact control of tokenisation; the scoring itself is a dozen lines. Tokens are lowercased
//! alphanumeric runs ([`crate::text::words`]), minus a short English stop-word list
//! ([`ENGLISH_STOP_WORDS`]), reduced by NLTK's Porter stemmer ([`crate::text::porter`], the one
//! the LoCoMo scorer uses), so "painted" matches "paint".
//!
//! `score(t, d) = idf(t) · tf·(k1 + 1) / (tf + k1·(1 − b + b·|d|/avgdl))` with the always-positive
//! `idf(t) = ln(1 + (N − n_t + 0.5)/(n_t + 0.5))`, summed over the distinct query terms; k1 and b
//! come from [`Bm25Params`] (k1 = 1.2; b = 0.3 by default, lighter than the usual 0.75: long turns
//! that carry their context are not penalised as much). Queries may also drop question
//! boilerplate ([`BM25_QUESTION_WORDS`]: "kind", "likely", ...), which names what is asked
//! rather than what the evidence says. Pure and deterministic.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::text::porter::stem;
use crate::text::stop_words::{BM25_QUESTION_WORDS, ENGLISH_STOP_WORDS};
use crate::text::words;

/// BM25 parameters and query processing.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bm25Params {
    /// Term-frequency saturation.
    pub k1: f64,
    /// Length normalisation strength (0: none, 1: full).
    pub b: f64,
    /// Drop [`BM25_QUESTION_WORDS`] from queries (documents keep them).
    pub drop_question_words: bool,
}

impl Default for Bm25Params {
    fn default() -> Self {
        Self { k1: 1.2, b: 0.3, drop_question_words: false }
    }
}

/// Turns text into index terms.
#[derive(Debug, Clone, Copy, Default)]
pub struct Analyzer;

impl Analyzer {
    /// Index terms of `text`, in order, with repeats.
    pub fn terms(&self, text: &str) -> Vec<String> {
        self.terms_without(text, &[])
    }

    /// Index terms of `text` without the words of `extra_stop_words` (lowercase).
    pub fn terms_without(&self, text: &str, extra_stop_words: &[&str]) -> Vec<String> {
        words(text)
            .filter(|word| {
                !ENGLISH_STOP_WORDS.contains(&word.as_str())
                    && !extra_stop_words.contains(&word.as_str())
            })
            .map(|word| stem(&word))
            .collect()
    }
}

/// A growing BM25 index; documents are numbered in insertion order. Serialisable (terms in
/// sorted order) so that a built index can be cached on disk.
#[derive(Clone, Default, Serialize, Deserialize)]
pub struct Bm25Index {
    params: Bm25Params,
    #[serde(skip)]
    analyzer: Analyzer,
    /// term → (document, term frequency), documents ascending.
    #[serde(serialize_with = "sorted_postings")]
    postings: HashMap<String, Vec<(u32, u32)>>,
    lengths: Vec<u32>,
    total_length: u64,
}

/// The postings in term order, so that the serialised index does not depend on hash order.
fn sorted_postings<S: serde::Serializer>(
    postings: &HashMap<String, Vec<(u32, u32)>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(postings.iter().collect::<std::collections::BTreeMap<_, _>>())
}

impl Bm25Index {
    /// An estimate of the heap bytes it holds ([`crate::heap`]): each posting list and its
    /// term, the map's slots and the document lengths.
    pub fn heap_bytes(&self) -> usize {
        let slots = self.postings.capacity()
            * (std::mem::size_of::<String>() + std::mem::size_of::<Vec<(u32, u32)>>() + 1);
        let postings: usize = self
            .postings
            .iter()
            .map(|(term, list)| crate::heap::text(term) + crate::heap::flat(list))
            .sum();
        slots + postings + crate::heap::flat(&self.lengths)
    }

    /// An empty index with the default parameters.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty index with `params`.
    pub fn with_params(params: Bm25Params) -> Self {
        Self { params, ..Self::default() }
    }

    /// Change the scoring parameters (the postings do not depend on them).
    pub fn set_params(&mut self, params: Bm25Params) {
        self.params = params;
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    /// Whether the index has no documents.
    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// Add a document; returns its number.
    pub fn add(&mut self, text: &str) -> usize {
        let document = self.lengths.len() as u32;
        let terms = self.analyzer.terms(text);
        let mut counts: HashMap<String, u32> = HashMap::new();
        for term in &terms {
            *counts.entry(term.clone()).or_default() += 1;
        }
        for (term, count) in counts {
            self.postings.entry(term).or_default().push((document, count));
        }
        self.lengths.push(terms.len() as u32);
        self.total_length += terms.len() as u64;
        document as usize
    }

    /// The distinct terms of `query` (processed as [`Bm25Index::scores`] does) that occur in
    /// some document, in term order, each with its idf and the documents containing it
    /// (ascending).
    pub fn query_terms(&self, query: &str) -> Vec<(f64, Vec<u32>)> {
        let extra: &[&str] =
            if self.params.drop_question_words { BM25_QUESTION_WORDS } else { &[] };
        let mut terms = self.analyzer.terms_without(query, extra);
        terms.sort();
        terms.dedup();
        let n = self.lengths.len() as f64;
        terms
            .iter()
            .filter_map(|term| self.postings.get(term))
            .map(|postings| {
                let containing = postings.len() as f64;
                let idf = (1.0 + (n - containing + 0.5) / (containing + 0.5)).ln();
                (idf, postings.iter().map(|&(document, _)| document).collect())
            })
            .collect()
    }

    /// BM25 score of every document for `query` (0 for documents sharing no term).
    pub fn scores(&self, query: &str) -> Vec<f64> {
        let mut scores = vec![0.0; self.lengths.len()];
        if self.lengths.is_empty() {
            return scores;
        }
        let extra: &[&str] =
            if self.params.drop_question_words { BM25_QUESTION_WORDS } else { &[] };
        let mut terms = self.analyzer.terms_without(query, extra);
        let Bm25Params { k1, b, .. } = self.params;
        terms.sort();
        terms.dedup();
        let n = self.lengths.len() as f64;
        let average_length = (self.total_length as f64 / n).max(1.0);
        for term in &terms {
            let Some(postings) = self.postings.get(term) else { continue };
            let containing = postings.len() as f64;
            let idf = (1.0 + (n - containing + 0.5) / (containing + 0.5)).ln();
            for &(document, tf) in postings {
                let tf = f64::from(tf);
                let length = f64::from(self.lengths[document as usize]);
                let norm = k1 * (1.0 - b + b * length / average_length);
                scores[document as usize] += idf * tf * (k1 + 1.0) / (tf + norm);
            }
        }
        scores
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn analyzer_lowercases_stems_and_drops_stop_words() {
        let analyzer = Analyzer;
        assert_eq!(
            analyzer.terms("When did Melanie PAINT the sunrises?"),
            vec!["melani", "paint", "sunris"]
        );
        assert_eq!(analyzer.terms("painted, painting"), vec!["paint", "paint"]);
    }

    #[test]
    fn scores_follow_the_bm25_formula() {
        let mut index = Bm25Index::new();
        index.add("Melanie painted a sunrise over the lake");
        index.add("Caroline went to a support group");
        index.add("a lake trip, a lake swim and lake fish");
        let scores = index.scores("lake sunrise");
        // Document 0: melani, paint, sunris, over, lake (length 5); document 1: carolin, went,
        // support, group (4); document 2: lake×3, trip, swim, fish (6); average 15 / 3.
        let n = 3.0f64;
        let idf = |containing: f64| (1.0 + (n - containing + 0.5) / (containing + 0.5)).ln();
        let average: f64 = 15.0 / 3.0;
        let Bm25Params { k1, b, .. } = Bm25Params::default();
        let part =
            |tf: f64, length: f64| tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * length / average));
        let expected0 = idf(2.0) * part(1.0, 5.0) + idf(1.0) * part(1.0, 5.0);
        let expected2 = idf(2.0) * part(3.0, 6.0);
        assert!((scores[0] - expected0).abs() < 1e-12);
        assert_eq!(scores[1], 0.0);
        assert!((scores[2] - expected2).abs() < 1e-12);
        assert!(scores[0] > scores[2]);
        assert!(Bm25Index::new().scores("x").is_empty());
    }

    #[test]
    fn parameters_and_question_words_change_the_scores() {
        let texts = ["the lake was cold", "lake lake lake and a long walk by the lake shore"];
        let build = |params: Bm25Params| {
            let mut index = Bm25Index::with_params(params);
            for text in texts {
                index.add(text);
            }
            index
        };
        // b = 0: no length normalisation, so the long document's four "lake"s win outright;
        // k1 = 0: term frequency no longer counts, so both documents score the same.
        let no_length = build(Bm25Params { b: 0.0, ..Bm25Params::default() }).scores("lake");
        assert!(no_length[1] > no_length[0]);
        let binary = build(Bm25Params { k1: 0.0, ..Bm25Params::default() }).scores("lake");
        assert!((binary[0] - binary[1]).abs() < 1e-12);
        // "kind" is framing: dropped from queries only when asked.
        let mut index = Bm25Index::with_params(Bm25Params {
            drop_question_words: true,
            ..Bm25Params::default()
        });
        index.add("what kind of day");
        index.add("a cold lake");
        assert_eq!(index.scores("what kind of lake"), index.scores("lake"));
        let mut plain = Bm25Index::new();
        plain.add("what kind of day");
        assert!(plain.scores("kind")[0] > 0.0);
    }

    #[test]
    fn query_terms_list_idf_and_documents() {
        let mut index = Bm25Index::new();
        index.add("Melanie painted a lake");
        index.add("Caroline went to the lake");
        index.add("a quiet day");
        let terms = index.query_terms("Where is the lake that Melanie painted? lake");
        // lake (docs 0, 1), melani (0), paint (0), in term order; "where"/"is"/"the" are stop words.
        let documents: Vec<Vec<u32>> = terms.iter().map(|(_, d)| d.clone()).collect();
        assert_eq!(documents, vec![vec![0, 1], vec![0], vec![0]]);
        assert!(terms[1].0 > terms[0].0);
        assert!(index.query_terms("unknown words").is_empty());
    }
}
