//! The service's memory budget (`service::cache`): cached conversations and query vectors stay
//! within `--cache-mb`, the least recently used whole entries are evicted, an evicted
//! conversation answers exactly as before, a query in flight keeps the entry it took, the build
//! gates do not accumulate, and a query already embedded is not sent to the endpoint again.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mragent::llm::build_chat_model;
use mragent::llm::scripted::ScriptedServer;
use mragent::service::{CacheBudget, CacheStats, MemoryService, OwnEmbedder, ServiceSettings};
use mragent::store::Store;
use rand::{Rng as _, SeedableRng as _};

use crate::own::{long_conversation, server};
use crate::support::{self, EMBEDDER};

type Service = MemoryService<mragent::llm::Client, OwnEmbedder>;

fn service(server: &ScriptedServer, root: &Path, budget: CacheBudget) -> Service {
    let config = support::client_config(server);
    let chat = build_chat_model(&config).unwrap();
    let embedder = support::embedder(&config, 64);
    let store = Store::open(Store::default_path(root)).unwrap();
    let mut settings = ServiceSettings::new(root, EMBEDDER, "test-model", "test-model");
    settings.cache = budget;
    MemoryService::new(store, settings, chat, OwnEmbedder::Api(Box::new(embedder)))
}

fn embeddings(server: &ScriptedServer) -> usize {
    server.requests().iter().filter(|request| request.is_embeddings()).count()
}

const CONVERSATIONS: usize = 6;

/// A store under `root` with [`CONVERSATIONS`] conversations of three sessions each.
async fn fill(server: &ScriptedServer, root: &Path) {
    let writer = service(server, root, CacheBudget::default());
    let messages = long_conversation(3);
    for number in 0..CONVERSATIONS {
        writer.add(&format!("c{number}"), messages.clone()).await.unwrap();
    }
}

/// A scripted endpoint and a folder whose store holds [`CONVERSATIONS`] conversations.
async fn filled() -> (ScriptedServer, tempfile::TempDir) {
    let server = server(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    fill(&server, dir.path()).await;
    (server, dir)
}

/// Bytes of one cached conversation (all are alike), measured by a service with room for all.
async fn entry_bytes(server: &ScriptedServer, root: &Path) -> u64 {
    let roomy = service(server, root, CacheBudget::default());
    roomy.search("c0", "Project2", 3).await.unwrap();
    let stats = roomy.cache_stats().conversations;
    assert_eq!(stats.entries, 1);
    assert!(stats.bytes > 1024, "{stats:?}");
    stats.bytes
}

/// A budget whose conversations' share holds `entries` such entries (and a little more).
fn budget_for(entries: u64, bytes: u64) -> CacheBudget {
    let conversations = entries * bytes + bytes / 2;
    // The conversations get fifteen sixteenths of the whole.
    CacheBudget { bytes: conversations * 16 / 15 + 16, query_share: 16 }
}

fn assert_within(stats: &CacheStats) {
    for counts in [stats.conversations, stats.query_vectors] {
        assert!(counts.bytes <= counts.budget_bytes, "over budget: {stats:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_of_two_conversations_holds_under_a_random_workload_and_evictions_change_no_answer()
 {
    let (server, dir) = filled().await;
    let bytes = entry_bytes(&server, dir.path()).await;

    // What every conversation answers with room for all.
    let roomy = service(&server, dir.path(), CacheBudget::default());
    let queries = ["Project1", "Project2 with Bob", "Day 3 note", "Ann talked"];
    let mut expected = std::collections::BTreeMap::new();
    for number in 0..CONVERSATIONS {
        for query in queries {
            let id = format!("c{number}");
            expected.insert((id.clone(), query), roomy.search(&id, query, 3).await.unwrap());
        }
    }
    assert_eq!(roomy.cache_stats().conversations.evictions, 0);

    let bounded = service(&server, dir.path(), budget_for(2, bytes));
    let mut random = rand_chacha::ChaCha8Rng::seed_from_u64(41);
    for _ in 0..60 {
        let id = format!("c{}", random.random_range(0..CONVERSATIONS));
        let query = queries[random.random_range(0..queries.len())];
        let found = bounded.search(&id, query, 3).await.unwrap();
        assert_eq!(found, expected[&(id.clone(), query)], "{id} {query}");
        let stats = bounded.cache_stats();
        assert_within(&stats);
        assert!(stats.conversations.entries <= 2, "{stats:?}");
    }
    let stats = bounded.cache_stats();
    assert!(stats.conversations.evictions >= 10, "{stats:?}");
    assert_eq!(
        stats.conversations.hits + stats.conversations.misses,
        60,
        "one lookup per search: {stats:?}"
    );
    assert!(stats.conversations.misses > stats.conversations.evictions, "{stats:?}");
    assert_eq!(bounded.building(), 0, "no build gate outlives its build");

    // The least recently used goes first: after c0, c1 and c0 again, c2 evicts c1, not c0.
    let lru = service(&server, dir.path(), budget_for(2, bytes));
    for id in ["c0", "c1", "c0", "c2"] {
        lru.search(id, "Project1", 3).await.unwrap();
    }
    let before = lru.cache_stats().conversations;
    assert_eq!((before.misses, before.hits, before.evictions), (3, 1, 1), "{before:?}");
    lru.search("c0", "Project1", 3).await.unwrap();
    lru.search("c2", "Project1", 3).await.unwrap();
    let after = lru.cache_stats().conversations;
    assert_eq!((after.misses, after.hits), (3, 3), "c0 and c2 stayed: {after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_queries_over_a_budget_of_one_conversation_all_answer_in_full() {
    let (server, dir) = filled().await;
    let bytes = entry_bytes(&server, dir.path()).await;
    let roomy = service(&server, dir.path(), CacheBudget::default());
    let mut expected = Vec::new();
    for number in 0..CONVERSATIONS {
        expected.push(roomy.search(&format!("c{number}"), "Project3 with Bob", 5).await.unwrap());
    }

    // Room for one entry: every query evicts another's entry while that one is still ranking
    // over it. Each must finish over the entry it took, in full.
    let bounded = Arc::new(service(&server, dir.path(), budget_for(1, bytes)));
    let mut tasks = tokio::task::JoinSet::new();
    for round in 0..48 {
        let service = Arc::clone(&bounded);
        tasks.spawn(async move {
            let number = (round * 7) % CONVERSATIONS;
            let found = service.search(&format!("c{number}"), "Project3 with Bob", 5).await;
            (number, found)
        });
    }
    while let Some(done) = tasks.join_next().await {
        let (number, found) = done.unwrap();
        assert_eq!(found.unwrap(), expected[number], "c{number}");
    }
    let stats = bounded.cache_stats();
    assert_within(&stats);
    assert!(stats.conversations.entries <= 1, "{stats:?}");
    assert!(stats.conversations.evictions > 0, "{stats:?}");
    assert_eq!(bounded.building(), 0, "no build gate outlives its build");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_searched_again_is_not_embedded_again_and_the_vector_cache_is_bounded() {
    let (server, dir) = filled().await;
    let service = service(&server, dir.path(), CacheBudget::default());
    // Both conversations indexed first (their memory words are embedded once, then stored).
    service.search("c1", "Ann", 3).await.unwrap();
    let first = service.search("c0", "Project2 zeppelin", 3).await.unwrap();
    let sent = embeddings(&server);
    for _ in 0..20 {
        assert_eq!(service.search("c0", "Project2 zeppelin", 3).await.unwrap(), first);
    }
    // Another conversation, same query: the query and its words are cached per embedder, not
    // per conversation.
    service.search("c1", "Project2 zeppelin", 3).await.unwrap();
    assert_eq!(embeddings(&server), sent, "the same query again sends no embedding request");
    service.search("c0", "Project2 submarine", 3).await.unwrap();
    assert_eq!(embeddings(&server), sent + 1, "a new query sends one request");
    let vectors = service.cache_stats().query_vectors;
    assert!(vectors.hits >= 21 && vectors.misses >= 2, "{vectors:?}");

    // A tiny share of the budget: the vectors are evicted, answers stay the same, and the
    // bytes stay within the share.
    let tiny = CacheBudget { bytes: 64 * 1024 * 1024, query_share: 64 * 1024 * 1024 / 4096 };
    let small = self::service(&server, dir.path(), tiny);
    for round in 0..30 {
        let query = format!("Project2 question{round}");
        let found = small.search("c0", &query, 3).await.unwrap();
        assert_eq!(found, service.search("c0", &query, 3).await.unwrap());
        assert_within(&small.cache_stats());
    }
    let stats = small.cache_stats().query_vectors;
    assert!(stats.evictions > 0 && stats.bytes <= 4096, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_embeds_through_the_query_vector_cache_and_the_same_question_sends_none() {
    let (server, dir) = filled().await;
    let service = service(&server, dir.path(), CacheBudget::default());
    // Both conversations loaded and made ready to answer first (a first ask embeds memory-side
    // texts of its own: the words its index lacks, the graph's).
    for conversation in ["c0", "c1"] {
        service.ask(conversation, "Who is Ann?").await.unwrap();
    }
    let question = "What did Ann say about Project2?";
    let first = service.ask("c0", question).await.unwrap();
    assert!(first.ok, "{first:?}");
    let before = service.cache_stats().query_vectors;
    assert!(before.entries >= 1, "the ask's question is kept: {before:?}");
    let sent = embeddings(&server);
    // The same question again, on this conversation and on another with the same embedder:
    // the question and whatever query texts the answer path embeds are all cached.
    let again = service.ask("c0", question).await.unwrap();
    assert_eq!(again.answer, first.answer);
    service.ask("c1", question).await.unwrap();
    assert_eq!(embeddings(&server), sent, "a repeated question sends no embedding request");
    let after = service.cache_stats().query_vectors;
    assert!(after.hits > before.hits, "{before:?} then {after:?}");
    // A search of the question's text finds its vector cached too (one cache for both paths).
    service.search("c0", question, 3).await.unwrap();
    assert_eq!(embeddings(&server), sent, "a search of an asked text sends none");
    assert_within(&service.cache_stats());
}
