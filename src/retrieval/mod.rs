//! MemGAS multi-granularity retrieval.

pub mod gmm;
pub mod ppr;
pub mod router;
