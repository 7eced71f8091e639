//! `mragent mcp`: the service with the embedder for new conversations (as `serve` builds it),
//! then the MCP tools on standard input and output until the client closes them or Ctrl-C.
//! Standard output carries the protocol alone: logs go to stderr and the log file.

use super::Outcome;
use super::interrupt::stop_signal;
use super::own::service;
use crate::settings::McpJob;

/// Serves one MCP client on stdio until it goes away (or the first Ctrl-C).
pub async fn execute(job: &McpJob) -> anyhow::Result<Outcome> {
    job.own.models.require_key()?;
    let service = service(&job.own, &job.own.service.embedder).await?;
    tracing::info!(embedder = %job.own.service.embedder, "serving MCP on stdio");
    crate::serve::mcp::serve_stdio(std::sync::Arc::new(service), stop_signal()).await?;
    Ok(Outcome::Success)
}
