//! Benchmark: build the memory graphs of all 10 LoCoMo conversations from stage outputs, and
//! report time (criterion) and memory (a counting allocator for heap bytes, `VmHWM` for the
//! process peak).
//!
//! Real cached stage files do not exist in the repository, so the stage outputs are generated
//! here, deterministically, from the LoCoMo turns: one sentence per turn (the turn text, dated
//! with its session), tag = its first two content words, three topics per session, one personal
//! fact every fifth turn, keywords = the turn's distinct content words (at most 12). That is
//! roughly the shape and size the rewrite and keyword stages produce.
//!
//! Run: `cargo bench --bench graph_build`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use criterion::Criterion;
use mragent::dataset::{Conversation, DatasetKind, default_path, load_locomo};
use mragent::memory::input::{
    PersonalFact, RewrittenSentence, SentenceKeywords, SessionKeywords, SessionRewrite, TopicInput,
};
use mragent::memory::query::{QueryKeyword, match_keywords};
use mragent::memory::{MemoryGraph, build_graph};

/// Counts live heap bytes and their peak, so the bench can report what building the graphs
/// allocates (the system allocator does the work).
struct CountingAllocator;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counters only observe.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(pointer, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const STOP_WORDS: &[&str] = &[
    "about", "after", "again", "also", "been", "before", "being", "could", "does", "doing", "from",
    "have", "having", "here", "just", "like", "more", "much", "only", "other", "really", "same",
    "some", "such", "than", "that", "their", "them", "then", "there", "these", "they", "thing",
    "things", "this", "those", "very", "what", "when", "where", "which", "while", "with", "would",
    "your", "yours", "will", "were", "into", "over", "know", "think", "it's", "i'm", "that's",
];

fn content_words(text: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for word in text.split(|c: char| !(c.is_alphanumeric() || c == '\'')) {
        let word = word.trim_matches('\'').to_lowercase();
        if word.chars().count() > 3
            && !STOP_WORDS.contains(&word.as_str())
            && !words.contains(&word)
        {
            words.push(word);
        }
    }
    words
}

/// Synthetic stage-1 and stage-2 outputs for one conversation (see the module doc).
fn synthetic_stages(conversation: &Conversation) -> (Vec<SessionRewrite>, Vec<SessionKeywords>) {
    let mut rewrites = Vec::new();
    let mut keywords = Vec::new();
    for session in &conversation.sessions {
        let session_id = session.id();
        let chunk = session.turns.len().div_ceil(3).max(1);
        let mut sentences = Vec::new();
        let mut sentence_keywords = Vec::new();
        let mut topics = Vec::new();
        let mut facts = Vec::new();
        for (position, turn) in session.turns.iter().enumerate() {
            let words = content_words(&turn.text);
            let topic_id = format!("{session_id}:t{}", position / chunk + 1);
            if position % chunk == 0 {
                let text = turn
                    .text
                    .split(['.', '!', '?'])
                    .next()
                    .unwrap_or(&turn.text)
                    .trim()
                    .to_string();
                topics.push(TopicInput { id: topic_id.clone(), text });
            }
            let sentence_id = format!("{}-1", turn.dia_id);
            let tag = words.iter().take(2).cloned().collect::<Vec<_>>().join(" ");
            sentences.push(RewrittenSentence {
                id: sentence_id.clone(),
                origin: turn.dia_id.clone(),
                text: turn.text.clone(),
                date: session.date,
                tag: if tag.is_empty() { "chat".to_string() } else { tag },
                topic_ids: vec![topic_id],
            });
            if position % 5 == 0 {
                facts.push(PersonalFact {
                    id: format!("{session_id}:p{}", position / 5 + 1),
                    person: turn.speaker.clone(),
                    aspect: words.first().cloned().unwrap_or_else(|| "general".to_string()),
                    fact: turn.text.clone(),
                    origins: vec![turn.dia_id.clone()],
                });
            }
            sentence_keywords.push(SentenceKeywords {
                sentence_id,
                keywords: words.into_iter().take(12).collect(),
            });
        }
        rewrites.push(SessionRewrite {
            session: session_id.clone(),
            conversation_time: session.date,
            sentences,
            topics,
            personal_facts: facts,
        });
        keywords.push(SessionKeywords { session: session_id, sentences: sentence_keywords });
    }
    (rewrites, keywords)
}

type Inputs = Vec<(Conversation, Vec<SessionRewrite>, Vec<SessionKeywords>)>;

fn build_all(inputs: &Inputs) -> Vec<MemoryGraph> {
    inputs
        .iter()
        .map(|(conversation, rewrites, keywords)| {
            build_graph(conversation, rewrites, keywords)
                .unwrap_or_else(|error| panic!("build failed: {error}"))
        })
        .collect()
}

/// CPU time of this (single-threaded) process so far, in nanoseconds; unlike wall time it does
/// not grow when other jobs compete for the cores.
fn cpu_time_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/self/schedstat").ok()?.split_whitespace().next()?.parse().ok()
}

fn vm_hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[allow(clippy::cast_precision_loss)]
fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let conversations = load_locomo(&default_path(root, DatasetKind::Locomo))
        .unwrap_or_else(|error| panic!("loading LoCoMo: {error}"));
    let inputs: Inputs = conversations
        .into_iter()
        .map(|conversation| {
            let (rewrites, keywords) = synthetic_stages(&conversation);
            (conversation, rewrites, keywords)
        })
        .collect();

    // Memory of one build of all ten graphs, measured before criterion's repetitions.
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let graphs = build_all(&inputs);
    let retained = LIVE.load(Ordering::Relaxed).saturating_sub(before);
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    let totals = graphs.iter().fold([0usize; 6], |mut sum, graph| {
        let stats = graph.stats();
        for (slot, value) in sum.iter_mut().zip([
            stats.episodes,
            stats.keys,
            stats.topics,
            stats.persons,
            stats.dates,
            stats.edges,
        ]) {
            *slot += value;
        }
        sum
    });
    eprintln!(
        "graph_build: 10 LoCoMo graphs: {} episodes, {} keys, {} topics, {} persons, {} dates, {} edges",
        totals[0], totals[1], totals[2], totals[3], totals[4], totals[5]
    );
    eprintln!(
        "graph_build: heap peak during build {:.1} MiB, retained by the graphs {:.1} MiB, process VmHWM {} KiB",
        mib(peak),
        mib(retained),
        vm_hwm_kib().map_or_else(|| "unknown".to_string(), |kib| kib.to_string())
    );

    const CPU_RUNS: u32 = 20;
    if let Some(start) = cpu_time_ns() {
        for _ in 0..CPU_RUNS {
            black_box(build_all(&inputs));
        }
        if let Some(end) = cpu_time_ns() {
            #[allow(clippy::cast_precision_loss)]
            let per_build_ms = (end - start) as f64 / f64::from(CPU_RUNS) / 1e6;
            eprintln!(
                "graph_build: CPU time per build of all 10 graphs {per_build_ms:.1} ms (mean of {CPU_RUNS})"
            );
        }
    }

    let mut criterion = Criterion::default().configure_from_args();
    criterion.bench_function("build_graph/locomo_all_10", |bencher| {
        bencher.iter(|| black_box(build_all(&inputs)))
    });
    let question = [
        QueryKeyword { id: "Caroline".into(), alternatives: vec![] },
        QueryKeyword {
            id: "LGBTQ support group".into(),
            alternatives: vec!["support group".into()],
        },
    ];
    criterion.bench_function("match_keywords/conv-26", |bencher| {
        bencher.iter(|| black_box(match_keywords(&graphs[0], &question)))
    });
    criterion.final_summary();
}
