//! A memory built mechanically from a conversation, without any model.

use indexmap::IndexMap;

use super::words::cue_words;
use crate::dataset::Conversation;
use crate::ingest::SampleEmbeddings;
use crate::llm::scripted::{HASH_EMBEDDING_DIM, hashed_embedding};
use crate::memory;
use crate::memory::input::{
    PersonalFact, RewrittenSentence, SentenceKeywords, SessionKeywords, SessionRewrite, TopicInput,
};
use crate::snapshot::Snapshot;

/// A memory for `conversation` built without any model (see the module doc). With
/// `embed_questions`, question vectors are included; without, the pipeline embeds each question
/// through the embedder.
pub fn mechanical_memory(
    conversation: &Conversation,
    embed_questions: bool,
) -> Result<Snapshot, memory::Error> {
    let dims = HASH_EMBEDDING_DIM;
    let mut rewrites = Vec::new();
    let mut keywords = Vec::new();
    let mut embeddings =
        SampleEmbeddings { embedder: "hashed".into(), dims, ..SampleEmbeddings::default() };
    for session in &conversation.sessions {
        let session_id = session.id();
        let mut sentences = Vec::new();
        let mut facts = Vec::new();
        let mut items = Vec::new();
        let mut session_words = Vec::new();
        for (index, turn) in session.turns.iter().enumerate() {
            let text = turn.display();
            let words = cue_words(&text);
            let tag = tag_of(&words);
            let sentence_id = format!("{}-1", turn.dia_id);
            embeddings.sentences.insert(sentence_id.clone(), hashed_embedding(&text, dims));
            sentences.push(RewrittenSentence {
                id: sentence_id.clone(),
                origin: turn.dia_id.clone(),
                text: text.clone(),
                date: session.date,
                tag: tag.clone(),
                topic_ids: vec![format!("{session_id}:t1")],
            });
            facts.push(PersonalFact {
                id: format!("{session_id}:p{}", index + 1),
                person: turn.speaker.clone(),
                aspect: tag,
                fact: turn.text.clone(),
                origins: vec![turn.dia_id.clone()],
            });
            session_words.extend(words.iter().take(3).cloned());
            items.push(SentenceKeywords { sentence_id, keywords: words });
        }
        let topic_text = format!("Session {} talk: {}", session.index, session_words.join(", "));
        embeddings.topics.insert(format!("{session_id}:t1"), hashed_embedding(&topic_text, dims));
        rewrites.push(SessionRewrite {
            session: session_id.clone(),
            conversation_time: session.date,
            sentences,
            topics: vec![TopicInput { id: format!("{session_id}:t1"), text: topic_text }],
            personal_facts: facts,
        });
        keywords.push(SessionKeywords { session: session_id, sentences: items });
    }
    if embed_questions {
        let questions: IndexMap<String, Vec<f32>> = conversation
            .questions
            .iter()
            .map(|question| (question.id.clone(), hashed_embedding(&question.question, dims)))
            .collect();
        embeddings.questions = questions;
    }
    Snapshot::from_stage_outputs(conversation.clone(), &rewrites, &keywords, embeddings)
}

/// The longest content word, capitalised (first on ties); `Chat` when there is none.
fn tag_of(words: &[String]) -> String {
    let longest = words.iter().fold(None::<&String>, |best, word| match best {
        Some(best) if best.chars().count() >= word.chars().count() => Some(best),
        _ => Some(word),
    });
    match longest {
        Some(word) => {
            let mut chars = word.chars();
            chars
                .next()
                .map(|first| first.to_uppercase().chain(chars).collect())
                .unwrap_or_default()
        }
        None => "Chat".into(),
    }
}
