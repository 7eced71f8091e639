//! `mragent export`: one archive of a run (`.tar.zst`, see [`crate::recorded::archive`]) that
//! `mragent verify` checks offline; prints what went in.

use super::Outcome;
use super::output::outln;
use crate::recorded::archive::{collect, write_archive};
use crate::settings::ExportJob;

/// Writes the archive and prints what went in.
pub fn execute(job: &ExportJob) -> anyhow::Result<Outcome> {
    let (index, sources) =
        if job.learn { crate::recorded::learn_archive::collect(job)? } else { collect(job)? };
    write_archive(&job.output, &index, &sources)?;
    let bytes = std::fs::metadata(&job.output).map(|meta| meta.len()).unwrap_or(0);
    let total: u64 = index.files.iter().map(|member| member.bytes).sum();
    outln!(
        "exported {} {} ({} files, {} bytes unpacked) to {} ({bytes} bytes)",
        if job.learn { "learn run" } else { "run" },
        job.file,
        index.files.len(),
        total,
        job.output.display()
    )?;
    Ok(Outcome::Success)
}
