//! The run's result lines checked against the dataset the run used: every question answered
//! once, nothing foreign, categories and question texts as the dataset has them.
//!
//! [`match_results`] pairs each result line with its dataset question and returns the pairs in
//! dataset order (sample order, then question order), or a [`RunError`] listing every problem
//! with the file and the ids concerned. Only missing questions can be allowed (`--partial`);
//! every other problem means the result files do not belong to this dataset selection.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::dataset::{Category, DatasetKind, LoadOptions, LongMemEvalType, Question};
use crate::results::ResultLine;

/// At most this many ids are named per problem; the rest are counted.
const IDS_SHOWN: usize = 12;

/// A dataset question the run should have answered.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpectedQuestion {
    /// The question with its gold data.
    pub question: Question,
    /// Position in its sample's question list, counting from 0 (the official files' index).
    pub qa_index: usize,
}

/// A result line and the question it answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Matched {
    /// The result line.
    pub line: ResultLine,
    /// The dataset's question (gold answer, evidence, category).
    pub question: Question,
    /// Position in its sample's question list, counting from 0.
    pub qa_index: usize,
}

/// A result line with where it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct SourcedLine {
    /// Result file.
    pub file: PathBuf,
    /// 1-based line number.
    pub line: usize,
    /// The parsed line.
    pub result: ResultLine,
}

/// One thing wrong with the result files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunProblem {
    /// A result file holds no result line.
    EmptyFile {
        /// The file.
        file: String,
    },
    /// Dataset questions without a result line.
    Missing {
        /// Their ids, in dataset order.
        ids: Vec<String>,
        /// Questions the dataset selection holds.
        expected: usize,
    },
    /// Ids the dataset selection does not hold.
    Foreign {
        /// The file.
        file: String,
        /// The ids, in file order.
        ids: Vec<String>,
    },
    /// An id answered more than once.
    Duplicate {
        /// The id.
        id: String,
        /// Every place it occurs (`file:line`).
        places: Vec<String>,
    },
    /// A category that is not one of the dataset's.
    UnknownCategory {
        /// `file:line`.
        place: String,
        /// The id.
        id: String,
        /// The category as written.
        category: String,
    },
    /// A field that differs from the dataset's value for the id.
    Differs {
        /// `file:line`.
        place: String,
        /// The id.
        id: String,
        /// `question`, `category`, `answer` or `sample`.
        field: &'static str,
        /// The result line's value.
        found: String,
        /// The dataset's value.
        expected: String,
    },
}

impl std::fmt::Display for RunProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunProblem::EmptyFile { file } => write!(f, "{file}: empty result file"),
            RunProblem::Missing { ids, expected } => write!(
                f,
                "{} of {expected} questions have no result line: {} (pass --partial to score what is there)",
                ids.len(),
                id_list(ids)
            ),
            RunProblem::Foreign { file, ids } => write!(
                f,
                "{file}: {} id(s) not in the dataset selection: {}",
                ids.len(),
                id_list(ids)
            ),
            RunProblem::Duplicate { id, places } => {
                write!(f, "{id} is answered {} times: {}", places.len(), places.join(", "))
            }
            RunProblem::UnknownCategory { place, id, category } => {
                write!(f, "{place}: {id} has unknown category {category}")
            }
            RunProblem::Differs { place, id, field, found, expected } => write!(
                f,
                "{place}: {id} {field} differs from the dataset's: {found:?} (dataset: {expected:?})"
            ),
        }
    }
}

fn id_list(ids: &[String]) -> String {
    let mut out = ids.iter().take(IDS_SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if ids.len() > IDS_SHOWN {
        let _ = write!(out, ", … and {} more", ids.len() - IDS_SHOWN);
    }
    out
}

/// Result files that do not match the dataset selection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render_run_error(dataset_file, problems))]
pub struct RunError {
    /// The dataset file the results were checked against.
    pub dataset_file: String,
    /// Every problem found.
    pub problems: Vec<RunProblem>,
}

fn render_run_error(dataset_file: &str, problems: &[RunProblem]) -> String {
    let mut out =
        format!("the result files do not match {dataset_file} ({} problem(s)):", problems.len());
    for problem in problems {
        let _ = write!(out, "\n  - {problem}");
    }
    out
}

/// The dataset selection the run answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection<'a> {
    /// Dataset kind.
    pub dataset: DatasetKind,
    /// Dataset file.
    pub file: &'a Path,
    /// `--sample` of the run.
    pub sample: Option<&'a str>,
    /// `--ca` of the run (LongMemEval).
    pub question_type: Option<LongMemEvalType>,
}

/// Load the questions of the selection, in dataset order.
pub fn load_expected(selection: &Selection<'_>) -> anyhow::Result<Vec<ExpectedQuestion>> {
    if !selection.file.exists() {
        anyhow::bail!(
            "dataset file not found: {} (eval checks the results against the dataset the run used; pass --data-file)",
            selection.file.display()
        );
    }
    let options = LoadOptions {
        samples: selection.sample.iter().map(|sample| sample.to_string()).collect(),
        question_type: selection.question_type,
        drop_assistant_turns: false,
    };
    let conversations = crate::dataset::load(selection.dataset, selection.file, &options)?;
    let mut expected = Vec::new();
    for conversation in conversations {
        for (qa_index, question) in conversation.questions.into_iter().enumerate() {
            let wanted = match (selection.question_type, &question.category) {
                (Some(kind), Category::LongMemEval(name)) => name == kind.as_str(),
                _ => true,
            };
            if wanted {
                expected.push(ExpectedQuestion { question, qa_index });
            }
        }
    }
    if expected.is_empty() {
        anyhow::bail!("no question in {} matches the selection", selection.file.display());
    }
    Ok(expected)
}

/// Read result lines from `files` in order, keeping where each came from; a line that is not a
/// result is an error naming the file and line.
pub fn read_result_lines(files: &[PathBuf]) -> anyhow::Result<Vec<SourcedLine>> {
    let mut lines = Vec::new();
    for path in files {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        for (number, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let result: ResultLine = serde_json::from_str(line)
                .with_context(|| format!("parsing {} line {}", path.display(), number + 1))?;
            lines.push(SourcedLine { file: path.clone(), line: number + 1, result });
        }
    }
    Ok(lines)
}

/// Pair every result line with its question, in dataset order. `files` are every file read
/// (an empty one is a problem); `shown` turns a path into the text used in messages.
pub fn match_results(
    dataset_file: &str,
    expected: &[ExpectedQuestion],
    files: &[PathBuf],
    lines: Vec<SourcedLine>,
    partial: bool,
    shown: &dyn Fn(&Path) -> String,
) -> Result<Vec<Matched>, RunError> {
    let mut problems = Vec::new();
    for file in files {
        if !lines.iter().any(|line| &line.file == file) {
            problems.push(RunProblem::EmptyFile { file: shown(file) });
        }
    }
    let position: BTreeMap<&str, usize> = expected
        .iter()
        .enumerate()
        .map(|(index, entry)| (entry.question.id.as_str(), index))
        .collect();
    let mut occurrences: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    // Foreign ids grouped per file, files in reading order.
    let mut foreign: Vec<(String, Vec<String>)> = Vec::new();
    let mut found: BTreeMap<usize, SourcedLine> = BTreeMap::new();
    for sourced in lines {
        let place = format!("{}:{}", shown(&sourced.file), sourced.line);
        let id = sourced.result.question_id.clone();
        let Some(&index) = position.get(id.as_str()) else {
            let file = shown(&sourced.file);
            match foreign.iter_mut().find(|(name, _)| *name == file) {
                Some((_, ids)) => ids.push(id),
                None => foreign.push((file, vec![id])),
            }
            continue;
        };
        occurrences.entry(index).or_default().push(place.clone());
        let question = &expected[index].question;
        check_fields(&place, &sourced.result, question, &mut problems);
        found.entry(index).or_insert(sourced);
    }
    for (file, ids) in foreign {
        problems.push(RunProblem::Foreign { file, ids });
    }
    for (index, places) in &occurrences {
        if places.len() > 1 {
            problems.push(RunProblem::Duplicate {
                id: expected[*index].question.id.clone(),
                places: places.clone(),
            });
        }
    }
    let missing: Vec<String> = expected
        .iter()
        .enumerate()
        .filter(|(index, _)| !found.contains_key(index))
        .map(|(_, entry)| entry.question.id.clone())
        .collect();
    if !missing.is_empty() && !partial {
        problems.push(RunProblem::Missing { ids: missing, expected: expected.len() });
    }
    if !problems.is_empty() {
        return Err(RunError { dataset_file: dataset_file.to_string(), problems });
    }
    Ok(found
        .into_iter()
        .map(|(index, sourced)| Matched {
            line: sourced.result,
            question: expected[index].question.clone(),
            qa_index: expected[index].qa_index,
        })
        .collect())
}

fn check_fields(
    place: &str,
    line: &ResultLine,
    question: &Question,
    problems: &mut Vec<RunProblem>,
) {
    let known = match &line.category {
        Category::Locomo(number) => (1..=5).contains(number),
        Category::LongMemEval(name) => LongMemEvalType::parse(name).is_some(),
    };
    if !known {
        problems.push(RunProblem::UnknownCategory {
            place: place.to_string(),
            id: line.question_id.clone(),
            category: line.category.to_string(),
        });
    } else if line.category != question.category {
        problems.push(differs(place, line, "category", &line.category, &question.category));
    }
    if line.question != question.question {
        problems.push(differs(place, line, "question", &line.question, &question.question));
    }
    if line.answer != question.answer {
        let show = |answer: &Option<String>| answer.clone().unwrap_or_else(|| "null".into());
        problems.push(differs(place, line, "answer", show(&line.answer), show(&question.answer)));
    }
    if line.sample != question.sample_id {
        problems.push(differs(place, line, "sample", &line.sample, &question.sample_id));
    }
}

fn differs(
    place: &str,
    line: &ResultLine,
    field: &'static str,
    found: impl ToString,
    expected: impl ToString,
) -> RunProblem {
    RunProblem::Differs {
        place: place.to_string(),
        id: line.question_id.clone(),
        field,
        found: found.to_string(),
        expected: expected.to_string(),
    }
}
