use super::*;
use crate::dataset::Category;
use crate::prompts;

#[test]
fn protocol_picks_the_prompt_by_dataset_type_and_abstention() {
    let locomo = |protocol, n| {
        builtin_prompt(DatasetKind::Locomo, protocol, "conv-26:q1", &Category::Locomo(n))
            .map(|p| p.name)
    };
    assert_eq!(locomo(JudgeProtocol::Mem0, 1), Some("judge_locomo"));
    assert_eq!(locomo(JudgeProtocol::Mem0, 4), Some("judge_locomo"));
    assert_eq!(locomo(JudgeProtocol::Strict, 2), Some("judge_locomo_strict"));
    assert_eq!(locomo(JudgeProtocol::Mem0, 5), None);
    assert_eq!(locomo(JudgeProtocol::Strict, 5), None);
    let lm = |id: &str, kind: &str| {
        builtin_prompt(
            DatasetKind::LongMemEval,
            JudgeProtocol::Strict,
            id,
            &Category::LongMemEval(kind.into()),
        )
        .map(|p| p.name)
    };
    assert_eq!(lm("e47becba", "single-session-user"), Some("judge_longmemeval"));
    assert_eq!(lm("gpt4_1", "multi-session"), Some("judge_longmemeval"));
    assert_eq!(lm("x", "temporal-reasoning"), Some("judge_longmemeval_temporal"));
    assert_eq!(lm("x", "knowledge-update"), Some("judge_longmemeval_knowledge_update"));
    assert_eq!(lm("x", "single-session-preference"), Some("judge_longmemeval_preference"));
    assert_eq!(lm("031748ae_abs", "multi-session"), Some("judge_longmemeval_abstention"));
}

#[test]
fn custom_replies_read_json_labels_or_yes() {
    assert_eq!(
        read_custom_reply(r#"{"reason": "same", "label": "CORRECT"}"#),
        (true, "same".into())
    );
    assert_eq!(read_custom_reply(r#"Sure: {"label": "WRONG"}"#), (false, String::new()));
    assert_eq!(read_custom_reply(" Yes."), (true, "Yes.".into()));
    assert_eq!(read_custom_reply("no"), (false, "no".into()));
}

#[test]
fn custom_prompt_slots_are_checked() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("mine.txt");
    std::fs::write(&path, "Q {{question}} G {{gold}} R {{prediction}}").unwrap();
    let prompt = CustomPrompt::load(&path).unwrap();
    assert_eq!(prompt.name, "custom:mine.txt");
    assert_eq!(prompt.render("q?", "g", "r"), "Q q? G g R r");
    std::fs::write(&path, "Q {{question}} R {{prediction}}").unwrap();
    let error = CustomPrompt::load(&path).unwrap_err().to_string();
    assert!(error.contains("missing slot(s) {{gold}}"), "{error}");
    std::fs::write(&path, "{{question}} {{gold}} {{prediction}} {{answer}}").unwrap();
    let error = CustomPrompt::load(&path).unwrap_err().to_string();
    assert!(error.contains("unknown slot(s) {{answer}}"), "{error}");
}

#[test]
fn every_judge_prompt_takes_question_gold_and_prediction() {
    for prompt in [
        prompts::JUDGE_LOCOMO,
        prompts::JUDGE_LOCOMO_STRICT,
        prompts::JUDGE_LONGMEMEVAL,
        prompts::JUDGE_LONGMEMEVAL_TEMPORAL,
        prompts::JUDGE_LONGMEMEVAL_KNOWLEDGE_UPDATE,
        prompts::JUDGE_LONGMEMEVAL_PREFERENCE,
        prompts::JUDGE_LONGMEMEVAL_ABSTENTION,
    ] {
        let text =
            prompt.render(&[("question", "Q?"), ("gold", "G"), ("prediction", "P")]).unwrap();
        assert!(text.contains("Q?") && text.contains("G") && text.contains("P"), "{}", prompt.name);
    }
}
