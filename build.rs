//! Embeds the provenance of the build: the git commit the binary was built from and whether
//! the tree had uncommitted changes (`MRAGENT_GIT_COMMIT`, `MRAGENT_GIT_DIRTY`, and the line
//! `MRAGENT_BUILD` that `--version` prints). Outside a checkout, or without git, both are
//! empty and the binary says "no commit recorded".
//!
//! Written here rather than with `vergen`/`built`: two `git` calls, and no dependency tree
//! for the build of every clone.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output =
        Command::new("git").args(args).stderr(std::process::Stdio::null()).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?.trim().to_string();
    output.status.success().then_some(text)
}

fn main() {
    let commit = git(&["rev-parse", "HEAD"]).filter(|commit| !commit.is_empty());
    let dirty = commit.as_ref().and_then(|_| {
        git(&["status", "--porcelain", "--untracked-files=no"]).map(|status| !status.is_empty())
    });
    let line = match (&commit, dirty) {
        (Some(commit), Some(true)) => format!("commit {commit}, dirty"),
        (Some(commit), _) => format!("commit {commit}"),
        (None, _) => "no commit recorded".to_string(),
    };
    println!("cargo:rustc-env=MRAGENT_GIT_COMMIT={}", commit.unwrap_or_default());
    println!(
        "cargo:rustc-env=MRAGENT_GIT_DIRTY={}",
        dirty.map_or("", |dirty| if dirty { "true" } else { "false" })
    );
    println!("cargo:rustc-env=MRAGENT_BUILD={line}");
    // Rerun when the sources change (the dirty flag) and when HEAD moves (the commit).
    for path in ["src", "prompts", "Cargo.toml", "Cargo.lock", "build.rs"] {
        if Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    // Only files that exist: Cargo reruns a build script whose watched file is missing on
    // every build (`packed-refs` often is).
    let mut watched = Vec::new();
    for name in ["HEAD", "logs/HEAD", "packed-refs"] {
        watched.extend(git(&["rev-parse", "--git-path", name]));
    }
    if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.extend(git(&["rev-parse", "--git-path", &reference]));
    }
    for path in watched.into_iter().filter(|path| Path::new(path).exists()) {
        println!("cargo:rerun-if-changed={path}");
    }
}
