//! `mragent ask`: answer one question about a stored conversation with the tool loop, and
//! print the answer, its supporting lines and the trace path.

use super::Outcome;
use super::output::outln;
use super::own::{operator, scope_embedder, service};
use crate::service::{AskReport, ops};
use crate::settings::AskJob;

/// Asks and prints the report; a failed question is an error (after the report).
pub async fn execute(job: &AskJob) -> anyhow::Result<Outcome> {
    let spec = scope_embedder(&job.own.paths, &job.scope)?;
    job.own.models.require_key()?;
    let service = service(&job.own, &spec).await?;
    let report = ops::ask::run(&service, &operator(), &job.scope, &job.request, None).await?;
    if job.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print_report(&report)?;
    }
    match &report.error {
        Some(error) => Err(anyhow::anyhow!("the question failed: {error}")),
        None => Ok(Outcome::Success),
    }
}

/// The answer (or `(no answer)`), the supporting lines, the sessions left out, the rules' hash
/// (when the loop had rules), the question id and the trace.
fn print_report(report: &AskReport) -> anyhow::Result<()> {
    outln!("{}", if report.ok { &report.answer } else { "(no answer)" })?;
    let other = |conversation: &str| conversation != report.conversation;
    for line in &report.supporting {
        let date = line.date.as_deref().unwrap_or("?");
        let place = if other(&line.conversation) {
            format!("{} {}", line.conversation, line.dia_id)
        } else {
            line.dia_id.clone()
        };
        outln!("  [{place}] {date} {}: {}", line.speaker, line.text)?;
    }
    for missing in &report.missing_sessions {
        let why = missing.error.as_deref().unwrap_or("never built; run the add again");
        outln!(
            "note: answered without session {} of {} ({} messages not built: {why})",
            missing.session,
            missing.conversation,
            missing.messages
        )?;
    }
    if let Some(at) = &report.as_of {
        outln!("as of: {at}")?;
    }
    if let Some(hash) = &report.meta_rules {
        outln!("meta rules: {hash}")?;
    }
    outln!("question: {}", report.question_id)?;
    outln!("trace: {}", report.trace.display())?;
    Ok(())
}
