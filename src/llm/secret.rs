//! The API key newtype: [`Secret`] keeps the key out of every `Debug`/`Display` rendering and can
//! scrub it from text echoed back by a server (some providers quote the key in 401 bodies).
//!
//! Only the transport (`openai.rs`) ever calls [`Secret::expose`]; everything else handles the
//! wrapper, so logging a config or an error can never print the key.

use std::fmt;

/// The placeholder printed instead of a secret.
pub const REDACTED: &str = "***";

/// A secret string (an API key). `Debug` and `Display` print `***`; it is deliberately not
/// `Serialize`, so it cannot end up in a results or settings file by accident.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret value (surrounding whitespace, e.g. from a `.env` line, is trimmed).
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into().trim().to_owned())
    }

    /// The raw secret. Call only where it is put on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether no secret was given.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `text` with every occurrence of the secret replaced by `***`.
    pub fn scrub(&self, text: &str) -> String {
        if self.0.is_empty() { text.to_owned() } else { text.replace(&self.0, REDACTED) }
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self::new(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self::new(value)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_hide_the_value() {
        let secret = Secret::new("sk-very-secret");
        assert_eq!(format!("{secret:?}"), "***");
        assert_eq!(format!("{secret}"), "***");
        assert_eq!(secret.expose(), "sk-very-secret");
    }

    #[test]
    fn scrub_replaces_every_occurrence() {
        let secret = Secret::new(" sk-abc \n");
        assert_eq!(secret.scrub("key sk-abc is bad: sk-abc"), "key *** is bad: ***");
        assert_eq!(Secret::default().scrub("nothing"), "nothing");
    }
}
