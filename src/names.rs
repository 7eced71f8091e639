//! The one rule for names that users (or datasets) give and that become a path or a key:
//! conversation ids, user ids, tags and sample ids all pass [`check_name`] before they touch a
//! file name, a store key or a query. [`check_inside`] then checks the resolved path too.
//!
//! The limits that the CLI and the HTTP API share live here as well, so the two cannot differ.

use std::path::{Component, Path, PathBuf};

/// Longest id (conversation, user, sample) or tag, in characters.
pub const MAX_NAME_CHARS: usize = 128;
/// Longest text of one message, in characters (Unicode scalar values, as JSON Schema's
/// `maxLength` counts them). 16,000 characters are at most about 16,000 tokens (about 4,000 in
/// English), inside any chat model's context together with the rewrite prompt.
pub const MAX_MESSAGE_CHARS: usize = 16_000;
/// Most messages one add may carry.
pub const MAX_MESSAGES_PER_ADD: usize = 10_000;

/// What a checked name is, for the error message and the field it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    /// A conversation id (own data).
    Conversation,
    /// A user id.
    User,
    /// A tag (a run tag, `--file`).
    Tag,
    /// A dataset sample id.
    Sample,
    /// A message id.
    Message,
}

impl NameKind {
    /// The field or flag a user fixes.
    pub fn field(self) -> &'static str {
        match self {
            NameKind::Conversation => "conversation",
            NameKind::User => "user",
            NameKind::Tag => "tag",
            NameKind::Sample => "sample id",
            NameKind::Message => "message",
        }
    }
}

/// A name that breaks the rule, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid {} {value:?}: {reason} (an id is 1-{MAX_NAME_CHARS} characters of ASCII letters, digits and . _ - : @ +, starting with a letter or digit)",
    kind.field()
)]
pub struct InvalidName {
    /// What was checked.
    pub kind: NameKind,
    /// The name as given (cut to 200 characters so an error never echoes a huge input).
    pub value: String,
    /// What is wrong.
    pub reason: &'static str,
}

/// Checks `value` against the one rule: 1–[`MAX_NAME_CHARS`] characters, only ASCII letters,
/// digits and `.` `_` `-` `:` `@` `+`, the first a letter or digit, and no `..`. Such a name can
/// never be a path separator, an absolute path, a parent reference or a control character,
/// whatever it is joined to.
pub fn check_name(kind: NameKind, value: &str) -> Result<(), InvalidName> {
    let reason = if value.is_empty() {
        Some("it is empty")
    } else if value.chars().count() > MAX_NAME_CHARS {
        Some("it is too long")
    } else if let Some(bad) = value.chars().find(|c| !allowed(*c)) {
        Some(if bad == '/' || bad == '\\' {
            "it contains a path separator"
        } else if bad.is_control() {
            "it contains a control character"
        } else if bad.is_whitespace() {
            "it contains whitespace"
        } else {
            "it contains a character outside the allowed set"
        })
    } else if !value.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        Some("it does not start with a letter or digit")
    } else if value.contains("..") {
        Some("it contains `..`")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(InvalidName { kind, value: value.chars().take(200).collect(), reason }),
        None => Ok(()),
    }
}

/// [`check_name`]'s rule as a regular expression without look-around (for JSON Schema's
/// `pattern`; the length is the schema's `maxLength`): a letter or digit, then allowed
/// characters where every `.` is followed by something other than a `.` or ends the name.
pub const NAME_PATTERN: &str = r"^[A-Za-z0-9]([A-Za-z0-9_:@+-]|\.[A-Za-z0-9_:@+-])*\.?$";

/// A conversation id given on the command line (clap's value parser for `--conversation`),
/// checked by [`check_name`] before anything else runs.
pub fn conversation_id(value: &str) -> Result<String, InvalidName> {
    check_name(NameKind::Conversation, value)?;
    Ok(value.to_string())
}

/// clap's parser of user ids: [`check_name`] with [`NameKind::User`].
pub fn user_id(value: &str) -> Result<String, InvalidName> {
    check_name(NameKind::User, value)?;
    Ok(value.to_string())
}

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '@' | '+')
}

/// A path that would leave its root.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} is outside {}; refusing to write it", path.display(), root.display())]
pub struct OutsideRoot {
    /// The root.
    pub root: PathBuf,
    /// The offending path.
    pub path: PathBuf,
}

/// Checks that `path` stays under `root` once resolved: every `..` is applied lexically (the
/// path need not exist yet) and, where a prefix of the path exists, symbolic links in it are
/// followed. Called by every writer whose file name carries a user-given name, after
/// [`check_name`], so a rule that ever let something through still cannot escape.
pub fn check_inside(root: &Path, path: &Path) -> Result<(), OutsideRoot> {
    let outside = || OutsideRoot { root: root.to_path_buf(), path: path.to_path_buf() };
    let absolute_root = resolve(root).ok_or_else(outside)?;
    let joined = if path.is_absolute() { path.to_path_buf() } else { root.join(path) };
    let absolute = resolve(&joined).ok_or_else(outside)?;
    if absolute.starts_with(&absolute_root) { Ok(()) } else { Err(outside()) }
}

/// `path` made absolute, its longest existing prefix canonicalised (links followed) and the rest
/// normalised lexically; `None` when a `..` climbs above the file-system root.
fn resolve(path: &Path) -> Option<PathBuf> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(path)
    };
    let mut normal = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::ParentDir => {
                if !normal.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => normal.push(other),
        }
    }
    // Follow links in the part that exists: the deepest existing ancestor, canonicalised.
    let mut existing = normal.clone();
    let mut rest = Vec::new();
    while !existing.exists() {
        rest.push(existing.file_name()?.to_os_string());
        if !existing.pop() {
            return None;
        }
    }
    let mut resolved = existing.canonicalize().ok()?;
    resolved.extend(rest.iter().rev());
    Some(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_ids_datasets_and_users_use() {
        for good in ["conv-26", "demo", "gpt4_2655b836_abs", "0a995998", "a@b.example", "x:y+z.1"] {
            assert_eq!(check_name(NameKind::Conversation, good), Ok(()), "{good}");
        }
        assert_eq!(check_name(NameKind::Tag, &"a".repeat(MAX_NAME_CHARS)), Ok(()));
    }

    #[test]
    fn refuses_every_way_out_of_a_directory() {
        let cases = [
            ("", "it is empty"),
            ("../../../escape", "it contains a path separator"),
            ("/etc/passwd", "it contains a path separator"),
            ("a\\b", "it contains a path separator"),
            ("..", "it does not start with a letter or digit"),
            (".hidden", "it does not start with a letter or digit"),
            ("a..b", "it contains `..`"),
            ("a\nb", "it contains a control character"),
            ("a\0b", "it contains a control character"),
            (" padded", "it contains whitespace"),
            ("café", "it contains a character outside the allowed set"),
            ("a%2Fb", "it contains a character outside the allowed set"),
        ];
        for (bad, reason) in cases {
            let error = check_name(NameKind::Conversation, bad).unwrap_err();
            assert_eq!(error.reason, reason, "{bad:?}");
            assert!(error.to_string().starts_with("invalid conversation"), "{error}");
        }
        let long = "a".repeat(MAX_NAME_CHARS + 1);
        assert_eq!(check_name(NameKind::User, &long).unwrap_err().reason, "it is too long");
    }

    #[test]
    fn the_schema_pattern_is_the_same_rule() {
        let pattern = regex::Regex::new(NAME_PATTERN).unwrap();
        let names = [
            "conv-26",
            "a",
            "a.",
            "a.b",
            "a..b",
            "a...",
            ".a",
            "-a",
            "a/b",
            "a b",
            "é",
            "a.-b",
            "a.:",
            "1..",
            "x_y:z@w+v",
            "a.b.c",
            "a\n",
            "",
        ];
        for name in names {
            assert_eq!(pattern.is_match(name), check_name(NameKind::Tag, name).is_ok(), "{name:?}");
        }
    }

    #[test]
    fn an_error_never_echoes_a_huge_input() {
        let huge = "/".repeat(1_000_000);
        let error = check_name(NameKind::Conversation, &huge).unwrap_err();
        assert!(error.to_string().len() < 600);
    }

    #[test]
    fn resolved_paths_must_stay_under_the_root() {
        let root = tempfile::tempdir().unwrap();
        let inside = root.path().join("result/own/x_result.jsonl");
        assert_eq!(check_inside(root.path(), &inside), Ok(()));
        assert_eq!(check_inside(root.path(), Path::new("result/own/a.jsonl")), Ok(()));
        for bad in ["result/../../escape.jsonl", "/tmp/escape.jsonl", "../x"] {
            assert!(check_inside(root.path(), Path::new(bad)).is_err(), "{bad}");
        }
        // A link inside the root that points out of it is followed.
        #[cfg(unix)]
        {
            let other = tempfile::tempdir().unwrap();
            std::os::unix::fs::symlink(other.path(), root.path().join("link")).unwrap();
            assert!(check_inside(root.path(), &root.path().join("link/file")).is_err());
        }
    }
}
