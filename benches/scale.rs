//! Scale: a [`MemoryIndex`] over 10k, 100k and 1M synthetic turn units with stored vectors
//! (never embedded): `cargo bench --bench scale [-- sizes=10000,100000,1000000 queries=200]`.
//!
//! Each size runs in a child process of its own, so its resident memory is its own. Vectors are
//! 384-dimensional and unit-norm like all-MiniLM-L6-v2's, drawn from a seeded low-rank model
//! (`normalise(W·z + 0.3·e)`, z of `rank` = 32 dimensions, e isotropic noise): sentence
//! embeddings have a low intrinsic dimension, and uniformly random 384-dimension vectors (where
//! every vector is nearly equidistant from every other) would measure a case no memory has.
//! `rank=384` gives that case anyway. Every turn also has a short synthetic text (BM25 indexes
//! it) and sessions have 10 turns; the index holds turn vectors only (no graph: MemGAS's
//! association graph compares each new session with every earlier node, which is quadratic and
//! not meant for a million units).
//!
//! Reported per size: index build seconds; `turn` (dense) query p50/p99 through
//! [`MemoryIndex::rank`] against an exact scan of the same vectors; recall@10 of the index's
//! turn ranking against the exact top 10 (1.0 where the index is exact: below
//! `AnnOptions::threshold`, 50,000 turns, unless `threshold=` says otherwise); `bm25` and
//! `fusion` query p50 (whole-memory lexical scoring); resident memory after the build (`VmRSS`)
//! and its peak (`VmHWM`).
//!
//! The approximate index's settings can be overridden: `connectivity=`, `expansion_add=`,
//! `quantization=` (`f32`, `bf16`, `i8`) and `candidates=` (`AnnOptions::candidates`, the count
//! at the threshold; a list such as `candidates=100,150` measures the turn queries once per
//! value over the same graph, one row each).

#![allow(clippy::print_stdout)] // a benchmark reports on stdout

use std::time::Instant;

use anyhow::Context;
use mragent::retrieval::ann::{AnnOptions, AnnQuantization};
use mragent::retrieval::vector::dot;
use mragent::retrieval::{
    IndexNeeds, IndexOptions, MemoryIndex, Method, SessionUnits, SessionVectors, TurnUnit,
    VectorNeeds,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const DIMS: usize = 384;
const TURNS_PER_SESSION: usize = 10;
const WORDS: usize = 5000;

#[derive(Debug, Clone)]
struct Config {
    sizes: Vec<usize>,
    queries: usize,
    rank: usize,
    threshold: Option<usize>,
    candidates: Vec<usize>,
    connectivity: Option<usize>,
    expansion_add: Option<usize>,
    quantization: Option<AnnQuantization>,
    seed: u64,
}

fn parse(args: &[String]) -> anyhow::Result<(Config, Option<usize>)> {
    let mut config = Config {
        sizes: vec![10_000, 100_000, 1_000_000],
        queries: 200,
        rank: 32,
        threshold: None,
        candidates: Vec::new(),
        connectivity: None,
        expansion_add: None,
        quantization: None,
        seed: 7,
    };
    let mut child = None;
    for arg in args.iter().filter(|a| !a.starts_with("--")) {
        let (key, value) =
            arg.split_once('=').with_context(|| format!("expected key=value, got {arg}"))?;
        match key {
            "sizes" => {
                config.sizes = value.split(',').map(str::parse).collect::<Result<_, _>>()?;
            }
            "queries" => config.queries = value.parse()?,
            "rank" => config.rank = value.parse()?,
            "threshold" => config.threshold = Some(value.parse()?),
            "candidates" => {
                config.candidates = value.split(',').map(str::parse).collect::<Result<_, _>>()?;
            }
            "connectivity" => config.connectivity = Some(value.parse()?),
            "expansion_add" => config.expansion_add = Some(value.parse()?),
            "quantization" => {
                config.quantization = Some(serde_json::from_value(value.into())?);
            }
            "seed" => config.seed = value.parse()?,
            "child" => child = Some(value.parse()?),
            _ => anyhow::bail!("unknown option {key}"),
        }
    }
    Ok((config, child))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (config, child) = parse(&args)?;
    if let Some(size) = child {
        return measure(&config, size);
    }
    println!(
        "| turns | index | build s | turn p50 ms | turn p99 ms | exact scan p50 ms | exact scan p99 ms | recall@10 | bm25 p50 ms | fusion p50 ms | RSS MiB | peak MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for size in &config.sizes {
        let exe = std::env::current_exe()?;
        let mut command = std::process::Command::new(exe);
        command.args(args.iter().filter(|a| !a.starts_with("child="))).arg(format!("child={size}"));
        let status = command.status().context("running a size")?;
        anyhow::ensure!(status.success(), "size {size} failed");
    }
    Ok(())
}

/// The seeded low-rank vector model and the text vocabulary.
struct Generator {
    rng: ChaCha8Rng,
    basis: Vec<Vec<f32>>,
}

impl Generator {
    fn new(config: &Config) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let scale = 1.0 / (config.rank as f32).sqrt();
        let basis = (0..DIMS)
            .map(|_| (0..config.rank).map(|_| gaussian(&mut rng) * scale).collect())
            .collect();
        Self { rng, basis }
    }

    fn vector(&mut self) -> Vec<f32> {
        let z: Vec<f32> = (0..self.basis[0].len()).map(|_| gaussian(&mut self.rng)).collect();
        let mut v: Vec<f32> =
            self.basis.iter().map(|row| dot(row, &z) + 0.3 * gaussian(&mut self.rng)).collect();
        let norm = dot(&v, &v).sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
        v
    }

    fn text(&mut self) -> String {
        (0..8)
            .map(|_| {
                // Zipf-like: small word numbers are common.
                let u: f64 = self.rng.random();
                format!("w{}", (WORDS as f64).powf(u) as usize)
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A standard normal draw (Box–Muller).
fn gaussian(rng: &mut ChaCha8Rng) -> f32 {
    let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.random();
    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
}

/// The exact top 10 of each query, kept while the vectors stream past (no second copy).
struct ExactTop {
    queries: Vec<Vec<f32>>,
    best: Vec<Vec<(f32, usize)>>,
}

impl ExactTop {
    fn offer(&mut self, index: usize, vector: &[f32]) {
        for (query, best) in self.queries.iter().zip(&mut self.best) {
            let score = dot(query, vector);
            if best.len() < 10 || score > best[9].0 {
                best.push((score, index));
                best.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                best.truncate(10);
            }
        }
    }
}

/// The default [`AnnOptions`] with the command line's overrides.
fn ann_options(config: &Config) -> AnnOptions {
    let mut ann = AnnOptions::default();
    ann.threshold = config.threshold.unwrap_or(ann.threshold);
    ann.candidates = config.candidates.first().copied().unwrap_or(ann.candidates);
    ann.connectivity = config.connectivity.unwrap_or(ann.connectivity);
    ann.expansion_add = config.expansion_add.unwrap_or(ann.expansion_add);
    ann.quantization = config.quantization.unwrap_or(ann.quantization);
    ann
}

fn build(config: &Config, size: usize) -> anyhow::Result<(MemoryIndex, ExactTop, f64)> {
    let mut generator = Generator::new(config);
    let queries: Vec<Vec<f32>> = (0..config.queries).map(|_| generator.vector()).collect();
    let mut exact = ExactTop { best: vec![Vec::new(); queries.len()], queries };
    let options = IndexOptions { ann: ann_options(config), ..IndexOptions::default() };
    // Turn vectors and the memory's words (fusion's soft word matching); no graph.
    let needs = IndexNeeds {
        vectors: VectorNeeds { turns: true, ..VectorNeeds::NONE },
        graph: false,
        words: true,
    };
    let mut index = MemoryIndex::with_needs(options, needs);
    let mut build_seconds = 0.0;
    for session in 0..size.div_ceil(TURNS_PER_SESSION) {
        let first = session * TURNS_PER_SESSION;
        let count = TURNS_PER_SESSION.min(size - first);
        let mut turns = Vec::with_capacity(count);
        let mut vectors = Vec::with_capacity(count);
        for position in 0..count {
            let vector = generator.vector();
            exact.offer(first + position, &vector);
            vectors.push(vector);
            turns.push(TurnUnit {
                dia_id: format!("D{}:{}", session + 1, position + 1),
                speaker: "user".to_string(),
                text: generator.text(),
            });
        }
        let units = SessionUnits {
            session_id: format!("D{}", session + 1),
            date: None,
            turns,
            summary: None,
            keywords: None,
        };
        let started = Instant::now();
        index.add_session_vectors(
            units,
            SessionVectors { turns: Some(vectors), ..SessionVectors::default() },
        )?;
        build_seconds += started.elapsed().as_secs_f64();
    }
    // The words' vectors are stored like the turns' (seeded, never embedded).
    let words = index.words_without_vectors();
    let vectors = words.iter().map(|_| generator.vector()).collect();
    let started = Instant::now();
    index.set_word_vectors(&words, vectors);
    build_seconds += started.elapsed().as_secs_f64();
    Ok((index, exact, build_seconds))
}

fn measure(config: &Config, size: usize) -> anyhow::Result<()> {
    let (mut index, exact, build_seconds) = build(config, size)?;
    // One graph, several candidate counts (a query-time setting).
    let mut bases = config.candidates.clone();
    if bases.is_empty() {
        bases.push(index.options().ann.candidates);
    }
    let mut turn_rows = Vec::new();
    for &base in &bases {
        let mut options = *index.options();
        options.ann.candidates = base;
        index.set_query_options(&options);
        let (p50, p99, recall) = turn_queries(&index, &exact)?;
        let label = if index.is_approximate() {
            let ann = options.ann;
            format!(
                "approximate ({:?}, M {}, ef_add {}, {} candidates)",
                ann.quantization,
                ann.connectivity,
                ann.expansion_add,
                ann.candidates_for(size)
            )
        } else {
            "exact".to_string()
        };
        turn_rows.push((label, p50, p99, recall));
    }
    // The lexical and fusion queries below run with the first (default) candidate count.
    let mut options = *index.options();
    options.ann.candidates = bases[0];
    index.set_query_options(&options);
    // Before the exact scan below allocates its own flat copy.
    let (rss, peak) = memory_mib();
    let scan_ms = exact_scan_ms(config, size, &exact.queries[..exact.queries.len().min(20)]);
    let lexical = |method: Method| -> anyhow::Result<f64> {
        let mut times = Vec::new();
        for query in exact.queries.iter().take(20) {
            let started = Instant::now();
            index.rank(method, "w3 w17 w250", query)?;
            times.push(started.elapsed().as_secs_f64() * 1e3);
        }
        Ok(percentile(&mut times, 0.5))
    };
    let (bm25, fusion) = (lexical(Method::Bm25)?, lexical(Method::Fusion)?);
    for (label, p50, p99, recall) in turn_rows {
        println!(
            "| {size} | {label} | {build_seconds:.1} | {p50:.2} | {p99:.2} | {:.2} | {:.2} | {recall:.3} | {bm25:.1} | {fusion:.1} | {rss:.0} | {peak:.0} |",
            scan_ms.0, scan_ms.1,
        );
    }
    Ok(())
}

/// `turn` query p50 and p99 (ms) and mean recall@10 against the exact top 10.
fn turn_queries(index: &MemoryIndex, exact: &ExactTop) -> anyhow::Result<(f64, f64, f64)> {
    let mut turn_ms = Vec::new();
    let mut recall = 0.0;
    for (query, truth) in exact.queries.iter().zip(&exact.best) {
        let started = Instant::now();
        let ranking = index.rank(Method::Turn, "", query)?;
        turn_ms.push(started.elapsed().as_secs_f64() * 1e3);
        let top: Vec<usize> =
            ranking.turns.unwrap_or_default().iter().take(10).map(|t| t.index).collect();
        recall += truth.iter().filter(|(_, i)| top.contains(i)).count() as f64 / truth.len() as f64;
    }
    recall /= exact.queries.len() as f64;
    Ok((percentile(&mut turn_ms.clone(), 0.5), percentile(&mut turn_ms, 0.99), recall))
}

/// p50 and p99 of an exact scan over regenerated vectors (the index keeps its own private
/// copy), in a flat array the way a brute-force search would hold them.
fn exact_scan_ms(config: &Config, size: usize, queries: &[Vec<f32>]) -> (f64, f64) {
    let mut generator = Generator::new(config);
    for _ in 0..config.queries {
        generator.vector();
    }
    let flat: Vec<f32> = (0..size).flat_map(|_| generator.vector()).collect();
    let mut times: Vec<f64> = queries
        .iter()
        .map(|query| {
            let started = Instant::now();
            let scores: Vec<f32> = flat.chunks_exact(DIMS).map(|v| dot(v, query)).collect();
            std::hint::black_box(mragent::retrieval::vector::top_k(&scores, 10));
            started.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    (percentile(&mut times.clone(), 0.5), percentile(&mut times, 0.99))
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let at = ((values.len() as f64 - 1.0) * p).round() as usize;
    values.get(at).copied().unwrap_or(f64::NAN)
}

/// Resident and peak resident memory of this process, MiB.
fn memory_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}
