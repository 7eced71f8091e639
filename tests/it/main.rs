//! The one integration-test binary: each module tests one part of the pipeline through the
//! public API.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod access;
mod answer;
mod architecture;
mod cache;
mod cli;
mod dataset;
mod embed_kernels;
mod eval;
mod eval_matrix;
mod eval_paired;
mod granules;
mod hardening;
mod ingest;
mod jobs;
mod llm;
mod mcp;
mod memory;
mod meta_rules;
mod metrics;
mod own;
mod own_memory;
mod pg_failures;
mod pg_tls;
mod pinned;
mod postgres;
#[path = "../support/private_pg.rs"]
mod private_pg;
mod retrieval;
mod schemathesis;
mod serve;
mod support;
mod tls;
