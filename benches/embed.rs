//! Throughput of the local embedder on LoCoMo turn texts, against a plain candle port.
//!
//! `cargo bench --features candle-baseline --bench embed [-- N_TEXTS [THREADS [all|mragent]]]` embeds the first N_TEXTS (default 2000)
//! turns of `data/dataset_locomo.json` as `speaker: text` — the same list
//! `scripts/embed_reference.py bench` gives Python sentence-transformers — and prints texts/second
//! (best of 3) for:
//! - `mragent`: [`LocalEmbedder`] (packed batches, one chunk per thread);
//! - `candle-bert`: `candle_transformers::models::bert::BertModel` used the plain way (batches of
//!   32 in input order, padded to the longest, masked attention, candle's own threading), the port
//!   that was first measured at about 0.55× of Python;
//! - `candle-bert-sorted`: the same with texts sorted by length first (less padding);
//! - `tokenize`: tokenisation alone.
//!
//! With `MRAGENT_BENCH_PYTHON=/path/to/venv/bin/python` (a venv with sentence-transformers, see
//! `scripts/embed_reference.py`) the same run then measures Python on the same texts and threads
//! and prints the ratio. The machine's load average is printed beside every number: compare only
//! numbers taken on an idle machine (load well below the core count).

#![allow(clippy::print_stdout)] // a benchmark reports on stdout

use std::path::PathBuf;
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use mragent::embedding::{LocalEmbedder, LocalEmbedderOptions};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let n_texts: usize = args.first().map(|a| a.parse()).transpose()?.unwrap_or(2000);
    let threads: usize = args.get(1).map(|a| a.parse()).transpose()?.unwrap_or(2);
    let which = args.get(2).map_or("all", String::as_str);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let texts = locomo_turn_texts(&root.join("data/dataset_locomo.json"), n_texts)?;
    let model_dir = mragent::settings::model_source(&root.join("data")).resolve()?;

    let embedder = LocalEmbedder::load(
        &model_dir,
        LocalEmbedderOptions { threads, ..LocalEmbedderOptions::default() },
    )?;
    let tokens: usize =
        texts.iter().map(|t| embedder.token_ids(t).map(|ids| ids.len()).unwrap_or(0)).sum();
    println!(
        "{} texts, {tokens} word pieces ({:.1} per text), {threads} threads",
        texts.len(),
        tokens as f64 / texts.len() as f64
    );

    println!(
        "mragent {} (gemm 0.19 with x86-v4), CPU avx512f: {}",
        env!("CARGO_PKG_VERSION"),
        has_avx512f()
    );
    embedder.embed_blocking(&texts[..texts.len().min(64)])?;
    let ours = best_of(3, || Ok(embedder.embed_blocking(&texts).map(|_| ())?))?;
    report("mragent", texts.len(), ours.clone());
    if let Some(python) = std::env::var_os("MRAGENT_BENCH_PYTHON") {
        let theirs = python_reference(&python, &root, &model_dir, n_texts, threads)?;
        println!(
            "{:>20}: mragent / python = {:.2}x (wall texts/s)",
            "ratio",
            (texts.len() as f64 / ours.wall) / theirs
        );
    }

    if which == "mragent" {
        return Ok(());
    }
    let tokenizer = plain_tokenizer(&model_dir, None)?;
    report(
        "tokenize",
        texts.len(),
        best_of(3, || {
            tokenizer
                .encode_batch(texts.clone(), true)
                .map(|_| ())
                .map_err(|e| anyhow::anyhow!("{e}"))
        })?,
    );

    // SAFETY of the env var write: single-threaded at this point; candle reads it per matmul.
    unsafe { std::env::set_var("RAYON_NUM_THREADS", threads.to_string()) };
    let plain = PlainCandle::load(&model_dir)?;
    report("candle-bert", texts.len(), best_of(3, || plain.embed(&texts, false))?);
    report("candle-bert-sorted", texts.len(), best_of(3, || plain.embed(&texts, true))?);
    Ok(())
}

/// Wall seconds and CPU seconds (all threads of the process) of the best run.
#[derive(Clone)]
struct Timing {
    wall: f64,
    cpu: f64,
}

fn report(name: &str, n: usize, timing: Timing) {
    println!(
        "{name:>20}: wall {:8.3} s {:8.1} texts/s | cpu {:8.3} s {:8.1} texts per cpu-second | load {}",
        timing.wall,
        n as f64 / timing.wall,
        timing.cpu,
        n as f64 / timing.cpu,
        load_average()
    );
}

/// The first three fields of `/proc/loadavg` (1, 5 and 15 minutes).
fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

fn has_avx512f() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    return false;
}

/// Runs `scripts/embed_reference.py bench` (same texts, same thread count), echoes its output
/// with the load average, and returns its wall texts/s. OpenBLAS overrides of this machine are
/// removed for it (they slow numpy; torch's own kernels do the work).
fn python_reference(
    python: &std::ffi::OsStr,
    root: &std::path::Path,
    model_dir: &std::path::Path,
    n_texts: usize,
    threads: usize,
) -> anyhow::Result<f64> {
    let output = std::process::Command::new(python)
        .arg(root.join("scripts/embed_reference.py"))
        .arg("bench")
        .arg(model_dir)
        .arg(n_texts.to_string())
        .env("THREADS", threads.to_string())
        .env_remove("OPENBLAS_CORETYPE")
        .env_remove("OPENBLAS_L2_SIZE")
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "python reference failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    for line in stdout.lines() {
        println!("{line} | load {}", load_average());
    }
    let rate = stdout
        .lines()
        .find(|line| line.starts_with("python sentence-transformers"))
        .unwrap_or_default()
        .split(" s ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse::<f64>().ok());
    rate.ok_or_else(|| anyhow::anyhow!("no texts/s in the python output: {stdout}"))
}

fn best_of(runs: usize, mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<Timing> {
    let mut best = Timing { wall: f64::INFINITY, cpu: f64::INFINITY };
    for _ in 0..runs {
        let cpu_start = process_cpu_seconds();
        let start = Instant::now();
        f()?;
        let wall = start.elapsed().as_secs_f64();
        let cpu = process_cpu_seconds() - cpu_start;
        if wall < best.wall {
            best = Timing { wall, cpu };
        }
    }
    Ok(best)
}

/// User + system CPU time of this process from `/proc/self/stat` (clock ticks of 1/100 s); the
/// machine is shared, so CPU time is the steadier measure when others are busy.
fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |index: usize| fields.get(index).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn locomo_turn_texts(path: &std::path::Path, limit: usize) -> anyhow::Result<Vec<String>> {
    let samples: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let mut texts = Vec::new();
    for sample in &samples {
        let conversation = &sample["conversation"];
        let mut index = 1;
        while let Some(turns) =
            conversation.get(format!("session_{index}")).and_then(|v| v.as_array())
        {
            for turn in turns {
                let speaker = turn["speaker"].as_str().unwrap_or_default();
                let text = turn["text"].as_str().unwrap_or_default();
                texts.push(format!("{speaker}: {text}"));
            }
            index += 1;
        }
    }
    texts.truncate(limit);
    Ok(texts)
}

fn plain_tokenizer(
    model_dir: &std::path::Path,
    padding: Option<PaddingParams>,
) -> anyhow::Result<Tokenizer> {
    let mut tokenizer = Tokenizer::from_file(model_dir.join("tokenizer.json"))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    tokenizer
        .with_truncation(Some(TruncationParams { max_length: 256, ..TruncationParams::default() }))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    tokenizer.with_padding(padding);
    Ok(tokenizer)
}

/// The straightforward candle port: BertModel, padded batches of 32, masked mean pooling.
struct PlainCandle {
    model: BertModel,
    tokenizer: Tokenizer,
}

impl PlainCandle {
    fn load(model_dir: &std::path::Path) -> anyhow::Result<Self> {
        let config: Config =
            serde_json::from_str(&std::fs::read_to_string(model_dir.join("config.json"))?)?;
        // SAFETY: the weights file is not modified while mapped.
        let vb = unsafe {
            VarBuilder::from_mmaped_safetensors(
                &[model_dir.join("model.safetensors")],
                DType::F32,
                &Device::Cpu,
            )?
        };
        let model = BertModel::load(vb, &config)?;
        let padding =
            PaddingParams { strategy: PaddingStrategy::BatchLongest, ..PaddingParams::default() };
        Ok(Self { model, tokenizer: plain_tokenizer(model_dir, Some(padding))? })
    }

    fn embed(&self, texts: &[String], sort: bool) -> anyhow::Result<()> {
        let mut order: Vec<usize> = (0..texts.len()).collect();
        if sort {
            order.sort_by_key(|&i| std::cmp::Reverse(texts[i].len()));
        }
        for batch in order.chunks(32) {
            let inputs: Vec<String> = batch.iter().map(|&i| texts[i].clone()).collect();
            let encodings =
                self.tokenizer.encode_batch(inputs, true).map_err(|e| anyhow::anyhow!("{e}"))?;
            let ids: Vec<Vec<u32>> = encodings.iter().map(|e| e.get_ids().to_vec()).collect();
            let mask: Vec<Vec<u32>> =
                encodings.iter().map(|e| e.get_attention_mask().to_vec()).collect();
            let ids = Tensor::new(ids, &Device::Cpu)?;
            let mask = Tensor::new(mask, &Device::Cpu)?;
            let types = ids.zeros_like()?;
            let hidden = self.model.forward(&ids, &types, Some(&mask))?;
            let mask_f = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let summed = hidden.broadcast_mul(&mask_f)?.sum(1)?;
            let pooled = summed.broadcast_div(&mask_f.sum(1)?)?;
            let _normalised = pooled.broadcast_div(&pooled.sqr()?.sum_keepdim(1)?.sqrt()?)?;
        }
        Ok(())
    }
}
