//! Views of stored conversations that queries answer over, made in memory and never written:
//! several conversations of one user as one ([`StoredConversation::merge`]), and a conversation
//! as it was known at a time ([`StoredConversation::as_of`]).

use super::facts::StoredFact;
use super::read::{StoredConversation, StoredSession};
use crate::memory::input::SessionRewrite;

/// Where a session of a merged view comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOrigin {
    /// The session's number in the view.
    pub number: u32,
    /// Its conversation.
    pub conversation: String,
    /// Its number there.
    pub original: u32,
}

/// `D<old>:rest` → `D<new>:rest`; other ids unchanged.
fn renumber_id(id: &str, old: u32, new: u32) -> String {
    match id.strip_prefix(&format!("D{old}:")) {
        Some(rest) => format!("D{new}:{rest}"),
        None => id.to_string(),
    }
}

fn renumber_rewrite(rewrite: &mut SessionRewrite, old: u32, new: u32) {
    let id = |text: &mut String| *text = renumber_id(text, old, new);
    rewrite.session = format!("D{new}");
    for sentence in &mut rewrite.sentences {
        id(&mut sentence.id);
        id(&mut sentence.origin);
        sentence.topic_ids.iter_mut().for_each(id);
    }
    rewrite.topics.iter_mut().for_each(|topic| id(&mut topic.id));
    for fact in &mut rewrite.personal_facts {
        id(&mut fact.id);
        fact.origins.iter_mut().for_each(id);
    }
}

/// The session under number `new`: every id in its outputs and facts follows.
fn renumber_session(session: &mut StoredSession, new: u32) {
    let old = session.number;
    session.number = new;
    let id = |text: &mut String| *text = renumber_id(text, old, new);
    if let Some(outputs) = &mut session.outputs {
        renumber_rewrite(&mut outputs.rewrite, old, new);
        let keywords = &mut outputs.keywords.keywords;
        keywords.session = format!("D{new}");
        keywords.sentences.iter_mut().for_each(|sentence| id(&mut sentence.sentence_id));
        outputs.sentence_vectors.iter_mut().for_each(|(sentence, _)| id(sentence));
        outputs.topic_vectors.iter_mut().for_each(|(topic, _)| id(topic));
    }
    for fact in &mut session.facts {
        fact.session = format!("D{new}");
        id(&mut fact.key);
        fact.origins.iter_mut().for_each(id);
    }
}

/// The 1-based position of a turn id `D<n>:<t>`.
fn turn_position(dia_id: &str) -> Option<usize> {
    dia_id.rsplit(':').next()?.parse().ok()
}

impl StoredConversation {
    /// The conversations `parts` as one, named `id`: their sessions in time order, numbered
    /// anew from 1 (every id in their outputs and facts follows), with where each came from.
    pub fn merge(id: &str, parts: Vec<StoredConversation>) -> (Self, Vec<SessionOrigin>) {
        let mut info = parts.first().map(|part| part.info.clone()).unwrap_or_else(|| {
            super::ConversationInfo {
                id: id.to_string(),
                embedder: String::new(),
                created_at: String::new(),
                user: None,
                agent: None,
                messages: 0,
                sessions: 0,
                built_sessions: 0,
                first_message: None,
                last_message: None,
            }
        });
        info.id = id.to_string();
        info.messages = parts.iter().map(|part| part.info.messages).sum();
        info.sessions = parts.iter().map(|part| part.info.sessions).sum();
        info.built_sessions = parts.iter().map(|part| part.info.built_sessions).sum();
        info.first_message = parts.iter().filter_map(|part| part.info.first_message.clone()).min();
        info.last_message = parts.iter().filter_map(|part| part.info.last_message.clone()).max();
        let revision = parts.iter().map(|part| part.revision).max().unwrap_or(0);
        let mut sessions: Vec<(String, StoredSession)> = parts
            .into_iter()
            .flat_map(|part| {
                let conversation = part.info.id;
                part.sessions.into_iter().map(move |session| (conversation.clone(), session))
            })
            .collect();
        let start = |session: &StoredSession| {
            session.messages.first().and_then(|message| message.sort_time.clone())
        };
        sessions.sort_by(|(a_id, a), (b_id, b)| {
            (start(a).is_none(), start(a), a_id, a.number).cmp(&(
                start(b).is_none(),
                start(b),
                b_id,
                b.number,
            ))
        });
        let mut origins = Vec::with_capacity(sessions.len());
        let mut merged = Vec::with_capacity(sessions.len());
        for (number, (conversation, mut session)) in (1u32..).zip(sessions) {
            origins.push(SessionOrigin { number, conversation, original: session.number });
            renumber_session(&mut session, number);
            merged.push(session);
        }
        (Self { info, sessions: merged, revision, as_of: None }, origins)
    }

    /// The conversation as known at `at` (RFC 3339 UTC): each session keeps its messages up
    /// to the first one sent after `at` (untimed messages count as known), and its outputs keep
    /// only what was drawn from those; sessions left empty go. Facts known after `at` go, and
    /// facts replaced after `at` are current again.
    pub fn as_of(mut self, at: &str) -> Self {
        let mut sessions = Vec::with_capacity(self.sessions.len());
        for mut session in std::mem::take(&mut self.sessions) {
            let known = session
                .messages
                .iter()
                .position(|message| message.sort_time.as_deref().is_some_and(|time| time > at))
                .unwrap_or(session.messages.len());
            if known == 0 {
                continue;
            }
            if known < session.messages.len() {
                session.messages.truncate(known);
                cut_outputs(&mut session, known);
            }
            session.facts =
                session.facts.into_iter().filter_map(|fact| fact_as_of(fact, at)).collect();
            sessions.push(session);
        }
        self.sessions = sessions;
        self.as_of = Some(at.to_string());
        self
    }
}

/// The fact as known at `at`: gone if not known yet, current if replaced only later.
fn fact_as_of(mut fact: StoredFact, at: &str) -> Option<StoredFact> {
    if fact.valid_from.as_deref().is_some_and(|from| from > at) {
        return None;
    }
    if fact.valid_to.as_deref().is_some_and(|to| to > at) {
        fact.valid_to = None;
        fact.superseded_by = None;
    }
    Some(fact)
}

/// Keeps of a session's outputs what was drawn from its first `known` turns.
fn cut_outputs(session: &mut StoredSession, known: usize) {
    let within = |dia_id: &str| turn_position(dia_id).is_some_and(|position| position <= known);
    if let Some(outputs) = &mut session.outputs {
        let rewrite = &mut outputs.rewrite;
        rewrite.sentences.retain(|sentence| within(&sentence.origin));
        rewrite.personal_facts.retain(|fact| fact.origins.iter().all(|origin| within(origin)));
        let topics: Vec<String> =
            rewrite.sentences.iter().flat_map(|sentence| sentence.topic_ids.clone()).collect();
        rewrite.topics.retain(|topic| topics.contains(&topic.id));
        let sentences: Vec<String> =
            rewrite.sentences.iter().map(|sentence| sentence.id.clone()).collect();
        let keywords = &mut outputs.keywords.keywords;
        keywords.sentences.retain(|sentence| sentences.contains(&sentence.sentence_id));
        outputs.sentence_vectors.retain(|(id, _)| sentences.contains(id));
        outputs.topic_vectors.retain(|(id, _)| topics.contains(id));
        outputs.units.turns.truncate(known);
    }
    session.facts.retain(|fact| fact.origins.iter().all(|origin| within(origin)));
}

#[cfg(test)]
mod tests {
    use super::{renumber_id, turn_position};

    #[test]
    fn ids_follow_their_session_number() {
        assert_eq!(renumber_id("D3:5-1", 3, 7), "D7:5-1");
        assert_eq!(renumber_id("D3:t1", 3, 1), "D1:t1");
        assert_eq!(renumber_id("D31:5", 3, 7), "D31:5");
        assert_eq!(turn_position("D4:12"), Some(12));
    }
}
