//! The three stage caches of one conversation ([`SampleCaches`]), what each stage's cache
//! entry for a unit must match, and the caches as the stage sequence's sink during a build
//! ([`SampleRun`]: cached stages are skipped, each answer is settled into its cache, the
//! tally and the progress bar).

use std::sync::Mutex as StdMutex;

use tokio::sync::Mutex;

use crate::dataset::Conversation;
use crate::ingest::cache::{PlannedUnit, StageCache, StageProvenance};
use crate::ingest::embed::{EmbeddingStageCache, UnitTexts};
use crate::ingest::keywords::{self, KeywordRecord};
use crate::ingest::pipeline::{AskFailure, Asked, EmbedError, Embedded, StageSink};
use crate::ingest::progress::BuildProgress;
use crate::ingest::repair::Repair;
use crate::ingest::rewrite::RewriteRecord;
use crate::ingest::summary::{RepairCounts, SampleSummary, Stage};
use crate::ingest::unit::{Unit, plan_units};
use crate::ingest::workers::{
    ConversationTally, Ledger, Pool, abort_if_fatal, failed_unit, settle,
};
use crate::ingest::{BuildSettings, StageOutputs};
use crate::memory::input::SessionRewrite;
use crate::prompts::{self, PromptError};

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
        let provenance =
            |stage: &str, model: &str, versions: Vec<(String, String)>| StageProvenance {
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

/// One conversation's build in progress, the sink of its units' stages: its caches behind
/// async locks (held across the cache write, so writes of one file never interleave and the
/// last write holds every unit), what this build spent and what failed, and the run's pool
/// (progress bar, ask settings).
pub(super) struct SampleRun<'c> {
    pub(super) pool: &'c Pool,
    pub(super) conversation: &'c Conversation,
    pub(super) rewrite: Mutex<StageCache<RewriteRecord>>,
    pub(super) keywords: Mutex<StageCache<KeywordRecord>>,
    pub(super) embeddings: Mutex<EmbeddingStageCache>,
    pub(super) tally: StdMutex<ConversationTally>,
}

impl<'c> SampleRun<'c> {
    /// The run of `conversation` over `caches`, nothing spent yet.
    pub(super) fn new(
        pool: &'c Pool,
        conversation: &'c Conversation,
        caches: SampleCaches,
    ) -> Self {
        Self {
            pool,
            conversation,
            rewrite: Mutex::new(caches.rewrite),
            keywords: Mutex::new(caches.keywords),
            embeddings: Mutex::new(caches.embeddings),
            tally: StdMutex::new(ConversationTally::default()),
        }
    }

    /// The caches and the tally, once every unit is settled.
    pub(super) fn finish(self) -> (SampleCaches, ConversationTally) {
        let caches = SampleCaches {
            rewrite: self.rewrite.into_inner(),
            keywords: self.keywords.into_inner(),
            embeddings: self.embeddings.into_inner(),
            notices: Vec::new(),
        };
        (caches, ConversationTally::take(self.tally))
    }

    pub(super) fn tally(&self) -> std::sync::MutexGuard<'_, ConversationTally> {
        self.tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn ledger(&self) -> Ledger<'_> {
        Ledger {
            progress: &self.pool.progress,
            conversation: self.conversation,
            tally: &self.tally,
        }
    }

    fn progress(&self) -> &BuildProgress {
        &self.pool.progress
    }

    /// Show a unit's repair on the progress bar and in the log.
    fn report_repair(&self, unit: &Unit<'_>, stage: Stage, repair: &Repair) {
        if repair.is_clean() {
            return;
        }
        self.progress().repaired(stage, repair);
        tracing::warn!(sample = %self.conversation.sample_id, unit = %unit.key, %stage, reasks = repair.reasks, salvaged = repair.salvaged.len(), fallback = ?repair.fallback, "model answer repaired");
    }
}

/// A build's stages skip what the caches hold and settle every answer into them. A failed stage
/// is recorded (cache, tally, progress) and ends the unit; only what would fail every unit
/// alike aborts the build.
impl StageSink for SampleRun<'_> {
    type Error = anyhow::Error;

    fn prompt_failed(&self, _stage: Stage, error: PromptError) -> anyhow::Error {
        error.into()
    }

    async fn kept_rewrite(&self, unit: &Unit<'_>) -> Option<SessionRewrite> {
        let planned = rewrite_planned(unit);
        self.rewrite.lock().await.done(&planned).map(|record| record.rewrite.clone())
    }

    async fn put_rewrite(
        &self,
        unit: &Unit<'_>,
        asked: Result<Asked<RewriteRecord>, AskFailure>,
    ) -> anyhow::Result<Option<SessionRewrite>> {
        if let Ok(asked) = &asked {
            self.report_repair(unit, Stage::Rewrite, &asked.value.repair);
        }
        let planned = rewrite_planned(unit);
        let settled =
            settle(self.ledger(), unit, Stage::Rewrite, &planned, asked, &self.rewrite).await?;
        Ok(settled.map(|record| record.rewrite))
    }

    async fn kept_keywords(&self, unit: &Unit<'_>, rewrite: &SessionRewrite) -> bool {
        let planned = keyword_planned(unit, rewrite);
        self.keywords.lock().await.done(&planned).is_some()
    }

    async fn put_keywords(
        &self,
        unit: &Unit<'_>,
        rewrite: &SessionRewrite,
        asked: Result<Asked<KeywordRecord>, AskFailure>,
    ) -> anyhow::Result<bool> {
        if let Ok(asked) = &asked {
            self.report_repair(unit, Stage::Keywords, &asked.value.repair);
        }
        let planned = keyword_planned(unit, rewrite);
        let settled =
            settle(self.ledger(), unit, Stage::Keywords, &planned, asked, &self.keywords).await?;
        let Some(keywords) = settled else {
            return Ok(false);
        };
        if !keywords.dropped_ids.is_empty() {
            tracing::warn!(sample = %self.conversation.sample_id, unit = %unit.key, ids = ?keywords.dropped_ids, "keyword answer named unknown sentence ids; dropped them");
        }
        Ok(true)
    }

    async fn kept_embeddings(&self, unit: &Unit<'_>, texts: &UnitTexts) -> bool {
        self.embeddings.lock().await.unit_done(&embedding_planned_of(unit, texts))
    }

    async fn put_embeddings(
        &self,
        unit: &Unit<'_>,
        texts: &UnitTexts,
        embedded: Result<Embedded, EmbedError>,
    ) -> anyhow::Result<()> {
        match embedded {
            Ok(embedded) => {
                self.progress().tokens(embedded.usage);
                self.tally().usage += embedded.usage;
                let planned = embedding_planned_of(unit, texts);
                self.embeddings.lock().await.record_unit(&planned, texts, embedded).await?;
            }
            Err(error) => {
                if let EmbedError::Llm(llm_error) = &error {
                    abort_if_fatal(llm_error)?;
                }
                self.progress().failure();
                tracing::warn!(sample = %self.conversation.sample_id, unit = %unit.key, error = %error, "embedding failed");
                self.tally().failed.push(failed_unit(
                    self.conversation,
                    unit,
                    Stage::Embeddings,
                    error.to_string(),
                    0,
                ));
            }
        }
        Ok(())
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
    (embedding_planned_of(unit, &texts), texts)
}

fn embedding_planned_of(unit: &Unit<'_>, texts: &UnitTexts) -> PlannedUnit {
    PlannedUnit {
        key: unit.key.clone(),
        first_session: unit.first_session,
        input_hash: texts.input_hash(),
    }
}
