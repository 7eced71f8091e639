use std::collections::BTreeMap;
use std::path::Path;

use clap::Parser as _;

use super::*;
use crate::cli::Cli;
use crate::dataset::DatasetKind;
use crate::eval::judge::JudgeProtocol;

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

fn job(argv: &[&str], env: &[(&'static str, &'static str)]) -> anyhow::Result<Resolved> {
    let cli = Cli::parse_from(std::iter::once("mragent").chain(argv.iter().copied()));
    let paths = ProjectPaths { root: "/project".into(), store: None };
    resolve(cli.command, &paths, true, &Fixed(env.iter().copied().collect()))
}

#[test]
fn serve_reads_its_token_from_the_environment() {
    let Resolved::Serve(serve) =
        job(&["serve", "--workers", "2"], &[("MRAGENT_SERVE_TOKEN", "t")]).unwrap()
    else {
        panic!("not serve");
    };
    assert_eq!(serve.options.token.as_deref(), Some("t"));
    assert_eq!(serve.own.service.workers, 2);
    assert_eq!(serve.own.service.embedder, crate::service::LOCAL_EMBEDDER);
    let Resolved::Serve(serve) = job(&["serve"], &[("MRAGENT_SERVE_TOKEN", "")]).unwrap() else {
        panic!("not serve");
    };
    assert_eq!(serve.options.token, None, "an empty token is none");
    assert_eq!(serve.own.for_embedder("m").embedder, "m");
}

#[test]
fn mcp_resolves_the_service_as_serve_does() {
    let argv = ["mcp", "--workers", "3", "--session-gap", "2h", "--embedder", "e", "--model", "m"];
    let Resolved::Mcp(mcp) = job(&argv, &[("OPENAI_API_KEY", "k")]).unwrap() else {
        panic!("not mcp");
    };
    assert_eq!(mcp.own.service.workers, 3);
    assert_eq!(mcp.own.service.session_gap, chrono::TimeDelta::hours(2));
    assert_eq!(mcp.own.service.embedder, "e");
    assert_eq!(mcp.own.service.model, "m");
    let mut serve_argv = vec!["serve"];
    serve_argv.extend_from_slice(&argv[1..]);
    let Resolved::Serve(serve) = job(&serve_argv, &[("OPENAI_API_KEY", "k")]).unwrap() else {
        panic!("not serve");
    };
    assert_eq!(serve.own.service, mcp.own.service);
}

#[test]
fn memory_subcommands_resolve_to_their_operations_requests() {
    // A blank correction is refused by the operation's parser, naming the field.
    let blank = job(&["memory", "correct", "--fact", "3", "  "], &[]).unwrap_err().to_string();
    assert!(blank.starts_with("value: "), "{blank}");
    let argv = ["memory", "search", "--user", "u", "--conversation", "c", "q", "-k", "3"];
    let Resolved::Memory(search) =
        job(&[&argv[..], &["--base-url", "http://localhost/v1"]].concat(), &[]).unwrap()
    else {
        panic!("not memory");
    };
    let super::MemoryOp::Search(crate::service::Scope::User(user), request, _) = search.op else {
        panic!("not a user's search: {search:?}");
    };
    assert_eq!((user.as_str(), request.k), ("u", 3));
    assert_eq!((request.query.as_str(), request.filters.conversation.as_deref()), ("q", Some("c")));
    // The store's own subcommands resolve no model (and need no key).
    let Resolved::Memory(list) = job(&["memory", "list", "--user", "u", "--json"], &[]).unwrap()
    else {
        panic!("not memory");
    };
    assert!(
        list.json
            && matches!(list.op, super::MemoryOp::List(ref list) if list.user.as_deref() == Some("u"))
    );
}

#[test]
fn forgetting_a_conversation_resolves_no_model() {
    let whole = ["memory", "forget", "--conversation", "c", "--base-url", "localhost"];
    let Resolved::Memory(forget) = job(&whole, &[]).unwrap() else { panic!("not memory") };
    assert!(matches!(forget.op, super::MemoryOp::Forget(_)), "{forget:?}");
    let one = [&whole[..], &["--message", "m1"]].concat();
    let message = job(&one, &[]).unwrap_err().to_string();
    assert!(message.contains("--base-url"), "{message}");
}

#[test]
fn run_settings_reach_the_build_and_answer_settings() {
    let argv = ["run", "--data", "lm", "--seed", "7", "--workers", "3", "--no-traces"];
    let Resolved::Run(run) =
        job(&[&argv[..], &["--no-memgas", "--file", "t"]].concat(), &[]).unwrap()
    else {
        panic!("not run");
    };
    assert_eq!(run.data.kind, DatasetKind::LongMemEval);
    assert_eq!((run.build.workers, run.build.progress), (3, false));
    assert_eq!((run.answer.seed, run.answer.workers, run.answer.traces), (7, 3, false));
    assert_eq!((run.answer.file.as_str(), run.memgas), ("t", None));
    let Resolved::Run(run) = job(&["run"], &[("OPENROUTER_API_KEY", "k")]).unwrap() else {
        panic!("not run");
    };
    assert!(run.models.api_key.is_some());
    assert_eq!(run.memgas.unwrap().models_root, Path::new("/project/data/models"));
}

#[test]
fn eval_paths_are_under_the_root_and_the_judge_is_resolved() {
    let argv = ["eval", "--data", "lm", "--judge-prompt", "p.txt", "--judge-model", "gemini"];
    let Resolved::Eval(eval) = job(&argv, &[]).unwrap() else { panic!("not eval") };
    let scoring = eval.scoring;
    assert_eq!(scoring.settings.dataset, DatasetKind::LongMemEval);
    assert_eq!(scoring.settings.judge_prompt.as_deref(), Some(Path::new("/project/p.txt")));
    assert_eq!(scoring.settings.judge_model.as_deref(), Some("google/gemini-2.5-flash"));
    assert_eq!(scoring.judge.map(|judge| judge.alias), Some("gemini".to_string()));
    // LongMemEval data is judged by its per-type rules, three runs by default.
    assert_eq!(scoring.protocols, [JudgeProtocol::LongMemEval]);
    assert_eq!(scoring.settings.judge_runs, 3);
}

#[test]
fn eval_judge_protocols_are_a_list_that_must_fit_the_dataset() {
    let argv = ["eval", "--judge-protocol", "mem0,strict,longmemeval", "--judge-runs", "1"];
    let Resolved::Eval(eval) = job(&argv, &[]).unwrap() else { panic!("not eval") };
    let protocols = [JudgeProtocol::Mem0, JudgeProtocol::Strict, JudgeProtocol::LongMemEval];
    assert_eq!(eval.scoring.protocols, protocols);
    assert_eq!(
        (eval.scoring.settings.protocol, eval.scoring.settings.judge_runs),
        (protocols[0], 1)
    );
    let Resolved::Eval(eval) = job(&["eval", "--judge-protocol", "strict"], &[]).unwrap() else {
        panic!("not eval")
    };
    assert_eq!(eval.scoring.protocols, [JudgeProtocol::Strict]);
    assert_eq!(
        job(&["eval"], &[])
            .map(|job| match job {
                Resolved::Eval(eval) => eval.scoring.protocols,
                _ => Vec::new(),
            })
            .unwrap(),
        [JudgeProtocol::Mem0]
    );
    let error = job(&["eval", "--data", "lm", "--judge-protocol", "longmemeval,strict"], &[])
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("judge protocol strict does not apply to LongMemEval data")
            && error.contains("--judge-protocol longmemeval"),
        "{error}"
    );
    let error = job(&["eval", "--judge-protocol", "mem0,strict", "--paired-with", "b"], &[])
        .unwrap_err()
        .to_string();
    assert!(error.contains("one --judge-protocol"), "{error}");
}

#[test]
fn compare_takes_two_checked_run_tags_and_one_protocol() {
    let argv = ["compare", "meta-x", "meta-x-base", "--judge-model", "gemini", "--partial"];
    let Resolved::Compare(compare) = job(&argv, &[]).unwrap() else { panic!("not compare") };
    assert_eq!(compare.scoring.settings.file, "meta-x");
    assert_eq!(compare.run_b, "meta-x-base");
    assert!(compare.scoring.settings.partial);
    assert_eq!(compare.scoring.settings.judge_runs, 3);
    let error = job(&["compare", "a", "a"], &[]).unwrap_err().to_string();
    assert!(error.contains("RUN_B names the run RUN_A already names (a)"), "{error}");
    let error = job(&["compare", "..", "b"], &[]).unwrap_err().to_string();
    assert!(error.contains("RUN_A: invalid tag"), "{error}");
    let error = job(&["compare", "a", "b", "--judge-protocol", "mem0,strict"], &[])
        .unwrap_err()
        .to_string();
    assert!(error.contains("one --judge-protocol"), "{error}");
}

#[test]
fn eval_paired_with_is_a_checked_tag_other_than_the_file() {
    let argv = ["eval", "--file", "meta-x", "--paired-with", "meta-x-base"];
    let Resolved::Eval(eval) = job(&argv, &[]).unwrap() else { panic!("not eval") };
    assert_eq!(eval.paired_with.as_deref(), Some("meta-x-base"));
    let Resolved::Eval(eval) = job(&["eval"], &[]).unwrap() else { panic!("not eval") };
    assert_eq!(eval.paired_with, None);
    let error = job(&["eval", "--file", "a", "--paired-with", "a"], &[]).unwrap_err();
    assert!(error.to_string().contains("--paired-with names the run --file"), "{error}");
    let error = job(&["eval", "--paired-with", "../x"], &[]).unwrap_err();
    assert!(error.to_string().contains("--paired-with: invalid tag"), "{error}");
    // The run's own tag names the eval folder: a traversal is refused, as for `run`.
    let error = job(&["eval", "--file", ".."], &[]).unwrap_err();
    assert!(error.to_string().contains("--file: invalid tag"), "{error}");
}

#[test]
fn a_learning_s_replay_arguments_use_only_the_flags_verify_accepts_and_replay_it() {
    let argv = [
        "learn",
        "--judge-model",
        "j",
        "--judge-protocol",
        "strict",
        "--steps",
        "3",
        "--sample",
        "conv-1",
        "--ca",
        "1",
        "--re-model",
        "x",
        "--max-tokens",
        "answer=5",
        "--structured-output",
        "--no-memgas",
        "--no-test",
        "--drop-assistant-turns",
        "--fold",
        "1",
        "--max-tokens-total",
        "9",
        "--dry-run",
        "--name",
        "n",
        "--temperature",
        "0.3",
    ];
    let Resolved::Learn(learn) = job(&argv, &[]).unwrap() else { panic!("not learn") };
    let args = learn.replay_args.clone();
    for flag in args.iter().filter(|arg| arg.starts_with("--")) {
        assert!(LEARN_REPLAY_FLAGS.contains(&flag.as_str()), "{flag} is refused by verify");
    }
    for left_out in ["--fold", "--max-tokens-total", "--dry-run"] {
        assert!(!args.iter().any(|arg| arg == left_out), "{left_out} in {args:?}");
    }
    // Replayed, the arguments make the same learning.
    let mut again: Vec<&str> = vec!["learn"];
    again.extend(args.iter().map(String::as_str));
    let Resolved::Learn(replayed) = job(&again, &[]).unwrap() else { panic!("not learn") };
    assert_eq!(replayed.learn.fingerprint(), learn.learn.fingerprint());
    assert_eq!(replayed.replay_args, args);
}
