//! Stage 2 — keywords: one call per unit over its rewritten sentences (behaviour of §5 of the
//! reference).
//!
//! The model sees only each sentence's id and rewritten text. Its answer is schema-checked
//! (through `llm::structured::chat_json`, which re-asks on a violation). Ids that are not among
//! the input sentences are dropped with a warning and counted, never an error: the reference
//! crashed the whole run on its last retry here (§17.1). Keywords are trimmed and de-duplicated
//! per sentence, keeping the model's order; the output follows the input's sentence order.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::ingest::unit::short_hash;
use crate::llm::JsonSchemaSpec;
use crate::memory::input::{RewrittenSentence, SentenceKeywords, SessionKeywords};
use crate::prompts::{self, PromptError};

/// Keywords of one unit's sentences: what the keyword cache stores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeywordRecord {
    /// One entry per sentence the model answered for, in sentence order.
    #[serde(flatten)]
    pub keywords: SessionKeywords,
    /// Sentence ids the model invented; dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped_ids: Vec<String>,
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
    short_hash(input_json(sentences).as_bytes())
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

#[derive(Debug, Deserialize)]
struct RawKeywords {
    sentence: Vec<RawSentenceKeywords>,
}

#[derive(Debug, Deserialize)]
struct RawSentenceKeywords {
    sentence_id: String,
    keyword: Vec<String>,
}

/// Turn a schema-valid answer into the record: unknown ids dropped (and listed), duplicates of
/// one id merged, keywords trimmed and de-duplicated. Fails only if the value does not have the
/// schema's shape at all.
pub(crate) fn check(
    value: &Value,
    session: &str,
    sentences: &[RewrittenSentence],
) -> Result<KeywordRecord, Vec<String>> {
    let raw: RawKeywords = serde_json::from_value(value.clone())
        .map_err(|error| vec![format!("the JSON does not have the expected shape: {error}")])?;
    let position: BTreeMap<&str, usize> = sentences
        .iter()
        .enumerate()
        .map(|(index, sentence)| (sentence.id.as_str(), index))
        .collect();
    let mut found: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut dropped_ids = Vec::new();
    for item in raw.sentence {
        let Some(&index) = position.get(item.sentence_id.as_str()) else {
            if !dropped_ids.contains(&item.sentence_id) {
                dropped_ids.push(item.sentence_id);
            }
            continue;
        };
        let keywords = found.entry(index).or_default();
        for keyword in item.keyword {
            let keyword = keyword.trim();
            if !keyword.is_empty() && !keywords.iter().any(|known| known == keyword) {
                keywords.push(keyword.to_string());
            }
        }
    }
    let sentences = found
        .into_iter()
        .map(|(index, keywords)| SentenceKeywords {
            sentence_id: sentences[index].id.clone(),
            keywords,
        })
        .collect();
    Ok(KeywordRecord {
        keywords: SessionKeywords { session: session.to_string(), sentences },
        dropped_ids,
    })
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
        let record = check(&answer, "D1", &sentences).unwrap();
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
