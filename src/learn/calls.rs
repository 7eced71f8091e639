//! The learning calls (attempt reviews, proposals, consolidations), each cached in one
//! append-only file, keyed by a hash of the model and the rendered prompt: a resumed run sends
//! only what an earlier one did not finish, and a changed input is asked afresh. A torn last
//! line (a kill mid-write) is skipped.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::llm::structured::chat_json;
use crate::llm::{ChatMessage, ChatModel, ChatRequest, JsonSchemaSpec, Usage};

/// Re-asks when a reply is not JSON of the expected shape.
const MAX_REASKS: u32 = 2;

/// One cached reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CachedCall {
    key: String,
    stage: String,
    value: Value,
    usage: Usage,
}

/// The cache of learning calls.
pub struct CallCache {
    path: PathBuf,
    entries: Mutex<BTreeMap<String, Value>>,
    file: Mutex<std::fs::File>,
}

/// A learning call's reply.
pub struct CallReply {
    /// The JSON value, valid against the call's schema.
    pub value: Value,
    /// Tokens spent now (zero when cached).
    pub usage: Usage,
}

impl CallCache {
    /// Opens (or creates) the cache at `path`.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
        };
        let mut entries = BTreeMap::new();
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            match serde_json::from_str::<CachedCall>(line) {
                Ok(entry) => {
                    entries.insert(entry.key, entry.value);
                }
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "skipping a torn cache line")
                }
            }
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        if !text.is_empty() && !text.ends_with('\n') {
            writeln!(file).with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(Self { path: path.to_path_buf(), entries: Mutex::new(entries), file: Mutex::new(file) })
    }

    /// Asks `model` (id `model_id`) for JSON valid against `schema`, with `prompt` as the one
    /// user message at temperature 0, or returns the cached reply to the same question.
    pub async fn json<M: ChatModel>(
        &self,
        model: &M,
        model_id: &str,
        stage: &str,
        prompt: String,
        schema: &JsonSchemaSpec,
    ) -> anyhow::Result<CallReply> {
        let key = crate::text::short_hash(format!("{model_id}\0{stage}\0{prompt}").as_bytes(), 12);
        let cached = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
            .cloned();
        if let Some(value) = cached {
            return Ok(CallReply { value, usage: Usage::default() });
        }
        let mut request = ChatRequest::new(model_id, vec![ChatMessage::user(prompt)]);
        request.temperature = Some(0.0);
        request.seed = Some(0);
        request.for_step(Some(crate::llm::Step::Learn), model);
        let response = chat_json(model, request, schema, MAX_REASKS)
            .await
            .with_context(|| format!("{stage}: the model gave no usable reply"))?;
        let entry = CachedCall {
            key: key.clone(),
            stage: stage.into(),
            value: response.value.clone(),
            usage: response.usage,
        };
        let line = serde_json::to_string(&entry).context("serialising a cache entry")?;
        {
            let mut file = self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            writeln!(file, "{line}")
                .and_then(|()| file.flush())
                .with_context(|| format!("writing {}", self.path.display()))?;
        }
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, response.value.clone());
        Ok(CallReply { value: response.value, usage: response.usage })
    }
}

/// The schema of an attempt review.
pub fn review_schema() -> JsonSchemaSpec {
    let text = serde_json::json!({"type": "string"});
    JsonSchemaSpec {
        name: "attempt_review".into(),
        schema: serde_json::json!({
            "type": "object",
            "properties": {
                "evidence_used": text, "mistake": text, "decision_points": text, "lesson": text
            },
            "required": ["mistake", "lesson"]
        }),
    }
}

/// The schema of a proposal or a consolidation: a list of operations, checked item by item
/// afterwards (see `ops::read_ops`), so one bad item does not cost the others.
pub fn ops_schema() -> JsonSchemaSpec {
    JsonSchemaSpec {
        name: "rule_ops".into(),
        schema: serde_json::json!({
            "type": "object",
            "properties": {"ops": {"type": "array", "items": {"type": "object"}}},
            "required": ["ops"]
        }),
    }
}
