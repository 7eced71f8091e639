//! `mragent store copy`: a whole own-data store into an empty one (SQLite to PostgreSQL or
//! back), verified table by table (`store::copy_store`).

use anyhow::Context as _;

use super::Outcome;
use super::output::outln;
use crate::cli::StoreCopyArgs;
use crate::store::{CopiedTable, Store, copy_store, shown_url};

/// Copies, verifies and prints each table (rows and content hash), or one JSON object.
pub async fn execute(args: StoreCopyArgs) -> anyhow::Result<Outcome> {
    let started = std::time::Instant::now();
    let (from, to) = (args.from.clone(), args.to.clone());
    let copied = tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<CopiedTable>> {
        let source = Store::open_url(&from)
            .with_context(|| format!("opening the source store {}", shown_url(&from)))?;
        let destination = Store::open_url(&to)
            .with_context(|| format!("opening the destination store {}", shown_url(&to)))?;
        let copied = copy_store(&source, &destination, |table| {
            tracing::info!(table = %table.table, rows = table.rows, "copied and verified");
        })?;
        Ok(copied)
    })
    .await
    .context("the copy task failed")??;
    let seconds = started.elapsed().as_secs_f64();
    if args.json {
        let report = serde_json::json!({
            "from": shown_url(&args.from),
            "to": shown_url(&args.to),
            "tables": copied,
            "seconds": seconds,
            "verified": true,
        });
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(Outcome::Success);
    }
    for table in &copied {
        outln!("{:<17} {:>8} rows  sha256 {}", table.table, table.rows, &table.sha256[..16])?;
    }
    let rows: u64 = copied.iter().map(|table| table.rows).sum();
    outln!(
        "copied {rows} rows from {} to {} in {seconds:.1} s; every table verified (row count and content hash)",
        shown_url(&args.from),
        shown_url(&args.to)
    )?;
    Ok(Outcome::Success)
}
