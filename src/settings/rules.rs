//! `--meta-rules FILE` of `run`, `ask` and `serve`: the rule set, read and checked while the
//! command is resolved, so a bad file stops it before anything is sent or written.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ProjectPaths;
use crate::agent::rules::{RuleSet, RulesError};

/// A rules file given with `--meta-rules`, loaded and checked, with at least one rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaRules {
    /// The file as given on the command line (what the manifest records).
    pub given: PathBuf,
    /// The file read (`given` under the project root).
    pub path: PathBuf,
    /// Its rules.
    pub rules: Arc<RuleSet>,
}

impl MetaRules {
    /// Reads `file` (under the project root when relative). `None` without a file, and for a
    /// file that holds no rules: an empty rule set changes nothing, so it is no rules at all.
    pub fn resolve(paths: &ProjectPaths, file: Option<&Path>) -> anyhow::Result<Option<Self>> {
        let Some(given) = file else {
            return Ok(None);
        };
        let path = paths.under_root(given);
        let rules = RuleSet::load(&path).map_err(|error| match error {
            // These name the file already.
            RulesError::Read { .. } | RulesError::Parse { .. } => {
                anyhow::anyhow!("--meta-rules: {error}")
            }
            RulesError::Invalid { .. } | RulesError::Set(_) => {
                anyhow::anyhow!("--meta-rules {}: {error}", path.display())
            }
        })?;
        if rules.is_empty() {
            tracing::warn!(file = %path.display(), "the rules file holds no rules; answering without rules");
            return Ok(None);
        }
        Ok(Some(Self { given: given.to_path_buf(), path, rules: Arc::new(rules) }))
    }

    /// The hash of the block the model sees ([`RuleSet::hash`]).
    pub fn hash(&self) -> String {
        self.rules.hash()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::rules::Rule;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_relative_file_is_read_under_the_root_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let paths = ProjectPaths { root: dir.path().to_path_buf(), store: None };
        let rule = Rule {
            id: "M0".into(),
            text: "Check the session date first.".into(),
            sources: Vec::new(),
            added: None,
            changed: None,
        };
        let set = RuleSet::new(vec![rule]);
        write(dir.path(), "rules.json", &serde_json::to_string(&set).unwrap());
        let loaded = MetaRules::resolve(&paths, Some(Path::new("rules.json"))).unwrap().unwrap();
        assert_eq!(
            (loaded.given.as_path(), loaded.path.as_path()),
            (Path::new("rules.json"), dir.path().join("rules.json").as_path())
        );
        assert_eq!((*loaded.rules).clone(), set);
        assert_eq!(loaded.hash(), set.hash());
        assert_eq!(MetaRules::resolve(&paths, None).unwrap(), None);

        write(dir.path(), "empty.json", r#"{"format": 1, "rules": []}"#);
        assert_eq!(MetaRules::resolve(&paths, Some(Path::new("empty.json"))).unwrap(), None);

        let long = vec!["word"; 31].join(" ");
        let too_long = serde_json::json!({"format": 1, "rules": [{"id": "M0", "text": long}]});
        write(dir.path(), "long.json", &too_long.to_string());
        write(dir.path(), "prose.json", "not json");
        for (name, expected) in [
            ("long.json", "31 words"),
            ("prose.json", "is not a rules file"),
            ("absent.json", "cannot read"),
        ] {
            let error = MetaRules::resolve(&paths, Some(Path::new(name))).unwrap_err().to_string();
            let file = dir.path().join(name).display().to_string();
            assert!(error.starts_with("--meta-rules"), "{error}");
            assert!(error.contains(&file) && error.contains(expected), "{error}");
            assert_eq!(error.matches(&file).count(), 1, "{error}");
        }
    }
}
