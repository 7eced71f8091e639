//! Which code made an output: the crate version, and the git commit and dirty flag embedded
//! at build time by `build.rs`. Every manifest, archive and `mragent --version` carries them.

use serde::{Deserialize, Serialize};

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `mragent --version`'s line: the version, then the commit and whether the tree was dirty.
pub const VERSION_LINE: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("MRAGENT_BUILD"), ")");

/// The build of this binary, as outputs record it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Build {
    /// The crate version.
    pub version: String,
    /// The commit the binary was built from; `None` when built outside a git checkout.
    pub git_commit: Option<String>,
    /// Whether the tree had uncommitted changes to tracked files; `None` without a commit.
    pub git_dirty: Option<bool>,
}

impl Build {
    /// This binary's.
    pub fn of_this_binary() -> Self {
        let commit = env!("MRAGENT_GIT_COMMIT");
        let dirty = match env!("MRAGENT_GIT_DIRTY") {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        };
        Self {
            version: VERSION.to_string(),
            git_commit: (!commit.is_empty()).then(|| commit.to_string()),
            git_dirty: dirty,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_line_names_the_embedded_commit() {
        let build = Build::of_this_binary();
        assert_eq!(build.version, VERSION);
        match &build.git_commit {
            Some(commit) => {
                assert_eq!(commit.len(), 40, "{commit}");
                assert!(VERSION_LINE.contains(commit.as_str()), "{VERSION_LINE}");
                assert!(build.git_dirty.is_some());
            }
            None => assert!(VERSION_LINE.contains("no commit recorded"), "{VERSION_LINE}"),
        }
    }
}
