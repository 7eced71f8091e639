//! The corrections in force, and how one finds its fact again after a rebuild: by source
//! message and aspect ([`Identity`]).

/// A correction in force: the latest correction of one fact identity that is not undone,
/// when it has not lapsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::store) struct Correction {
    /// Its edit.
    pub(in crate::store) edit: i64,
    /// The conversation.
    pub(in crate::store) conversation: String,
    /// The value it sets.
    pub(in crate::store) value: String,
    /// The identity of the fact: its source message and aspect (absent in corrections made
    /// before facts kept their source: then session, key and extracted value).
    pub(in crate::store) source: Option<String>,
    pub(in crate::store) aspect: Option<String>,
    pub(in crate::store) session: u32,
    pub(in crate::store) key: String,
    pub(in crate::store) extracted: String,
    /// What the log says about the fact (kept in the lapse row).
    pub(in crate::store) fact: serde_json::Value,
}

impl Correction {
    /// The identity, as one comparable value.
    pub(in crate::store) fn identity(&self) -> Identity {
        match (&self.source, &self.aspect) {
            (Some(source), Some(aspect)) => {
                (Some(source.clone()), Some(aspect.trim().to_lowercase()), None)
            }
            _ => (None, None, Some((self.session, self.key.clone(), self.extracted.clone()))),
        }
    }

    /// Whether its fact was drawn from session `number`, whose messages are `messages`.
    pub(in crate::store) fn belongs_to(&self, number: u32, messages: &[&str]) -> bool {
        match &self.source {
            Some(source) => messages.contains(&source.as_str()),
            None => self.session == number,
        }
    }

    /// Whether a fact drawn from `source` about `aspect` (key and extracted value for a
    /// correction without a source) is the fact it corrects.
    pub(in crate::store) fn identifies(
        &self,
        source: Option<&str>,
        aspect: &str,
        key: &str,
        extracted: &str,
    ) -> bool {
        match (&self.source, &self.aspect) {
            (Some(mine), Some(my_aspect)) => {
                source == Some(mine.as_str())
                    && my_aspect.trim().to_lowercase() == aspect.trim().to_lowercase()
            }
            _ => self.key == key && self.extracted == extracted,
        }
    }
}

/// What identifies a corrected fact: its source message and aspect, or (a correction made
/// before facts kept their source) its session, key and extracted value.
pub(in crate::store) type Identity =
    (Option<String>, Option<String>, Option<(u32, String, String)>);
