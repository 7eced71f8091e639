//! The `mragent` binary: load `.env`, parse the command line, start tracing, resolve the
//! command's settings, dispatch to `commands::<command>::execute`, and turn the outcome into an
//! exit code: 0 success, 1 failure (the error printed once), 2 partial failure, 130 a second
//! Ctrl-C (`commands::interrupt`), 141 when the reader of standard output stopped early, as
//! `mragent memory list | head` does (`commands::output`).

use std::process::ExitCode;

use clap::Parser as _;
use mragent::cli::{Cli, Command};
use mragent::commands::{self, Outcome};
use mragent::settings::{ProcessEnv, ProjectPaths, Resolved};

fn main() -> ExitCode {
    // A missing .env is normal; a malformed one is worth a warning after logging starts.
    let dotenv = dotenvy::dotenv();
    let cli = Cli::parse();
    // The long-running services keep resident memory near their cache budget: before any
    // thread allocates, the allocator gets one arena per core.
    if matches!(cli.command, Command::Serve(_) | Command::Mcp(_))
        && let Some(arenas) = mragent::settings::malloc_arenas()
    {
        mragent::heap::cap_arenas(arenas);
    }
    // `verify` is quiet unless asked (-v) and writes no log file: it writes nothing outside
    // the folder its user names.
    let verifying = matches!(cli.command, Command::Verify(_));
    let verbosity: i8 = if cli.global.quiet || (verifying && cli.global.verbose == 0) {
        -1
    } else {
        cli.global.verbose.min(3) as i8
    };
    let paths = match ProjectPaths::resolve(&cli.global.root) {
        Ok(paths) => paths.with_store(cli.global.store.clone()),
        Err(error) => return report(error),
    };
    let directive = mragent::settings::log_directive();
    let directive = directive.as_deref();
    let _log = if verifying {
        match mragent::logging::init_stderr(verbosity, directive) {
            Ok(()) => None,
            Err(error) => return report(error),
        }
    } else {
        match mragent::logging::init(
            &paths.root,
            commands::name(&cli.command),
            verbosity,
            directive,
        ) {
            Ok(guard) => Some(guard),
            Err(error) => return report(error),
        }
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
    match runtime.block_on(dispatch(cli.command, &paths, cli.global.quiet)) {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Partial) => ExitCode::from(2),
        Err(error) => report(error),
    }
}

async fn dispatch(command: Command, paths: &ProjectPaths, quiet: bool) -> anyhow::Result<Outcome> {
    match mragent::settings::resolve(command, paths, quiet, &ProcessEnv)? {
        Resolved::Ping(job) => commands::ping::execute(&job).await,
        Resolved::Build(job) => commands::build::execute(&job).await,
        Resolved::Run(job) => commands::run::execute(&job).await,
        Resolved::Eval(job) => commands::eval::execute(&job).await,
        Resolved::Compare(job) => commands::compare::execute(&job).await,
        Resolved::Learn(job) => commands::learn::execute(&job).await,
        Resolved::Retrieve(job) => commands::retrieve::execute(job).await,
        Resolved::Trace(job) => commands::trace::execute(&job),
        Resolved::Memory(job) => commands::memory::execute(job).await,
        Resolved::Ask(job) => commands::ask::execute(&job).await,
        Resolved::Serve(job) => commands::serve::execute(&job).await,
        Resolved::Mcp(job) => commands::mcp::execute(&job).await,
        Resolved::StoreCopy(args) => commands::store_copy::execute(args).await,
        Resolved::Keys(paths, command) => commands::keys::execute(&paths, command).await,
        Resolved::Export(job) => commands::export::execute(&job),
        Resolved::Verify(job) => commands::verify::execute(&job).await,
    }
}

fn report(error: anyhow::Error) -> ExitCode {
    if commands::output::is_stdout_closed(&error) {
        return ExitCode::from(commands::output::BROKEN_PIPE_STATUS);
    }
    eprintln!("error: {error:#}");
    ExitCode::FAILURE
}
