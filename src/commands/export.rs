//! `mragent export`: one archive of a run (`.tar.zst`, see [`crate::recorded::archive`]) that
//! `mragent verify` checks offline; prints what went in.

use super::Outcome;
use super::output::outln;
use crate::recorded::archive::write_archive;
use crate::recorded::run_archive::collect;
use crate::settings::ExportJob;

/// Writes the archive and prints what went in.
pub fn execute(job: &ExportJob) -> anyhow::Result<Outcome> {
    let (index, sources) =
        if job.learn { crate::recorded::learn_archive::collect(job)? } else { collect(job)? };
    write_archive(&job.output, &index, &sources)?;
    let bytes = std::fs::metadata(&job.output).map(|meta| meta.len()).unwrap_or(0);
    let total: u64 = index.files.iter().map(|member| member.bytes).sum();
    let what = match (&job.vs, job.learn) {
        (_, true) => format!("learn run {}", job.file),
        (Some(other), false) => format!("runs {} and {other} and their comparison", job.file),
        (None, false) => format!("run {}", job.file),
    };
    outln!(
        "exported {what} ({} files, {} bytes unpacked) to {} ({bytes} bytes)",
        index.files.len(),
        total,
        job.output.display()
    )?;
    Ok(Outcome::Success)
}
