use std::collections::BTreeMap;
use std::path::Path;

use clap::Parser as _;

use super::*;
use crate::cli::Cli;
use crate::dataset::DatasetKind;

/// A fixed environment.
struct Fixed(BTreeMap<&'static str, &'static str>);

impl Env for Fixed {
    fn var(&self, name: &str) -> Option<String> {
        self.0.get(name).map(|value| value.to_string())
    }

    fn is_set(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }
}

fn job(argv: &[&str], env: &[(&'static str, &'static str)]) -> anyhow::Result<Job> {
    let cli = Cli::parse_from(std::iter::once("mragent").chain(argv.iter().copied()));
    let paths = ProjectPaths { root: "/project".into() };
    resolve(cli.command, &paths, true, &Fixed(env.iter().copied().collect()))
}

#[test]
fn serve_reads_its_token_from_the_environment() {
    let Job::Serve(serve) =
        job(&["serve", "--workers", "2"], &[("MRAGENT_SERVE_TOKEN", "t")]).unwrap()
    else {
        panic!("not serve");
    };
    assert_eq!(serve.options.token.as_deref(), Some("t"));
    assert_eq!(serve.own.service.workers, 2);
    assert_eq!(serve.own.service.embedder, crate::service::LOCAL_EMBEDDER);
    let Job::Serve(serve) = job(&["serve"], &[("MRAGENT_SERVE_TOKEN", "")]).unwrap() else {
        panic!("not serve");
    };
    assert_eq!(serve.options.token, None, "an empty token is none");
    assert_eq!(serve.own.for_embedder("m").embedder, "m");
}

#[test]
fn forgetting_a_conversation_resolves_no_model() {
    let whole = ["memory", "forget", "--conversation", "c", "--base-url", "localhost"];
    assert!(matches!(job(&whole, &[]).unwrap(), Job::Memory(MemoryJob::Forget { .. })));
    let one = [&whole[..], &["--message", "m1"]].concat();
    let message = job(&one, &[]).unwrap_err().to_string();
    assert!(message.contains("--base-url"), "{message}");
}

#[test]
fn run_settings_reach_the_build_and_answer_settings() {
    let argv = ["run", "--data", "lm", "--seed", "7", "--workers", "3", "--no-traces"];
    let Job::Run(run) = job(&[&argv[..], &["--no-memgas", "--file", "t"]].concat(), &[]).unwrap()
    else {
        panic!("not run");
    };
    assert_eq!(run.data.kind, DatasetKind::LongMemEval);
    assert_eq!((run.build.workers, run.build.progress), (3, false));
    assert_eq!((run.answer.seed, run.answer.workers, run.answer.traces), (7, 3, false));
    assert_eq!((run.answer.file.as_str(), run.memgas), ("t", None));
    let Job::Run(run) = job(&["run"], &[("OPENROUTER_API_KEY", "k")]).unwrap() else {
        panic!("not run");
    };
    assert!(run.models.api_key.is_some());
    assert_eq!(run.memgas.unwrap().models_root, Path::new("/project/data/models"));
}

#[test]
fn eval_paths_are_under_the_root_and_the_judge_is_resolved() {
    let argv = ["eval", "--data", "lm", "--judge-prompt", "p.txt", "--judge-model", "gemini"];
    let Job::Eval(eval) = job(&argv, &[]).unwrap() else { panic!("not eval") };
    assert_eq!(eval.settings.dataset, DatasetKind::LongMemEval);
    assert_eq!(eval.settings.judge_prompt.as_deref(), Some(Path::new("/project/p.txt")));
    assert_eq!(eval.settings.judge_model.as_deref(), Some("google/gemini-2.5-flash"));
    assert_eq!(eval.judge.map(|judge| judge.alias), Some("gemini".to_string()));
}

#[test]
fn eval_paired_with_is_a_checked_tag_other_than_the_file() {
    let argv = ["eval", "--file", "meta-x", "--paired-with", "meta-x-base"];
    let Job::Eval(eval) = job(&argv, &[]).unwrap() else { panic!("not eval") };
    assert_eq!(eval.paired_with.as_deref(), Some("meta-x-base"));
    let Job::Eval(eval) = job(&["eval"], &[]).unwrap() else { panic!("not eval") };
    assert_eq!(eval.paired_with, None);
    let error = job(&["eval", "--file", "a", "--paired-with", "a"], &[]).unwrap_err();
    assert!(error.to_string().contains("--paired-with names the run --file"), "{error}");
    let error = job(&["eval", "--paired-with", "../x"], &[]).unwrap_err();
    assert!(error.to_string().contains("--paired-with: invalid tag"), "{error}");
    // The run's own tag names the eval folder: a traversal is refused, as for `run`.
    let error = job(&["eval", "--file", ".."], &[]).unwrap_err();
    assert!(error.to_string().contains("--file: invalid tag"), "{error}");
}
