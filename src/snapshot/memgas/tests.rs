use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::llm::{Embeddings, Usage};

struct UnitEmbedder;

impl Embedder for UnitEmbedder {
    fn name(&self) -> &str {
        "unit"
    }
    async fn embed(&self, texts: &[String]) -> Result<Embeddings, crate::llm::Error> {
        Ok(Embeddings { vectors: vec![vec![1.0, 0.0]; texts.len()], usage: Usage::default() })
    }
}

/// Counts its loads; each takes a moment, so that concurrent first calls overlap.
struct Counting(Arc<AtomicUsize>, bool);

impl MemgasSource for Counting {
    fn load(&self) -> BoxFuture<'_, anyhow::Result<LoadedMemgas>> {
        Box::pin(async move {
            self.0.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            anyhow::ensure!(self.1, "no model files");
            let index = MemoryIndex::new(crate::retrieval::IndexOptions::default());
            Ok(LoadedMemgas { index: Arc::new(index), embedder: Arc::new(UnitEmbedder) })
        })
    }
}

#[tokio::test]
async fn concurrent_first_calls_load_once_and_a_failed_load_is_not_retried() {
    for works in [true, false] {
        let loads = Arc::new(AtomicUsize::new(0));
        let memgas = MemgasMemory::lazy(Counting(loads.clone(), works));
        assert!(!memgas.is_loaded());
        assert_eq!(loads.load(Ordering::SeqCst), 0, "nothing is loaded before the first call");
        let clone = memgas.clone();
        let results = futures::future::join_all((0..4).map(|i| {
            let memgas = if i % 2 == 0 { memgas.clone() } else { clone.clone() };
            async move { memgas.get().await.map(|_| ()) }
        }))
        .await;
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        assert!(results.iter().all(|result| result.is_ok() == works), "{results:?}");
        assert!(memgas.get().await.is_ok() == works && clone.is_loaded());
        assert_eq!(loads.load(Ordering::SeqCst), 1);
    }
}
