//! `mragent trace`: a question's trace (prompts, tool calls, results, tokens) as a timeline or
//! as JSON lines.

use super::Outcome;
use super::output::out;
use crate::settings::TraceJob;

/// Renders the trace of the job's target and prints it.
pub fn execute(job: &TraceJob) -> anyhow::Result<Outcome> {
    out!("{}", crate::agent::render::render_trace(&job.root, &job.target, &job.options)?)?;
    Ok(Outcome::Success)
}
