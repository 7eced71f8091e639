//! `mragent build`: build (or resume building) the memory of every selected conversation, and
//! with `--granules` the MemGAS granules; the first Ctrl-C stops it (finished sessions are
//! cached).

use anyhow::Context as _;

use super::interrupt::first_ctrl_c;
use super::output::outln;
use super::{Outcome, chat_client};
use crate::ingest::BuildSummary;
use crate::settings::{BuildJob, ModelSettings};

/// Builds, prints the build report (and the granules'), and says what a rerun would retry.
pub async fn execute(job: &BuildJob) -> anyhow::Result<Outcome> {
    job.models.require_key()?;
    let conversations = job.data.load()?;
    let summary = tokio::select! {
        summary = build(job, &conversations) => summary?,
        () = first_ctrl_c() => {
            eprintln!("interrupted: finished sessions are cached; run the same command again to resume");
            return Ok(Outcome::Partial);
        }
    };
    print_report(&summary)?;
    let mut complete = summary.is_complete();
    if job.granules {
        let chat = chat_client(&job.models, &job.models.build_model)?;
        let granules = crate::ingest::build_granules(&job.build, &chat, &conversations).await?;
        outln!("{granules}")?;
        complete &= granules.is_complete();
    }
    if complete {
        Ok(Outcome::Success)
    } else {
        eprintln!(
            "some sessions failed (listed above); run the same command again to retry only those"
        );
        Ok(Outcome::Partial)
    }
}

/// Build (or resume building) the memory of every conversation.
async fn build(
    job: &BuildJob,
    conversations: &[crate::dataset::Conversation],
) -> anyhow::Result<BuildSummary> {
    let chat = chat_client(&job.models, &job.models.build_model)?;
    let embedder = api_embedder(&job.models, &job.embedder)?;
    crate::ingest::build(&job.build, &chat, &embedder, conversations).await
}

/// The API embedder `embedder` on the endpoint of `models`.
pub(super) fn api_embedder(
    models: &ModelSettings,
    embedder: &crate::llm::EmbedderConfig,
) -> anyhow::Result<crate::llm::EmbedClient> {
    let config = models.llm_config(&models.build_model);
    crate::llm::build_embedder(&config, embedder).context("building the embedding client")
}

/// The report of a build, as `build` prints it and `run` (unless `-q`) before its own summary:
/// conversations, sessions and tokens, repairs (turns rewritten, salvaged or kept verbatim,
/// re-asked units), the per-conversation table, empty sessions and failed units.
pub(super) fn print_report(summary: &BuildSummary) -> anyhow::Result<()> {
    outln!("{summary}")
}
