//! Stage 2 — keywords: one call per unit over its rewritten sentences (behaviour of §5 of the
//! reference).
//!
//! The model sees only each sentence's id and rewritten text. Its answer is read item by item
//! ([`KeywordSalvage`]): ids that are not among the input sentences are dropped and counted,
//! never an error (the reference crashed the whole run on its last retry here, §17.1).
//! Keywords are trimmed and de-duplicated per sentence, keeping the model's order; the output
//! follows the input's sentence order. Sentences left without keywords are re-asked alone
//! (`ingest::repair`); those still without keywords get [`deterministic_keywords`], flagged in
//! the record.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::ingest::repair::{Repair, Salvage, items_of, string_list};
use crate::ingest::unit::INPUT_HASH_BYTES;
use crate::llm::JsonSchemaSpec;
use crate::memory::input::{RewrittenSentence, SentenceKeywords, SessionKeywords};
use crate::memory::{normalize_key, tokens};
use crate::prompts::{self, PromptError};
use crate::text::short_hash;

/// Keywords of one unit's sentences: what the keyword cache stores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeywordRecord {
    /// One entry per sentence the model answered for, in sentence order.
    #[serde(flatten)]
    pub keywords: SessionKeywords,
    /// Sentence ids the model invented; dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped_ids: Vec<String>,
    /// Re-asks, salvaged sentences and sentences with deterministic keywords (`fallback`).
    #[serde(default)]
    pub repair: Repair,
}

/// The input the model sees: `[{"id", "text"}]` in sentence order.
fn input_json(sentences: &[RewrittenSentence]) -> String {
    let items: Vec<Value> = sentences
        .iter()
        .map(|sentence| json!({"id": sentence.id, "text": sentence.text}))
        .collect();
    Value::Array(items).to_string()
}

/// Hash of the stage input; cached keywords are reused only for identical sentences.
pub(crate) fn input_hash(sentences: &[RewrittenSentence]) -> String {
    short_hash(input_json(sentences).as_bytes(), INPUT_HASH_BYTES)
}

/// The keyword prompt filled with the sentences.
pub(crate) fn render_prompt(sentences: &[RewrittenSentence]) -> Result<String, PromptError> {
    prompts::KEYWORDS.render(&[("sentences", &input_json(sentences))])
}

/// JSON Schema of the model's answer (the contract of §5).
pub(crate) fn schema() -> JsonSchemaSpec {
    JsonSchemaSpec {
        name: "keywords".into(),
        schema: json!({
            "type": "object",
            "required": ["sentence"],
            "properties": {
                "sentence": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["sentence_id", "keyword"],
                        "properties": {
                            "sentence_id": {"type": "string", "pattern": "^D[0-9]+:[0-9]+-[0-9]+$"},
                            "keyword": {"type": "array", "items": {"type": "string", "minLength": 1}}
                        }
                    }
                }
            }
        }),
    }
}

/// The keywords of one unit's sentences, gathered over the replies.
#[derive(Debug)]
pub(crate) struct KeywordSalvage<'s> {
    session: String,
    sentences: &'s [RewrittenSentence],
    found: BTreeMap<usize, Vec<String>>,
    dropped_ids: Vec<String>,
}

impl<'s> KeywordSalvage<'s> {
    /// Nothing gathered yet for the `sentences` of `session`.
    pub(crate) fn new(session: &str, sentences: &'s [RewrittenSentence]) -> Self {
        Self {
            session: session.to_string(),
            sentences,
            found: BTreeMap::new(),
            dropped_ids: Vec::new(),
        }
    }

    /// The record: what the model gave, deterministic keywords for the `repair.fallback`
    /// sentences, in sentence order.
    pub(crate) fn into_record(mut self, repair: Repair) -> KeywordRecord {
        for (index, sentence) in self.sentences.iter().enumerate() {
            if repair.fallback.contains(&sentence.id) {
                self.found.insert(index, deterministic_keywords(&sentence.text));
            }
        }
        let sentences = self
            .found
            .into_iter()
            .filter(|(_, keywords)| !keywords.is_empty())
            .map(|(index, keywords)| SentenceKeywords {
                sentence_id: self.sentences[index].id.clone(),
                keywords,
            })
            .collect();
        KeywordRecord {
            keywords: SessionKeywords { session: self.session, sentences },
            dropped_ids: self.dropped_ids,
            repair,
        }
    }
}

impl Salvage for KeywordSalvage<'_> {
    fn absorb(&mut self, reply: Result<Value, String>) -> Vec<String> {
        let value = match reply {
            Ok(value) => value,
            Err(error) => return vec![format!("no JSON object found in the reply: {error}")],
        };
        let position: BTreeMap<&str, usize> = self
            .sentences
            .iter()
            .enumerate()
            .map(|(index, sentence)| (sentence.id.as_str(), index))
            .collect();
        let wanted: Vec<String> = self.missing();
        let mut problems = Vec::new();
        for item in &items_of(&value, "sentence") {
            let Some(id) = item.get("sentence_id").and_then(Value::as_str) else {
                problems.push("an item has no `sentence_id`".to_string());
                continue;
            };
            let Some(&index) = position.get(id.trim()) else {
                if !self.dropped_ids.iter().any(|known| known == id) {
                    self.dropped_ids.push(id.to_string());
                }
                continue;
            };
            if !wanted.iter().any(|wanted| wanted == id.trim()) {
                continue;
            }
            let keywords = self.found.entry(index).or_default();
            for keyword in string_list(item.get("keyword")) {
                let keyword = keyword.trim();
                if !keyword.is_empty() && !keywords.iter().any(|known| known == keyword) {
                    keywords.push(keyword.to_string());
                }
            }
        }
        problems
    }

    fn missing(&self) -> Vec<String> {
        self.sentences
            .iter()
            .enumerate()
            .filter(|(index, _)| self.found.get(index).is_none_or(Vec::is_empty))
            .map(|(_, sentence)| sentence.id.clone())
            .collect()
    }

    fn reask(&self, missing: &[String], reason: &str) -> Result<String, PromptError> {
        let sentences: Vec<RewrittenSentence> = self
            .sentences
            .iter()
            .filter(|sentence| missing.contains(&sentence.id))
            .cloned()
            .collect();
        prompts::KEYWORDS_MISSING
            .render(&[("reason", reason), ("sentences", &input_json(&sentences))])
    }
}

/// Keywords without a model: the sentence's content words (stop words removed), each
/// normalised like a stored key ([`normalize_key`]), sorted.
pub fn deterministic_keywords(text: &str) -> Vec<String> {
    tokens(&normalize_key(text)).into_iter().map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sentence(id: &str, text: &str) -> RewrittenSentence {
        RewrittenSentence {
            id: id.into(),
            origin: id.split('-').next().unwrap().into(),
            text: text.into(),
            date: None,
            tag: "t".into(),
            topic_ids: Vec::new(),
        }
    }

    #[test]
    fn unknown_ids_are_dropped_and_the_rest_kept_in_sentence_order() {
        let sentences = [sentence("D1:1-1", "Ana paints"), sentence("D1:2-1", "Bo runs")];
        let answer = json!({"sentence": [
            {"sentence_id": "D1:2-1", "keyword": ["Bo", " runs ", "Bo"]},
            {"sentence_id": "D7:1-1", "keyword": ["ghost"]},
            {"sentence_id": "D1:1-1", "keyword": ["Ana"]},
            {"sentence_id": "D1:1-1", "keyword": ["paints", "Ana"]}
        ]});
        let mut state = KeywordSalvage::new("D1", &sentences);
        assert!(state.absorb(Ok(answer)).is_empty());
        assert!(state.missing().is_empty());
        let record = state.into_record(Repair::default());
        assert_eq!(
            record.keywords.sentences,
            [
                SentenceKeywords {
                    sentence_id: "D1:1-1".into(),
                    keywords: vec!["Ana".into(), "paints".into()]
                },
                SentenceKeywords {
                    sentence_id: "D1:2-1".into(),
                    keywords: vec!["Bo".into(), "runs".into()]
                },
            ]
        );
        assert_eq!(record.dropped_ids, ["D7:1-1"]);
        assert_eq!(record.keywords.session, "D1");
    }

    #[test]
    fn skipped_and_empty_items_are_missing_and_re_asked_alone() {
        let sentences = [
            sentence("D1:1-1", "Ana paints"),
            sentence("D1:2-1", "Bo runs"),
            sentence("D1:3-1", "Ana's paintings of the sea"),
        ];
        let mut state = KeywordSalvage::new("D1", &sentences);
        let first = json!({"sentence": [
            {"sentence_id": "D1:1-1", "keyword": ["Ana"]},
            {"sentence_id": "D1:2-1", "keyword": ["  "]},
            {"keyword": ["orphan"]}
        ]});
        assert_eq!(state.absorb(Ok(first)), ["an item has no `sentence_id`"]);
        assert_eq!(state.missing(), ["D1:2-1", "D1:3-1"]);
        let reask = state.reask(&state.missing(), "missing").unwrap();
        assert!(reask.contains(r#"[{"id":"D1:2-1","text":"Bo runs"},{"id":"D1:3-1","#), "{reask}");
        assert!(!reask.contains("Ana paints"), "{reask}");
        // The re-ask covers one sentence (a bare string is read as one keyword) and tries to
        // change an answered one, which is ignored.
        let second = json!({"sentence": [
            {"sentence_id": "D1:2-1", "keyword": "running"},
            {"sentence_id": "D1:1-1", "keyword": ["changed"]}
        ]});
        assert!(state.absorb(Ok(second)).is_empty());
        assert_eq!(state.missing(), ["D1:3-1"]);
        assert_eq!(state.absorb(Err("prose".into())).len(), 1);
        let repair = Repair { fallback: state.missing(), ..Repair::default() };
        let record = state.into_record(repair);
        let keywords: Vec<(&str, Vec<&str>)> = record
            .keywords
            .sentences
            .iter()
            .map(|k| (k.sentence_id.as_str(), k.keywords.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            keywords,
            [
                ("D1:1-1", vec!["Ana"]),
                ("D1:2-1", vec!["running"]),
                ("D1:3-1", vec!["ana", "painting", "sea"])
            ]
        );
        assert_eq!(record.repair.fallback, ["D1:3-1"]);
    }

    #[test]
    fn deterministic_keywords_are_normalised_content_words() {
        assert_eq!(
            deterministic_keywords("Caroline's Paintings of the LGBTQ support-groups!"),
            ["caroline", "group", "lgbtq", "painting", "support"]
        );
        assert!(deterministic_keywords(" ... ").is_empty());
    }

    #[test]
    fn the_prompt_lists_ids_and_texts_only() {
        let sentences = [sentence("D1:1-1", "Ana \"paints\"")];
        let prompt = render_prompt(&sentences).unwrap();
        assert!(prompt.contains(r#"[{"id":"D1:1-1","text":"Ana \"paints\""}]"#), "{prompt}");
        assert_ne!(input_hash(&sentences), input_hash(&[sentence("D1:1-1", "Ana paints")]));
    }

    #[test]
    fn the_schema_rejects_empty_keywords_and_bad_ids() {
        let validator = jsonschema::validator_for(&schema().schema).unwrap();
        assert!(
            validator.is_valid(&json!({"sentence": [{"sentence_id": "D1:1-1", "keyword": ["a"]}]}))
        );
        assert!(
            !validator.is_valid(&json!({"sentence": [{"sentence_id": "D1:1-1", "keyword": [""]}]}))
        );
        assert!(
            !validator.is_valid(&json!({"sentence": [{"sentence_id": "D1:1", "keyword": ["a"]}]}))
        );
        assert!(!validator.is_valid(&json!({"sentence": []})));
    }
}
