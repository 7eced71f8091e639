//! Seeded folds for learning rules: which questions train, which validate, which are held out
//! for the test.
//!
//! LoCoMo splits **by conversation**: a conversation's questions share its people and facts, so
//! a conversation is wholly in the test part of a fold or wholly out of it. The conversations
//! are shuffled and dealt into `folds` groups; fold `k` tests on group `k`, validates on group
//! `k + 1` and trains on the rest. With two folds there is no third group: the validation
//! questions are then a stratified draw from the training conversations, and the rest of their
//! questions train. LongMemEval splits **by question**,
//! stratified by question type: each type's questions are shuffled and dealt in turn, so each
//! group holds every type in proportion; fold `k` tests on group `k`, and the validation
//! questions are a stratified draw from the other groups. Pure functions, no IO.

use std::collections::BTreeMap;

use rand::SeedableRng as _;
use rand::seq::SliceRandom as _;
use serde::{Deserialize, Serialize};

use crate::dataset::{Conversation, DatasetKind, Question};

/// One fold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fold {
    /// Fold index, from 0.
    pub index: u32,
    /// Conversations whose questions are held out for the test.
    pub test_samples: Vec<String>,
    /// Held-out questions (every question of the test conversations, judged or not).
    pub test: Vec<String>,
    /// Conversations the validation questions come from.
    pub validation_samples: Vec<String>,
    /// Questions that score each step's rule set.
    pub validation: Vec<String>,
    /// Conversations the training questions come from.
    pub train_samples: Vec<String>,
    /// Questions the rules are learned from.
    pub train: Vec<String>,
}

/// Every fold of a learning run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldPlan {
    /// The seed the folds were drawn with.
    pub seed: u64,
    /// The folds.
    pub folds: Vec<Fold>,
}

/// A split that cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FoldError {
    /// Too few folds or too few conversations.
    #[error("{0}")]
    TooFew(String),
}

/// A seed derived from `seed` and a label, so every shuffle has its own stream.
pub fn derived_seed(seed: u64, label: &str) -> u64 {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(format!("{seed}/{label}").as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(bytes)
}

/// `items` shuffled by a generator seeded with `derived_seed(seed, label)`.
pub fn shuffled<T>(mut items: Vec<T>, seed: u64, label: &str) -> Vec<T> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(derived_seed(seed, label));
    items.shuffle(&mut rng);
    items
}

/// The folds of `conversations` (see the module documentation). `judged` says which questions
/// the judge grades: only those train or validate; `validation` caps the validation questions
/// per fold (0: all of them).
pub fn plan(
    dataset: DatasetKind,
    conversations: &[Conversation],
    folds: u32,
    validation: usize,
    seed: u64,
    judged: impl Fn(&Question) -> bool,
) -> Result<FoldPlan, FoldError> {
    if folds < 2 {
        return Err(FoldError::TooFew(format!(
            "--folds {folds}: a fold needs a held-out test part and a part to learn on, so at least 2"
        )));
    }
    let folds = match dataset {
        DatasetKind::Locomo | DatasetKind::Own => {
            by_conversation(conversations, folds, validation, seed, &judged)?
        }
        DatasetKind::LongMemEval => by_question(conversations, folds, validation, seed, &judged)?,
    };
    Ok(FoldPlan { seed, folds })
}

fn by_conversation(
    conversations: &[Conversation],
    folds: u32,
    validation: usize,
    seed: u64,
    judged: &impl Fn(&Question) -> bool,
) -> Result<Vec<Fold>, FoldError> {
    let count = folds as usize;
    if conversations.len() < count {
        return Err(FoldError::TooFew(format!(
            "--folds {folds} needs at least {folds} conversations; the selection has {}",
            conversations.len()
        )));
    }
    let order = shuffled((0..conversations.len()).collect(), seed, "conversations");
    let mut groups = vec![Vec::new(); count];
    for (position, index) in order.into_iter().enumerate() {
        groups[position % count].push(&conversations[index]);
    }
    let ids = |group: &[&Conversation]| -> Vec<String> {
        group.iter().map(|conversation| conversation.sample_id.clone()).collect()
    };
    let questions = |group: &[&Conversation], keep: &dyn Fn(&Question) -> bool| -> Vec<Question> {
        group.iter().flat_map(|c| c.questions.iter()).filter(|q| keep(q)).cloned().collect()
    };
    let mut out = Vec::new();
    for k in 0..count {
        let test_group = &groups[k];
        let validation_at = if count >= 3 { (k + 1) % count } else { (k + 1) % 2 };
        let validation_group = &groups[validation_at];
        let train_group: Vec<&Conversation> = (0..count)
            .filter(|&g| g != k && (count < 3 || g != validation_at))
            .flat_map(|g| groups[g].iter().copied())
            .collect();
        let pool = questions(validation_group, judged);
        let drawn = stratified(&pool, validation, seed, &format!("validation/{k}"));
        let train: Vec<Question> = questions(&train_group, judged)
            .into_iter()
            .filter(|question| !drawn.contains(&question.id))
            .collect();
        out.push(Fold {
            index: k as u32,
            test_samples: ids(test_group),
            test: ids_of(&questions(test_group, &|_| true)),
            validation_samples: ids(validation_group),
            validation: drawn,
            train_samples: ids(&train_group),
            train: ids_of(&train),
        });
    }
    Ok(out)
}

fn by_question(
    conversations: &[Conversation],
    folds: u32,
    validation: usize,
    seed: u64,
    judged: &impl Fn(&Question) -> bool,
) -> Result<Vec<Fold>, FoldError> {
    let count = folds as usize;
    let all: Vec<Question> = conversations
        .iter()
        .flat_map(|c| c.questions.iter())
        .filter(|q| judged(q))
        .cloned()
        .collect();
    if all.len() < count * 3 {
        return Err(FoldError::TooFew(format!(
            "--folds {folds} needs at least {} judged questions; the selection has {}",
            count * 3,
            all.len()
        )));
    }
    // Deal each type's shuffled questions in turn, the types in name order, continuing where
    // the previous type stopped: every group gets each type in proportion.
    let mut groups: Vec<Vec<Question>> = vec![Vec::new(); count];
    let mut position = 0;
    for (name, members) in by_category(&all) {
        for question in shuffled(members, seed, &format!("type/{name}")) {
            groups[position % count].push(question);
            position += 1;
        }
    }
    let sample_of = |questions: &[Question]| -> Vec<String> {
        let mut samples: Vec<String> = questions.iter().map(|q| q.sample_id.clone()).collect();
        samples.sort();
        samples.dedup();
        samples
    };
    let mut out = Vec::new();
    for k in 0..count {
        let test = groups[k].clone();
        let pool: Vec<Question> =
            (0..count).filter(|&g| g != k).flat_map(|g| groups[g].iter().cloned()).collect();
        let validation_ids = stratified(&pool, validation, seed, &format!("validation/{k}"));
        let (validation_questions, train): (Vec<Question>, Vec<Question>) =
            pool.into_iter().partition(|q| validation_ids.contains(&q.id));
        out.push(Fold {
            index: k as u32,
            test_samples: sample_of(&test),
            test: ids_of(&test),
            validation_samples: sample_of(&validation_questions),
            validation: validation_ids,
            train_samples: sample_of(&train),
            train: ids_of(&train),
        });
    }
    Ok(out)
}

fn ids_of(questions: &[Question]) -> Vec<String> {
    questions.iter().map(|question| question.id.clone()).collect()
}

fn by_category(questions: &[Question]) -> BTreeMap<String, Vec<Question>> {
    let mut groups: BTreeMap<String, Vec<Question>> = BTreeMap::new();
    for question in questions {
        groups.entry(question.category.name().to_string()).or_default().push(question.clone());
    }
    groups
}

/// `want` question ids drawn from `pool`, each category in proportion to its share (largest
/// remainders get the spare places, ties to the category name), in pool order; the whole pool
/// when `want` is 0 or at least its size.
pub fn stratified(pool: &[Question], want: usize, seed: u64, label: &str) -> Vec<String> {
    if want == 0 || want >= pool.len() {
        return ids_of(pool);
    }
    let groups = by_category(pool);
    let total = pool.len();
    let mut quotas: Vec<(String, usize, usize)> = groups
        .iter()
        .map(|(name, members)| {
            let exact = want * members.len();
            (name.clone(), exact / total, exact % total)
        })
        .collect();
    let mut spare = want - quotas.iter().map(|(_, quota, _)| quota).sum::<usize>();
    let mut by_remainder: Vec<usize> = (0..quotas.len()).collect();
    by_remainder
        .sort_by(|&a, &b| quotas[b].2.cmp(&quotas[a].2).then(quotas[a].0.cmp(&quotas[b].0)));
    for index in by_remainder {
        if spare == 0 {
            break;
        }
        quotas[index].1 += 1;
        spare -= 1;
    }
    let mut chosen = std::collections::BTreeSet::new();
    for (name, quota, _) in quotas {
        let members = shuffled(groups[&name].clone(), seed, &format!("{label}/{name}"));
        chosen.extend(members.into_iter().take(quota).map(|question| question.id));
    }
    pool.iter().filter(|q| chosen.contains(&q.id)).map(|q| q.id.clone()).collect()
}

/// The training batches of one epoch of a fold: the training questions shuffled for that epoch
/// and cut into batches of `batch`.
pub fn batches(fold: &Fold, epoch: u32, batch: usize, seed: u64) -> Vec<Vec<String>> {
    let order = shuffled(fold.train.clone(), seed, &format!("train/{}/{epoch}", fold.index));
    order.chunks(batch.max(1)).map(<[String]>::to_vec).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::Category;

    fn conversation(id: &str, questions: usize, dataset: DatasetKind) -> Conversation {
        Conversation {
            sample_id: id.into(),
            dataset,
            speakers: Vec::new(),
            sessions: Vec::new(),
            empty_sessions: Vec::new(),
            questions: (0..questions)
                .map(|n| Question {
                    id: format!("{id}:q{}", n + 1),
                    sample_id: id.into(),
                    question: format!("question {n}"),
                    answer: Some("a".into()),
                    adversarial_answer: None,
                    category: Category::Locomo((n % 5 + 1) as u8),
                    evidence: Vec::new(),
                    question_date: None,
                })
                .collect(),
        }
    }

    fn judged(question: &Question) -> bool {
        question.category != Category::Locomo(5)
    }

    #[test]
    fn locomo_folds_never_share_a_conversation_between_parts() {
        let conversations: Vec<Conversation> =
            (0..10).map(|n| conversation(&format!("conv-{n}"), 20, DatasetKind::Locomo)).collect();
        let plan = plan(DatasetKind::Locomo, &conversations, 5, 10, 42, judged).unwrap();
        assert_eq!(plan.folds.len(), 5);
        let mut tested = Vec::new();
        for fold in &plan.folds {
            let sample = |id: &String| id.split(':').next().unwrap().to_string();
            for part in [&fold.validation, &fold.train] {
                assert!(part.iter().all(|id| !fold.test_samples.contains(&sample(id))));
            }
            assert!(fold.train.iter().all(|id| !fold.validation_samples.contains(&sample(id))));
            assert_eq!(fold.test_samples.len(), 2);
            assert_eq!(fold.validation.len(), 10);
            assert_eq!(fold.train.len(), 6 * 16, "category 5 is not judged, so it never trains");
            assert_eq!(fold.test.len(), 40, "every question of the test conversations");
            tested.extend(fold.test_samples.clone());
        }
        tested.sort();
        tested.dedup();
        assert_eq!(tested.len(), 10, "each conversation is tested in exactly one fold");
        // Seeded: the same seed gives the same folds, another seed others.
        assert_eq!(
            plan,
            super::plan(DatasetKind::Locomo, &conversations, 5, 10, 42, judged).unwrap()
        );
        assert_ne!(
            plan,
            super::plan(DatasetKind::Locomo, &conversations, 5, 10, 7, judged).unwrap()
        );
    }

    #[test]
    fn longmemeval_folds_split_questions_by_type_in_proportion() {
        let types = ["multi-session", "temporal-reasoning", "knowledge-update"];
        let conversations: Vec<Conversation> = (0..60)
            .map(|n| {
                let mut c = conversation(&format!("lm{n}"), 1, DatasetKind::LongMemEval);
                c.questions[0].id = format!("lm{n}");
                c.questions[0].category = Category::LongMemEval(types[n % 3].into());
                c
            })
            .collect();
        let plan = plan(DatasetKind::LongMemEval, &conversations, 5, 6, 42, |_| true).unwrap();
        for fold in &plan.folds {
            assert_eq!(fold.test.len(), 12);
            assert_eq!(fold.validation.len(), 6);
            assert_eq!(fold.train.len(), 42);
            for part in [&fold.validation, &fold.train] {
                assert!(part.iter().all(|id| !fold.test.contains(id)));
            }
            let of_type = |ids: &[String], t: usize| {
                ids.iter().filter(|id| id[2..].parse::<usize>().unwrap() % 3 == t).count()
            };
            for t in 0..3 {
                assert_eq!(of_type(&fold.test, t), 4, "type {t} in the test part");
                assert_eq!(of_type(&fold.validation, t), 2, "type {t} in validation");
            }
        }
    }

    #[test]
    fn too_few_folds_or_conversations_are_refused() {
        let conversations: Vec<Conversation> =
            (0..2).map(|n| conversation(&format!("c{n}"), 5, DatasetKind::Locomo)).collect();
        assert!(plan(DatasetKind::Locomo, &conversations, 1, 0, 1, judged).is_err());
        let error = plan(DatasetKind::Locomo, &conversations, 3, 0, 1, judged).unwrap_err();
        assert!(error.to_string().contains("at least 3 conversations"), "{error}");
    }

    #[test]
    fn two_conversations_make_two_folds_that_validate_on_the_training_conversation() {
        let conversations: Vec<Conversation> =
            (0..2).map(|n| conversation(&format!("c{n}"), 10, DatasetKind::Locomo)).collect();
        let plan = plan(DatasetKind::Locomo, &conversations, 2, 3, 1, judged).unwrap();
        for fold in &plan.folds {
            assert_eq!(fold.test_samples.len(), 1);
            assert_eq!(fold.train_samples, fold.validation_samples);
            assert!(!fold.train_samples.contains(&fold.test_samples[0]));
            assert_eq!(fold.validation.len(), 3);
            assert_eq!(fold.train.len(), 8 - 3, "the rest of the judged questions train");
            assert!(fold.train.iter().all(|id| !fold.validation.contains(id)));
        }
    }

    #[test]
    fn batches_cover_the_training_questions_once_per_epoch() {
        let conversations: Vec<Conversation> =
            (0..3).map(|n| conversation(&format!("c{n}"), 20, DatasetKind::Locomo)).collect();
        let plan = plan(DatasetKind::Locomo, &conversations, 3, 0, 1, judged).unwrap();
        let fold = &plan.folds[0];
        let epoch = batches(fold, 0, 5, 1);
        assert_eq!(epoch.len(), fold.train.len().div_ceil(5));
        let mut seen: Vec<String> = epoch.concat();
        seen.sort();
        let mut train = fold.train.clone();
        train.sort();
        assert_eq!(seen, train);
        assert_ne!(batches(fold, 1, 5, 1), epoch, "each epoch has its own order");
    }
}
