//! The three stage caches of one conversation ([`SampleCaches`]) and what each stage's cache
//! entry for a unit must match.

use crate::dataset::Conversation;
use crate::ingest::cache::{PlannedUnit, Provenance, StageCache};
use crate::ingest::embed::{EmbeddingCache, UnitTexts};
use crate::ingest::keywords::{self, KeywordRecord};
use crate::ingest::unit::{Unit, plan_units};
use crate::ingest::{BuildSettings, StageOutputs};
use crate::memory::input::SessionRewrite;
use crate::prompts;

/// The three caches of one conversation.
pub(super) struct SampleCaches {
    pub(super) rewrite: StageCache<SessionRewrite>,
    pub(super) keywords: StageCache<KeywordRecord>,
    pub(super) embeddings: EmbeddingCache,
    pub(super) notices: Vec<String>,
}

impl SampleCaches {
    /// Open (or start) the caches, each checked against the current prompt versions, model
    /// and embedder. A stale stage's notice names the file and what changed.
    pub(super) fn open(
        settings: &BuildSettings,
        embedder: &str,
        conversation: &Conversation,
    ) -> anyhow::Result<Self> {
        let sample_id = &conversation.sample_id;
        let rewrite_version = (prompts::REWRITE.name.to_string(), prompts::REWRITE.version());
        let keyword_version = (prompts::KEYWORDS.name.to_string(), prompts::KEYWORDS.version());
        let provenance = |stage: &str, model: &str, versions: Vec<(String, String)>| Provenance {
            stage: stage.into(),
            sample_id: sample_id.clone(),
            model: model.into(),
            versions: versions.into_iter().collect(),
        };
        let (mut rewrite, mut notices) = StageCache::open(
            &settings.rewrite_path(sample_id),
            provenance("rewrite", &settings.model, vec![rewrite_version.clone()]),
        )?;
        let (mut keywords, keyword_notices) = StageCache::open(
            &settings.keyword_path(sample_id),
            provenance("keywords", &settings.model, vec![rewrite_version.clone(), keyword_version]),
        )?;
        let mut embedding_provenance = provenance("embeddings", embedder, vec![rewrite_version]);
        embedding_provenance.versions.insert("rewrite model".into(), settings.model.clone());
        let (mut embeddings, embedding_notices) = EmbeddingCache::open(
            &settings.embedding_path(embedder, sample_id),
            embedding_provenance,
        )?;
        notices.extend(keyword_notices);
        notices.extend(embedding_notices);
        let plan: Vec<PlannedUnit> =
            plan_units(conversation, settings.batch()).iter().map(rewrite_planned).collect();
        rewrite.retain_planned(&plan);
        keywords.retain_planned(&plan);
        embeddings.retain_planned(&plan);
        Ok(Self { rewrite, keywords, embeddings, notices })
    }

    /// Whether all three stages of `unit` are cached.
    pub(super) fn unit_complete(&self, unit: &Unit<'_>) -> bool {
        match self.rewrite.done(&rewrite_planned(unit)) {
            Some(record) => {
                self.keywords.done(&keyword_planned(unit, record)).is_some()
                    && self.embeddings.unit_done(&embedding_planned(unit, record).0)
            }
            None => false,
        }
    }

    /// The stage outputs of every unit with a valid rewrite, in dialogue order.
    pub(super) fn outputs(&self, units: &[Unit<'_>]) -> StageOutputs {
        let mut outputs = StageOutputs::default();
        for unit in units {
            let Some(record) = self.rewrite.done(&rewrite_planned(unit)) else { continue };
            if let Some(keywords) = self.keywords.done(&keyword_planned(unit, record)) {
                outputs.keywords.push(keywords.keywords.clone());
            }
            outputs.rewrites.push(record.clone());
        }
        outputs
    }
}

pub(super) fn rewrite_planned(unit: &Unit<'_>) -> PlannedUnit {
    PlannedUnit {
        key: unit.key.clone(),
        first_session: unit.first_session,
        input_hash: unit.input_hash(),
    }
}

pub(super) fn keyword_planned(unit: &Unit<'_>, record: &SessionRewrite) -> PlannedUnit {
    PlannedUnit {
        key: unit.key.clone(),
        first_session: unit.first_session,
        input_hash: keywords::input_hash(&record.sentences),
    }
}

pub(super) fn embedding_planned(
    unit: &Unit<'_>,
    record: &SessionRewrite,
) -> (PlannedUnit, UnitTexts) {
    let texts = UnitTexts::of(record);
    (
        PlannedUnit {
            key: unit.key.clone(),
            first_session: unit.first_session,
            input_hash: texts.input_hash(),
        },
        texts,
    )
}
