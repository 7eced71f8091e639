//! `mragent serve`: the service with the embedder for new conversations, then the HTTP server
//! until Ctrl-C.

use anyhow::Context as _;

use super::Outcome;
use super::interrupt::stop_signal;
use super::own::service;
use crate::settings::ServeJob;

/// Serves until the first Ctrl-C, then shuts down gracefully.
pub async fn execute(job: &ServeJob) -> anyhow::Result<Outcome> {
    job.own.models.require_key()?;
    let service = service(&job.own, &job.own.service.embedder).await?;
    let listener = tokio::net::TcpListener::bind(job.bind)
        .await
        .with_context(|| format!("binding {}", job.bind))?;
    // The address bound (with port 0, the one the system chose).
    let address = listener.local_addr().unwrap_or(job.bind);
    let auth = job.options.token.is_some() || !job.options.named_tokens.is_empty();
    tracing::info!(%address, auth, "serving");
    let scheme = if job.options.tls.is_some() { "https" } else { "http" };
    eprintln!("serving on {scheme}://{address} (OpenAPI at /openapi.json, metrics at /metrics)");
    let rules = &job.own.service.rules;
    if !rules.is_empty() {
        eprintln!("every ask uses {} meta rules ({})", rules.rules.len(), rules.hash());
    }
    let options = job.options.clone();
    crate::serve::serve(listener, std::sync::Arc::new(service), options, stop_signal()).await?;
    Ok(Outcome::Success)
}
