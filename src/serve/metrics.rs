//! `GET /metrics`: the server's metrics in the Prometheus text format (version 0.0.4), written by
//! the official client (`prometheus-client`). Behind the same bearer token as every route (a
//! Prometheus scrape config gives it with `authorization: {credentials: …}`); not part of the
//! OpenAPI document, which describes the JSON API only. docs/metrics.md lists every family.
//!
//! Three sources, each read where it lives:
//! - HTTP: [`track`], a layer around every route, counts each request under its route
//!   template (`/v1/conversations/{id}`, never the raw path: ids would make the label
//!   unbounded; `unmatched` for a path no route has), method and status, and times it. Scrapes
//!   of `/metrics` itself are not counted, so scraping does not move what it reads.
//! - Model: [`ModelCollector`] reads the chat and embedding clients' [`UsageMeter`]s at scrape
//!   time (requests, tokens, retries, errors, per build step): nothing is counted twice.
//! - Store: [`StoreCollector`] reads [`Store::counts`] at scrape time. The whole encoding runs
//!   in `spawn_blocking`, so those SQLite reads never block the async runtime.
//! - Cache: [`CacheCollector`] reads the service's [`CacheStats`] at scrape time (bytes,
//!   entries, hits, misses, evictions of the conversation and query vector caches).

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric, prometheus_text,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::Service;
use crate::llm::{Step, UsageMeter, UsageTotals};
use crate::service::ops::{ApiError, ErrorCode};
use crate::service::{CacheCounts, CacheStats};
use crate::store::{Store, StoreCounts};

/// The route of the metrics.
pub(crate) const PATH: &str = "/metrics";

/// The `route` label of a request that matched no route (a 404 from the fallback).
pub(crate) const UNMATCHED: &str = "unmatched";

/// Upper bounds (seconds) of the request duration histogram: 1 ms to 60 s, about ×2.5 apart
/// (a search answers in milliseconds, an add or an ask waits on the model for seconds).
const DURATION_BUCKETS: [f64; 15] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// The `step` label of model calls whose request named no step.
const NO_STEP: &str = "other";

/// The `step` label of the embedding endpoint's requests (an embedding is no build step).
const EMBED_STEP: &str = "embed";

/// Labels of a counted request.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: String,
    method: &'static str,
    status: u16,
}

/// Labels of a timed request.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
    method: &'static str,
}

type Durations = Family<RouteLabels, Histogram, fn() -> Histogram>;

/// Labels of a request refused by its key's rate limit: the key's name (bounded by the
/// operator's tokens and the store's keys: unknown tokens are refused before the limit).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyLabels {
    key: String,
}

/// The server's metrics: the HTTP families it updates and the registry that also reads the
/// model meters and the store at each scrape.
#[derive(Debug)]
pub(crate) struct ServiceMetrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    durations: Durations,
    limited: Family<KeyLabels, Counter>,
}

impl ServiceMetrics {
    /// The metrics of a server of `service`.
    pub(crate) fn new(service: &Arc<Service>) -> Arc<Self> {
        let requests = Family::<RequestLabels, Counter>::default();
        let durations: Durations =
            Family::new_with_constructor(|| Histogram::new(DURATION_BUCKETS));
        let mut registry = Registry::with_prefix("mragent");
        registry.register(
            "http_requests",
            "HTTP requests answered, by route template, method and status (scrapes of /metrics \
             are not counted)",
            requests.clone(),
        );
        registry.register_with_unit(
            "http_request_duration",
            "Time from a request's arrival to its response's headers, by route template and \
             method (a streamed answer: until the stream starts)",
            Unit::Seconds,
            durations.clone(),
        );
        let limited = Family::<KeyLabels, Counter>::default();
        registry.register(
            "rate_limited_requests",
            "Requests refused with 429 because their token or key was over its rate limit, by \
             the token's or key's name",
            limited.clone(),
        );
        registry.register_collector(Box::new(ModelCollector {
            chat: Arc::clone(service.chat().meter()),
            embeddings: service.embedder().meter().cloned(),
        }));
        registry.register_collector(Box::new(StoreCollector { store: service.store().clone() }));
        registry.register_collector(Box::new(CacheCollector { service: Arc::clone(service) }));
        Arc::new(Self { registry, requests, durations, limited })
    }

    /// The route that serves the metrics, to merge into the API's router.
    pub(crate) fn router<S>(self: &Arc<Self>) -> Router<S> {
        Router::new().route(PATH, axum::routing::get(scrape)).with_state(Arc::clone(self))
    }

    /// Counts one request refused by `key`'s rate limit.
    pub(crate) fn limited(&self, key: &str) {
        self.limited.get_or_create(&KeyLabels { key: key.to_string() }).inc();
    }

    /// Counts and times one answered request.
    fn observe(&self, route: String, method: &'static str, status: StatusCode, seconds: f64) {
        self.durations
            .get_or_create(&RouteLabels { route: route.clone(), method })
            .observe(seconds);
        self.requests
            .get_or_create(&RequestLabels { route, method, status: status.as_u16() })
            .inc();
    }

    /// The exposition text (reads the store: call off the async runtime).
    fn encode(&self) -> Result<String, fmt::Error> {
        let mut text = String::new();
        prometheus_text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

/// The layer counting and timing every request but the scrapes (added around every route with
/// `Router::layer`, so the route template is known here).
pub(crate) async fn track(
    State(metrics): State<Arc<ServiceMetrics>>,
    request: Request,
    next: Next,
) -> Response {
    let route = request.extensions().get::<MatchedPath>().map(MatchedPath::as_str);
    if route == Some(PATH) {
        return next.run(request).await;
    }
    let route = route.unwrap_or(UNMATCHED).to_string();
    let method = method_label(request.method());
    let started = Instant::now();
    let response = next.run(request).await;
    metrics.observe(route, method, response.status(), started.elapsed().as_secs_f64());
    response
}

/// The `method` label: the standard methods by name, anything else as `other` (a client may
/// send any token as a method; the label must stay bounded).
fn method_label(method: &Method) -> &'static str {
    [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
        Method::HEAD,
        Method::OPTIONS,
    ]
    .into_iter()
    .zip(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
    .find_map(|(known, name)| (known == method).then_some(name))
    .unwrap_or("other")
}

/// `GET /metrics`: encoded off the runtime (the store collector runs SQLite queries).
async fn scrape(
    State(metrics): State<Arc<ServiceMetrics>>,
    access: Option<axum::Extension<super::Access>>,
) -> Response {
    // Every user's counts: admin keys (and the operator's tokens) only.
    if let Some(axum::Extension(access)) = access
        && let Err(refused) = access.admin_only()
    {
        return refused.into_response();
    }
    match tokio::task::spawn_blocking(move || metrics.encode()).await {
        Ok(Ok(text)) => {
            ([(header::CONTENT_TYPE, prometheus_text::CONTENT_TYPE)], text).into_response()
        }
        Ok(Err(fmt::Error)) | Err(_) => ApiError::new(
            ErrorCode::Internal,
            "",
            "the metrics could not be read; the server log says why",
        )
        .into_response(),
    }
}

/// Encodes one counter family: one sample per label set.
fn counters<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, u64)>,
) -> Result<(), fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in samples {
        ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Encodes one gauge family: one sample per label set.
fn gauges<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, i64)>,
) -> Result<(), fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in samples {
        ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// The model families, read from the clients' meters at scrape time.
#[derive(Debug)]
struct ModelCollector {
    /// The chat client's meter (build stages, fact checks and the answer loop).
    chat: Arc<UsageMeter>,
    /// The embedding client's meter (`None`: the local embedder, which sends no request).
    embeddings: Option<Arc<UsageMeter>>,
}

impl ModelCollector {
    /// `(step label, totals)`: every step (zero ones too, so each series exists from the
    /// start), the chat requests that named no step, and the embedding requests.
    fn shares(&self) -> Vec<(&'static str, UsageTotals)> {
        let steps = self.chat.by_step();
        let named = steps.iter().fold(UsageTotals::default(), |sum, (_, totals)| sum + *totals);
        let mut shares: Vec<(&'static str, UsageTotals)> =
            steps.into_iter().map(|(step, totals)| (Step::name(step), totals)).collect();
        shares.push((NO_STEP, self.chat.totals() - named));
        if let Some(meter) = &self.embeddings {
            shares.push((EMBED_STEP, meter.totals()));
        }
        shares
    }
}

impl Collector for ModelCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let shares = self.shares();
        let per_step = |count: fn(&UsageTotals) -> u64| {
            shares.iter().map(move |(step, totals)| ([("step", *step)], count(totals)))
        };
        counters(
            &mut encoder,
            "model_requests",
            "HTTP requests sent to the model endpoint (every attempt: retries and hedges too), \
             by step.",
            per_step(|totals| totals.requests),
        )?;
        counters(
            &mut encoder,
            "model_failed_requests",
            "Requests that brought no usable reply (error status, timeout, bad body), by step.",
            per_step(|totals| totals.failed_requests),
        )?;
        counters(
            &mut encoder,
            "model_retries",
            "Failed requests that the retry layer sent again, by step.",
            per_step(|totals| totals.retries),
        )?;
        counters(
            &mut encoder,
            "model_errors",
            "Model calls that failed for good (after their retries, or refused at once after a \
             fatal error), by step.",
            per_step(|totals| totals.errors),
        )?;
        counters(
            &mut encoder,
            "model_hedges",
            "Second requests sent because the first was slow, by step.",
            per_step(|totals| totals.hedges),
        )?;
        let tokens = shares.iter().flat_map(|(step, totals)| {
            [
                ([("step", *step), ("type", "prompt")], totals.usage.prompt_tokens),
                ([("step", *step), ("type", "completion")], totals.usage.completion_tokens),
            ]
        });
        counters(
            &mut encoder,
            "model_tokens",
            "Tokens the endpoint reported, by step and type (prompt or completion).",
            tokens,
        )
    }
}

/// The store families (and the jobs gauge, counted in the same statement), read from the
/// store at scrape time. A new family is listed in `docs/metrics.md` too (the metrics test
/// requires it).
#[derive(Debug)]
struct StoreCollector {
    store: Store,
}

impl StoreCollector {
    fn encode_counts(counts: &StoreCounts, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let none: [(&str, &str); 0] = [];
        gauges(
            encoder,
            "store_conversations",
            "Conversations in the store.",
            [(none, counts.conversations)],
        )?;
        gauges(encoder, "store_messages", "Messages in the store.", [(none, counts.messages)])?;
        let unbuilt = counts.sessions - counts.built_sessions;
        gauges(
            encoder,
            "store_sessions",
            "Sessions in the store, by state: built (stage outputs stored) or unbuilt (new, \
             changed or failed; the next add builds them).",
            [([("state", "built")], counts.built_sessions), ([("state", "unbuilt")], unbuilt)],
        )?;
        gauges(
            encoder,
            "store_facts",
            "Personal facts in the store, by state: current, or superseded by a newer fact.",
            [
                ([("state", "current")], counts.current_facts),
                ([("state", "superseded")], counts.superseded_facts),
            ],
        )?;
        let states = crate::store::JobState::ALL.map(|state| state.name());
        gauges(
            encoder,
            "jobs",
            "Background build jobs (adds with `wait: false`), by state: queued, running, done \
             or failed.",
            states.into_iter().zip(counts.jobs).map(|(state, count)| ([("state", state)], count)),
        )
    }
}

impl Collector for StoreCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        // A store that cannot be read fails the scrape (a 500, so Prometheus marks the target
        // down) rather than reporting zeros; the reason goes to the log.
        let counts = self.store.counts().map_err(|error| {
            tracing::warn!(%error, "metrics: the store could not be counted");
            fmt::Error
        })?;
        Self::encode_counts(&counts, &mut encoder)
    }
}

/// The cache families, read from the service at scrape time: one sample per cache
/// (`conversations`, `query_vectors`).
struct CacheCollector {
    service: Arc<Service>,
}

impl fmt::Debug for CacheCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CacheCollector")
    }
}

impl CacheCollector {
    fn encode_stats(stats: &CacheStats, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let caches =
            [("conversations", stats.conversations), ("query_vectors", stats.query_vectors)];
        let per_cache = |value: fn(&CacheCounts) -> u64| {
            caches.map(|(cache, counts)| ([("cache", cache)], value(&counts)))
        };
        let signed = |value: fn(&CacheCounts) -> u64| {
            per_cache(value)
                .map(|(labels, value)| (labels, i64::try_from(value).unwrap_or(i64::MAX)))
        };
        gauges(
            encoder,
            "cache_bytes",
            "Estimated bytes held by the cache (conversations: stored conversation, index and \
             snapshot; query_vectors: embedded queries).",
            signed(|counts| counts.bytes),
        )?;
        gauges(
            encoder,
            "cache_budget_bytes",
            "The most the cache may hold (its share of --cache-mb).",
            signed(|counts| counts.budget_bytes),
        )?;
        gauges(
            encoder,
            "cache_entries",
            "Entries held by the cache.",
            signed(|counts| counts.entries),
        )?;
        counters(
            encoder,
            "cache_hits",
            "Lookups answered from the cache.",
            per_cache(|counts| counts.hits),
        )?;
        counters(
            encoder,
            "cache_misses",
            "Lookups that found nothing current (the conversation was loaded and indexed, or the \
             query embedded).",
            per_cache(|counts| counts.misses),
        )?;
        counters(
            encoder,
            "cache_evictions",
            "Entries dropped to stay within the budget (least recently used first).",
            per_cache(|counts| counts.evictions),
        )
    }
}

impl Collector for CacheCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        Self::encode_stats(&self.service.cache_stats(), &mut encoder)
    }
}
