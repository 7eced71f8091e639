//! The three stage caches of one conversation ([`SampleCaches`]) and what each stage's cache
//! entry for a unit must match.

use crate::dataset::Conversation;
use crate::ingest::cache::{PlannedUnit, Provenance, StageCache};
use crate::ingest::embed::{EmbeddingStageCache, UnitTexts};
use crate::ingest::keywords::{self, KeywordRecord};
use crate::ingest::rewrite::RewriteRecord;
use crate::ingest::summary::{RepairCounts, SampleSummary};
use crate::ingest::unit::{Unit, plan_units};
use crate::ingest::{BuildSettings, StageOutputs};
use crate::memory::input::SessionRewrite;
use crate::prompts;

/// The three caches of one conversation.
pub(super) struct SampleCaches {
    pub(super) rewrite: StageCache<RewriteRecord>,
    pub(super) keywords: StageCache<KeywordRecord>,
    pub(super) embeddings: EmbeddingStageCache,
    pub(super) notices: Vec<String>,
}

impl SampleCaches {
    /// Open (or start) the caches, each checked against the current prompt versions, model
    /// and embedder. A stale stage's notice names the file and what changed. A stage's
    /// versions include its focused re-ask prompt and those of the stages upstream.
    pub(super) fn open(
        settings: &BuildSettings,
        embedder: &str,
        conversation: &Conversation,
    ) -> anyhow::Result<Self> {
        let sample_id = &conversation.sample_id;
        let version = |prompt: prompts::Prompt| (prompt.name.to_string(), prompt.version());
        let rewrite_versions = vec![version(prompts::REWRITE), version(prompts::REWRITE_MISSING)];
        let mut keyword_versions = rewrite_versions.clone();
        keyword_versions.extend([version(prompts::KEYWORDS), version(prompts::KEYWORDS_MISSING)]);
        let provenance = |stage: &str, model: &str, versions: Vec<(String, String)>| Provenance {
            stage: stage.into(),
            sample_id: sample_id.clone(),
            model: model.into(),
            versions: versions.into_iter().collect(),
        };
        let (mut rewrite, mut notices) = StageCache::open(
            &settings.rewrite_path(sample_id),
            provenance("rewrite", &settings.model, rewrite_versions.clone()),
        )?;
        let (mut keywords, keyword_notices) = StageCache::open(
            &settings.keyword_path(sample_id),
            provenance("keywords", &settings.model, keyword_versions),
        )?;
        let mut embedding_provenance = provenance("embeddings", embedder, rewrite_versions);
        embedding_provenance.versions.insert("rewrite model".into(), settings.model.clone());
        let (mut embeddings, embedding_notices) = EmbeddingStageCache::open(
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
                self.keywords.done(&keyword_planned(unit, &record.rewrite)).is_some()
                    && self.embeddings.unit_done(&embedding_planned(unit, &record.rewrite).0)
            }
            None => false,
        }
    }

    /// The stage outputs of every unit with a valid rewrite, in dialogue order.
    pub(super) fn outputs(&self, units: &[Unit<'_>]) -> StageOutputs {
        let mut outputs = StageOutputs::default();
        for unit in units {
            let Some(record) = self.rewrite.done(&rewrite_planned(unit)) else { continue };
            if let Some(keywords) = self.keywords.done(&keyword_planned(unit, &record.rewrite)) {
                outputs.keywords.push(keywords.keywords.clone());
            }
            outputs.rewrites.push(record.rewrite.clone());
        }
        outputs
    }

    /// Set `summary`'s repair counts and dropped keyword ids from the records of `units`
    /// (the records keep them, so a rerun from the caches reports the same numbers).
    pub(super) fn count_repairs(&self, units: &[Unit<'_>], summary: &mut SampleSummary) {
        let mut counts = RepairCounts::default();
        let mut dropped = 0;
        for unit in units {
            let Some(record) = self.rewrite.done(&rewrite_planned(unit)) else { continue };
            let keywords = self.keywords.done(&keyword_planned(unit, &record.rewrite));
            counts.salvaged_turns += record.repair.salvaged.len();
            counts.verbatim_turns += record.repair.fallback.len();
            let keyword_reasks = keywords.map_or(0, |keywords| keywords.repair.reasks);
            if record.repair.reasks + keyword_reasks > 0 {
                counts.reasked_units += 1;
            }
            if let Some(keywords) = keywords {
                counts.salvaged_keyword_sentences += keywords.repair.salvaged.len();
                counts.deterministic_keyword_sentences += keywords.repair.fallback.len();
                dropped += keywords.dropped_ids.len();
            }
        }
        summary.repairs = counts;
        summary.dropped_keyword_ids = dropped;
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
