//! Standard output for the commands: results reach it only through [`write_out`]
//! (`outln!`/`out!`), since `println!` would panic on a closed pipe (the `print_stdout` lint
//! keeps it out). A reader that closed the pipe (`mragent memory list | head`) is not a failure:
//! the command stops with [`StdoutClosed`] and `main` ends quietly with [`BROKEN_PIPE_STATUS`].

/// Standard output was closed by its reader (`| head`).
#[derive(Debug, thiserror::Error)]
#[error("standard output was closed")]
pub struct StdoutClosed;

/// The status a shell reports for a program stopped by SIGPIPE (128 + 13), as `yes | head`.
pub const BROKEN_PIPE_STATUS: u8 = 141;

/// Whether `error` is (or was caused by) [`StdoutClosed`].
pub fn is_stdout_closed(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| cause.is::<StdoutClosed>())
}

/// Writes `text` to standard output and flushes it. A closed pipe gives [`StdoutClosed`];
/// any other write error is a failure.
pub fn write_out(text: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
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
    ($($arg:tt)*) => {
        $crate::commands::output::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` through [`write_out`]; use with `?`.
macro_rules! out {
    ($($arg:tt)*) => { $crate::commands::output::write_out(format_args!($($arg)*)) };
}

pub(crate) use {out, outln};
