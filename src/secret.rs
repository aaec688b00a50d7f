//! The one redaction point for secrets (the Hub token): every text that leaves the process —
//! the error printed by `main`, panic messages, tracing logs, progress lines, download.log
//! records — passes through [`redact`], which replaces each registered secret wherever it
//! appears, whatever a server or a library put around it.
//!
//! Secrets are registered once, process-wide: `main` registers `HF_TOKEN` /
//! `HUGGING_FACE_HUB_TOKEN` at start ([`install`]), and the Hub client registers the token it
//! actually uses (which may come from a token file) when it reads it.

use std::borrow::Cow;
use std::io::Write;
use std::sync::RwLock;

/// What a secret is replaced with.
pub const MASK: &str = "<redacted>";

/// Registered secret forms, longest first.
static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Register a secret value (empty values are ignored). Also registers the forms it takes
/// inside JSON strings and URLs when those differ from the raw value.
pub fn register(secret: &str) {
    if secret.is_empty() {
        return;
    }
    let mut forms = vec![secret.to_string()];
    if let Ok(j) = serde_json::to_string(secret) {
        forms.push(j[1..j.len() - 1].to_string());
    }
    forms.push(
        percent_encoding::utf8_percent_encode(secret, percent_encoding::NON_ALPHANUMERIC)
            .to_string(),
    );
    let mut g = SECRETS.write().unwrap_or_else(|e| e.into_inner());
    for f in forms {
        if !f.is_empty() && !g.contains(&f) {
            g.push(f);
        }
    }
    g.sort_by_key(|s| std::cmp::Reverse(s.len()));
}

/// Register the token variables of the environment.
pub fn register_from_env() {
    for k in ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"] {
        if let Ok(v) = std::env::var(k) {
            register(v.trim());
        }
    }
}

/// Whether `text` contains any registered secret.
pub fn contains_secret(text: &str) -> bool {
    let g = SECRETS.read().unwrap_or_else(|e| e.into_inner());
    g.iter().any(|s| text.contains(s.as_str()))
}

/// `text` with every registered secret replaced by [`MASK`].
pub fn redact(text: &str) -> Cow<'_, str> {
    let g = SECRETS.read().unwrap_or_else(|e| e.into_inner());
    if !g.iter().any(|s| text.contains(s.as_str())) {
        return Cow::Borrowed(text);
    }
    let mut out = text.to_string();
    for s in g.iter() {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), MASK);
        }
    }
    Cow::Owned(out)
}

/// Register the environment's token and make panics go through [`redact`] (a panic message
/// holding no secret is printed by the default hook, backtrace and all).
pub fn install() {
    register_from_env();
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if crate::util::panic_is_guarded(info.location()) {
            return;
        }
        let text = info.to_string();
        if contains_secret(&text) {
            let _ = writeln!(std::io::stderr(), "{}", redact(&text));
        } else {
            default(info);
        }
    }));
}

/// A tracing writer factory whose writers hold one event and write it, redacted, when
/// dropped (so a secret is never split across two writes).
pub struct Redacted<M>(pub M);

/// One buffered event of [`Redacted`].
pub struct RedactedWriter<W: Write> {
    buf: Vec<u8>,
    inner: W,
}

impl<W: Write> RedactedWriter<W> {
    pub fn new(inner: W) -> Self {
        RedactedWriter {
            buf: Vec::new(),
            inner,
        }
    }
}

impl<W: Write> Write for RedactedWriter<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<W: Write> Drop for RedactedWriter<W> {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.buf);
        let _ = self.inner.write_all(redact(&text).as_bytes());
        let _ = self.inner.flush();
    }
}

impl<'a, M> tracing_subscriber::fmt::MakeWriter<'a> for Redacted<M>
where
    M: tracing_subscriber::fmt::MakeWriter<'a>,
{
    type Writer = RedactedWriter<M::Writer>;
    fn make_writer(&'a self) -> Self::Writer {
        RedactedWriter::new(self.0.make_writer())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the registry is process-global.
    #[test]
    fn registered_secrets_are_removed_everywhere() {
        let tok = "hf_UnitTestSecret\"x/y";
        assert_eq!(redact("nothing here"), "nothing here");
        register(tok);
        register("");
        assert!(contains_secret(&format!("Bearer {tok}")));
        let text = format!("401: echo 'Authorization: Bearer {tok}' and {tok}");
        assert_eq!(
            redact(&text),
            "401: echo 'Authorization: Bearer <redacted>' and <redacted>"
        );
        // Inside a JSON string (escaped) and a URL (percent-encoded).
        let json =
            serde_json::to_string(&serde_json::json!({ "error": format!("x{tok}y") })).unwrap();
        assert!(
            !redact(&json).contains("UnitTestSecret"),
            "{}",
            redact(&json)
        );
        assert!(serde_json::from_str::<serde_json::Value>(&redact(&json)).is_ok());
        let url = format!(
            "http://h/?t={}",
            percent_encoding::utf8_percent_encode(tok, percent_encoding::NON_ALPHANUMERIC)
        );
        assert!(!redact(&url).contains("UnitTestSecret"));
        // The tracing writer: an event written in pieces comes out whole and redacted.
        let mut out = Vec::new();
        {
            let mut w = RedactedWriter::new(&mut out);
            w.write_all(b"retry 1: Bearer hf_UnitTest").unwrap();
            w.write_all(b"Secret\"x/y end\n").unwrap();
            w.flush().unwrap();
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "retry 1: Bearer <redacted> end\n"
        );
    }
}
