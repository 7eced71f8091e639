//! Retrieval over a whole dataset: `cargo bench --bench retrieval [-- OPTIONS]`.
//!
//! Runs [`run_retrieval_eval`] (all methods by default) on `data/dataset_locomo.json` with the
//! local embedder and prints the markdown tables and timings; the files land in
//! `eval/locomo/retrieve/`. Options are `key=value` words:
//! `methods=memgas,turn,bm25`, `samples=conv-26`, `turn_context=1`, `session_chunk_chars=1000`,
//! `router=inverse-entropy|one-minus-entropy|normalized-entropy|uniform`, `temperature=0.2`,
//! `seeds=15`, `damping=0.1`, `mem_threshold=30`, `llm_units=PATH`, `threads=2`.
//! The first run embeds every unit (cached under `data/locomo/embedding/`); later runs reuse it.

#![allow(clippy::print_stdout)] // a benchmark reports on stdout

use std::path::PathBuf;

use anyhow::Context;
use mragent::dataset::DatasetKind;
use mragent::embedding::MODEL_DIR_ENV;
use mragent::retrieval::Method;
use mragent::tune::{RetrieveSettings, run_retrieval_eval};

fn main() -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut settings = RetrieveSettings::new(&root, DatasetKind::Locomo);
    settings.embed_model_dir =
        std::env::var_os(MODEL_DIR_ENV).filter(|v| !v.is_empty()).map(PathBuf::from);
    for arg in std::env::args().skip(1).filter(|a| !a.starts_with("--")) {
        let (key, value) =
            arg.split_once('=').with_context(|| format!("expected key=value, got {arg}"))?;
        let index = &mut settings.index;
        match key {
            "methods" => {
                settings.methods = value
                    .split(',')
                    .map(|name| {
                        Method::parse(name).with_context(|| format!("unknown method {name}"))
                    })
                    .collect::<anyhow::Result<_>>()?;
            }
            "samples" => settings.samples = value.split(',').map(str::to_string).collect(),
            "turn_context" => index.units.turn_context = value.parse()?,
            "turn_context_after" => index.units.turn_context_after = value.parse()?,
            "lexical_turn_context" => index.units.lexical_turn_context = value.parse()?,
            "session_chunk_chars" => index.units.session_chunk_chars = value.parse()?,
            "router" => {
                index.memgas.router =
                    serde_json::from_value(serde_json::Value::String(value.to_string()))?;
            }
            "temperature" => index.memgas.temperature = value.parse()?,
            "seeds" => index.memgas.n_seeds = value.parse()?,
            "damping" => index.memgas.damping = value.parse()?,
            "mem_threshold" => index.graph.mem_threshold = value.parse()?,
            "w_bm25" => index.fusion.bm25 = value.parse()?,
            "w_dense" => index.fusion.dense = value.parse()?,
            "w_session_bm25" => index.fusion.session_bm25 = value.parse()?,
            "w_session_dense" => index.fusion.session_dense = value.parse()?,
            "session_top_turns" => index.fusion.session_top_turns = value.parse()?,
            "session_turn_decay" => index.fusion.session_turn_decay = value.parse()?,
            "normalisation" => {
                index.fusion.normalisation =
                    serde_json::from_value(serde_json::Value::String(value.to_string()))?;
            }
            "w_date" => index.fusion.date = value.parse()?,
            "date_next_month" => index.fusion.date_next_month = value.parse()?,
            "k1" => index.bm25.k1 = value.parse()?,
            "b" => index.bm25.b = value.parse()?,
            "drop_question_words" => index.bm25.drop_question_words = value.parse()?,
            "w_memgas" => index.fusion.memgas = value.parse()?,
            "w_turn" => index.fusion.turn_to_session = value.parse()?,
            "w_session" => index.fusion.session_to_turn = value.parse()?,
            "llm_units" => settings.llm_units = Some(PathBuf::from(value)),
            "threads" => settings.embed_threads = value.parse()?,
            _ => anyhow::bail!("unknown option {key}"),
        }
    }
    let report = run_retrieval_eval(&settings)?;
    println!("{}", report.markdown);
    println!("written: {}", report.markdown_path.display());
    Ok(())
}
