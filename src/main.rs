//! The `mragent` binary: parse the command line, resolve settings, start tracing, dispatch,
//! and turn the outcome into an exit code (0 success, 1 failure, 2 partial failure, 141 when
//! the reader of standard output stopped early, as `mragent memory list | head` does).
//!
//! Results go to standard output through [`write_out`] only (`outln!`/`out!`): `println!`
//! would panic on a closed pipe, and the `print_stdout` lint keeps it out.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;
use mragent::cli::{Cli, Command, MemoryCommand};
use mragent::settings::{DataSettings, ModelSettings, ProjectPaths};

fn main() -> ExitCode {
    // A missing .env is normal; a malformed one is worth a warning after logging starts.
    let dotenv = dotenvy::dotenv();
    let cli = Cli::parse();
    let verbosity: i8 = if cli.global.quiet { -1 } else { cli.global.verbose.min(3) as i8 };
    let paths = match ProjectPaths::resolve(&cli.global.root) {
        Ok(paths) => paths,
        Err(error) => return report(error),
    };
    let _log = match mragent::logging::init(&paths.root, command_name(&cli.command), verbosity) {
        Ok(guard) => guard,
        Err(error) => return report(error),
    };
    if let Err(error) = &dotenv
        && !error.not_found()
    {
        tracing::warn!(%error, "could not read .env");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            return report(anyhow::Error::new(error).context("starting the async runtime"));
        }
    };
    match runtime.block_on(dispatch(cli.command, paths, cli.global.quiet)) {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Partial) => ExitCode::from(2),
        Err(error) => report(error),
    }
}

/// How a command ended when it did not fail outright.
enum Outcome {
    /// Everything done.
    Success,
    /// Done, but some items failed (they are recorded and a rerun retries them).
    Partial,
}

/// Standard output was closed by its reader (`| head`): not a failure of the command, so
/// `main` ends quietly with [`BROKEN_PIPE_STATUS`].
#[derive(Debug, thiserror::Error)]
#[error("standard output was closed")]
struct StdoutClosed;

/// The status a shell reports for a program stopped by SIGPIPE (128 + 13), as `yes | head`.
const BROKEN_PIPE_STATUS: u8 = 141;

/// Writes `text` to standard output and flushes it. A closed pipe gives [`StdoutClosed`];
/// any other write error is a failure.
fn write_out(text: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_fmt(text).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(error) => Err(anyhow::Error::new(error).context("writing to standard output")),
    }
}

/// `println!` through [`write_out`]; use with `?`.
macro_rules! outln {
    ($($arg:tt)*) => { write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` through [`write_out`]; use with `?`.
macro_rules! out {
    ($($arg:tt)*) => { write_out(format_args!($($arg)*)) };
}

fn command_name(command: &Command) -> &'static str {
    match command {
        Command::Ping(_) => "ping",
        Command::Eval(_) => "eval",
        Command::Build(_) => "build",
        Command::Retrieve(_) => "retrieve",
        Command::Run(_) => "run",
        Command::Trace(_) => "trace",
        Command::Memory(_) => "memory",
        Command::Ask(_) => "ask",
        Command::Serve(_) => "serve",
    }
}

async fn dispatch(command: Command, paths: ProjectPaths, quiet: bool) -> anyhow::Result<Outcome> {
    match command {
        Command::Ping(args) => {
            let settings = ModelSettings::resolve(&args.model, env_var)?;
            settings.require_key()?;
            let report = mragent::commands::ping(&settings).await.context("ping failed")?;
            outln!("{report}")?;
            Ok(Outcome::Success)
        }
        Command::Build(args) => build(&args, &paths, quiet).await,
        Command::Memory(args) => memory(args.command, &paths).await,
        Command::Ask(args) => ask(&args, &paths).await,
        Command::Serve(args) => {
            mragent::commands::own::serve(&paths, &args, env_var).await?;
            Ok(Outcome::Success)
        }
        Command::Run(args) => run(&args, &paths, quiet).await,
        Command::Trace(args) => {
            use std::io::IsTerminal as _;
            let options = mragent::agent::render::RenderOptions {
                json: args.json,
                color: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
                dataset: args.data.clone(),
                file: args.file.clone(),
                max_chars: args.max_chars,
            };
            out!("{}", mragent::agent::render::render_trace(&paths.root, &args.target, &options)?)?;
            Ok(Outcome::Success)
        }
        Command::Retrieve(args) if args.folds => {
            let data = DataSettings::resolve(&paths, &args.data);
            let outcome = tokio::task::spawn_blocking(move || {
                mragent::commands::retrieve_folds(&paths, &data, &args, quiet)
            })
            .await
            .context("the retrieval task failed")??;
            outln!("{}", outcome.markdown)?;
            outln!("written to {}", outcome.markdown_path.display())?;
            Ok(Outcome::Success)
        }
        Command::Retrieve(args) => retrieve(args, paths, quiet).await,
        Command::Eval(args) => {
            let settings = ModelSettings::resolve(&args.model, env_var)?;
            let summary = mragent::commands::eval(&paths, &args, &settings).await?;
            outln!("{}", summary.table())?;
            outln!("written to {}", summary_dir(&paths, &summary).display())?;
            Ok(if summary.judge_failed > 0 { Outcome::Partial } else { Outcome::Success })
        }
    }
}

/// `mragent retrieve`: the evaluation on a blocking thread; the first Ctrl-C stops it after the
/// batch in flight (tables of the finished conversations are written), a second one exits.
async fn retrieve(
    args: mragent::cli::RetrieveArgs,
    paths: ProjectPaths,
    quiet: bool,
) -> anyhow::Result<Outcome> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let data = DataSettings::resolve(&paths, &args.data);
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("stopping after the batch in flight (Ctrl-C again to quit at once)");
                stop.store(true, Ordering::Relaxed);
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        })
    };
    let task_stop = Arc::clone(&stop);
    let report = tokio::task::spawn_blocking(move || {
        mragent::commands::retrieve(&paths, &data, &args, quiet, &task_stop)
    })
    .await
    .context("the retrieval task failed")??;
    watcher.abort();
    outln!("{}", report.markdown)?;
    outln!("written to {}", report.markdown_path.display())?;
    if report.n_conversations < report.n_selected {
        eprintln!("stopped early: run the same command again to finish (embeddings are cached)");
        return Ok(Outcome::Partial);
    }
    Ok(Outcome::Success)
}

/// What `run` and `build` both start from: dataset and model settings (the key required) and
/// the selected conversations.
fn load_job(
    paths: &ProjectPaths,
    data: &mragent::cli::DataArgs,
    model: &mragent::cli::ModelArgs,
) -> anyhow::Result<(DataSettings, ModelSettings, Vec<mragent::dataset::Conversation>)> {
    let data = DataSettings::resolve(paths, data);
    let models = ModelSettings::resolve(model, env_var)?;
    models.require_key()?;
    let conversations = data.load()?;
    Ok((data, models, conversations))
}

/// `mragent run`: the main job, then its summary, result files, manifest and exit outcome.
async fn run(
    args: &mragent::cli::RunCommandArgs,
    paths: &ProjectPaths,
    quiet: bool,
) -> anyhow::Result<Outcome> {
    let (data, models, conversations) = load_job(paths, &args.data, &args.model)?;
    let outcome = mragent::commands::run(paths, &data, &models, args, quiet, conversations).await?;
    if let Some(build) = outcome.build.as_ref().filter(|_| !quiet) {
        print_build_report(build)?;
    }
    if let Some(summary) = &outcome.summary {
        outln!("{summary}")?;
        for file in &summary.result_files {
            outln!("  {}", file.display())?;
        }
        if let Some(hint) = summary.resume_hint() {
            eprintln!("{hint}");
        }
    }
    for (client, totals) in &outcome.endpoint_usage {
        outln!(
            "endpoint {client}: {} requests ({} failed, {} hedges), {} prompt + {} completion tokens",
            totals.requests,
            totals.failed_requests,
            totals.hedges,
            totals.usage.prompt_tokens,
            totals.usage.completion_tokens
        )?;
    }
    outln!("manifest: {}", outcome.manifest.display())?;
    match (outcome.error, outcome.exit_code) {
        (Some(error), _) => Err(anyhow::anyhow!(error)),
        (None, 0) => Ok(Outcome::Success),
        (None, _) => {
            if outcome.summary.is_none() {
                eprintln!(
                    "interrupted while building: finished sessions are cached; run the same command again to resume"
                );
            }
            Ok(Outcome::Partial)
        }
    }
}

async fn build(
    args: &mragent::cli::BuildArgs,
    paths: &ProjectPaths,
    quiet: bool,
) -> anyhow::Result<Outcome> {
    let (data, models, conversations) = load_job(paths, &args.data, &args.model)?;
    let summary = tokio::select! {
        summary = mragent::commands::build(paths, &data, &models, &args.embed, args.workers, quiet, &conversations) => summary?,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("interrupted: finished sessions are cached; run the same command again to resume");
            return Ok(Outcome::Partial);
        }
    };
    print_build_report(&summary)?;
    let mut complete = summary.is_complete();
    if args.granules {
        let granules = mragent::commands::build_granules(
            paths,
            &data,
            &models,
            args.workers,
            quiet,
            &conversations,
        )
        .await?;
        outln!("{granules}")?;
        complete &= granules.is_complete();
    }
    if complete {
        Ok(Outcome::Success)
    } else {
        eprintln!(
            "some sessions failed (listed above); run the same command again to retry only those"
        );
        Ok(Outcome::Partial)
    }
}

/// The report of a build, as `build` prints it and `run` (unless `-q`) before its own summary:
/// conversations, sessions and tokens, repairs (turns rewritten, salvaged or kept verbatim,
/// re-asked units), the per-conversation table, empty sessions and failed units.
fn print_build_report(summary: &mragent::ingest::BuildSummary) -> anyhow::Result<()> {
    outln!("{summary}")
}

/// `mragent ask`: the answer, its supporting lines and the trace path.
async fn ask(args: &mragent::cli::AskArgs, paths: &ProjectPaths) -> anyhow::Result<Outcome> {
    let report = mragent::commands::own::ask(paths, args, env_var).await?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        outln!("{}", if report.ok { &report.answer } else { "(no answer)" })?;
        for line in &report.supporting {
            let date = line.date.as_deref().unwrap_or("?");
            outln!("  [{}] {date} {}: {}", line.dia_id, line.speaker, line.text)?;
        }
        for missing in &report.missing_sessions {
            let why = missing.error.as_deref().unwrap_or("never built; run the add again");
            outln!(
                "note: answered without session {} ({} messages not built: {why})",
                missing.session,
                missing.messages
            )?;
        }
        outln!("question: {}", report.question_id)?;
        outln!("trace: {}", report.trace.display())?;
    }
    match &report.error {
        Some(error) => Err(anyhow::anyhow!("the question failed: {error}")),
        None => Ok(Outcome::Success),
    }
}

/// `mragent memory …`: the own-conversation store.
async fn memory(command: MemoryCommand, paths: &ProjectPaths) -> anyhow::Result<Outcome> {
    use mragent::commands::own;
    match command {
        MemoryCommand::Add(args) => {
            let report = own::memory_add(paths, &args, env_var).await?;
            if args.json {
                outln!("{}", serde_json::to_string_pretty(&report)?)?;
            } else {
                outln!("{report}")?;
            }
            Ok(if report.is_complete() { Outcome::Success } else { Outcome::Partial })
        }
        MemoryCommand::Search(args) => {
            let hits = own::memory_search(paths, &args, env_var).await?;
            if args.json {
                outln!("{}", serde_json::to_string_pretty(&hits)?)?;
            }
            for hit in hits.iter().filter(|_| !args.json) {
                let when = hit.timestamp.as_deref().or(hit.date.as_deref()).unwrap_or("?");
                outln!(
                    "{:.3}  [{}] {when} {}: {}  ({})",
                    hit.score,
                    hit.dia_id,
                    hit.speaker,
                    hit.text,
                    hit.id
                )?;
            }
            Ok(Outcome::Success)
        }
        MemoryCommand::List(args) => {
            let conversations = own::open_store(paths)?.list()?;
            if args.json {
                outln!("{}", serde_json::to_string_pretty(&conversations)?)?;
            }
            for info in conversations.iter().filter(|_| !args.json) {
                outln!(
                    "{}  {} messages, {} sessions ({} built), {} to {}, embedder {}",
                    info.id,
                    info.messages,
                    info.sessions,
                    info.built_sessions,
                    info.first_message.as_deref().unwrap_or("?"),
                    info.last_message.as_deref().unwrap_or("?"),
                    info.embedder
                )?;
            }
            Ok(Outcome::Success)
        }
        MemoryCommand::Show(args) => {
            let stored = own::open_store(paths)?.load(&args.conversation)?;
            out!("{}", own::render_conversation(&stored, args.json)?)?;
            Ok(Outcome::Success)
        }
        MemoryCommand::Forget(args) => match own::memory_forget(paths, &args, env_var).await? {
            own::Forgotten::Conversation(info) => {
                outln!(
                    "forgot {}: {} messages, {} sessions",
                    info.id,
                    info.messages,
                    info.sessions
                )?;
                Ok(Outcome::Success)
            }
            own::Forgotten::Message(forgotten, report) => {
                let removed =
                    if forgotten.session_removed { ", now empty and removed" } else { "" };
                outln!(
                    "forgot message {} of {} (session {}{removed})",
                    forgotten.message,
                    forgotten.conversation,
                    forgotten.session
                )?;
                outln!("{report}")?;
                Ok(if report.is_complete() { Outcome::Success } else { Outcome::Partial })
            }
        },
    }
}

fn summary_dir(paths: &ProjectPaths, summary: &mragent::eval::EvalSummary) -> std::path::PathBuf {
    paths.root.join("eval").join(&summary.dataset).join(&summary.file)
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn report(error: anyhow::Error) -> ExitCode {
    if error.chain().any(|cause| cause.is::<StdoutClosed>()) {
        return ExitCode::from(BROKEN_PIPE_STATUS);
    }
    eprintln!("error: {error:#}");
    ExitCode::FAILURE
}
