use std::path::Path;

use super::*;
use crate::dataset::DatasetKind;

#[test]
fn cache_paths_follow_the_reference_layout() {
    let settings =
        BuildSettings::new("/p/data", DatasetKind::Locomo, "gemini", "google/gemini-2.5-flash");
    assert_eq!(
        settings.rewrite_path("conv-26"),
        Path::new("/p/data/locomo/rewrite_gemini/conv-26_rewrite.json")
    );
    assert_eq!(
        settings.keyword_path("conv-26"),
        Path::new("/p/data/locomo/keyword_gemini/conv-26_keyword.json")
    );
    assert_eq!(
        settings.embedding_path("openai/text-embedding-3-large", "conv-26"),
        Path::new(
            "/p/data/locomo/embedding/openai_text-embedding-3-large/conv-26_gemini_embedding.bin"
        )
    );
    let lm = BuildSettings::new("d", DatasetKind::LongMemEval, "openai/gpt-4o", "openai/gpt-4o");
    assert_eq!(
        lm.rewrite_path("e47becba"),
        Path::new("d/LM/rewrite_openai_gpt-4o/e47becba_rewrite.json")
    );
}

#[test]
fn locomo_ignores_the_batch_setting() {
    let mut settings = BuildSettings::new("d", DatasetKind::Locomo, "m", "m");
    settings.lm_batch = 10;
    assert_eq!(settings.batch(), 1);
    settings.dataset = DatasetKind::LongMemEval;
    assert_eq!(settings.batch(), 10);
}
