//! The two file-system helpers every stage shares: turning a user- or model-supplied name into a
//! safe file-name component, and replacing a file atomically.
//!
//! Both exist once, here; nothing else in the crate renames temporary files or filters names.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// A file-name-safe version of a model, embedder, sample or tag name: surrounding whitespace is
/// trimmed and anything but ASCII letters, digits, `.`, `-` and `_` becomes `replacement`
/// (`openai/gpt-4o` → `openai_gpt-4o` with `_`). Callers keep their historical replacement so
/// that existing cache and result paths stay where they were.
pub fn safe_name(name: &str, replacement: char) -> String {
    name.trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { replacement }
        })
        .collect()
}

/// Replaces `path` with `bytes` atomically: the parent directory is created if needed, the bytes
/// go to a temporary file in the same directory, are flushed to disk, and the file is renamed
/// over the target. A crash leaves either the old file or the new one, never a torn one. The
/// file is readable by others (mode 0644 on Unix), as a plain `File::create` would make it.
pub fn write_atomic(path: &Path, bytes: impl AsRef<[u8]>) -> anyhow::Result<()> {
    write_atomic_with(path, |file| Ok(file.write_all(bytes.as_ref())?))
}

/// [`write_atomic`] for content produced by `write` into a buffered writer, so a large file
/// (a serialised index) never exists whole in memory.
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut dyn std::io::Write) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut builder = tempfile::Builder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        builder.permissions(std::fs::Permissions::from_mode(0o644));
    }
    let mut temp = builder
        .tempfile_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    let written = {
        let mut writer = std::io::BufWriter::new(temp.as_file_mut());
        write(&mut writer).and_then(|()| Ok(writer.flush()?))
    };
    written.with_context(|| format!("writing {}", temp.path().display()))?;
    temp.as_file().sync_all().with_context(|| format!("flushing {}", temp.path().display()))?;
    temp.persist(path)
        .map_err(|error| error.error)
        .with_context(|| format!("replacing {}", path.display()))?;
    Ok(())
}

/// [`write_atomic`] on the blocking pool, so a large file does not stall the async workers; if
/// the caller's future is dropped, the write still completes or leaves the old file untouched.
pub async fn write_atomic_async(path: PathBuf, bytes: Vec<u8>) -> anyhow::Result<()> {
    tokio::task::spawn_blocking(move || write_atomic(&path, &bytes))
        .await
        .context("file writer task failed")?
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn safe_name_keeps_plain_names_and_replaces_the_rest() {
        assert_eq!(safe_name("gemini-2.5_flash.v1", '_'), "gemini-2.5_flash.v1");
        assert_eq!(safe_name("openai/gpt-4o", '_'), "openai_gpt-4o");
        assert_eq!(safe_name("openai/gpt-4o", '-'), "openai-gpt-4o");
        assert_eq!(safe_name("  conv 26:q1  ", '_'), "conv_26_q1");
        assert_eq!(safe_name("../../x", '_'), ".._.._x");
        assert_eq!(safe_name("café", '_'), "caf_");
        assert_eq!(safe_name("", '_'), "");
    }

    #[test]
    fn write_atomic_creates_parents_and_replaces_whole_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/file.txt");
        write_atomic(&path, b"first version, longer").unwrap();
        write_atomic(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o644);
        }
    }

    #[test]
    fn a_streamed_write_that_fails_leaves_the_old_file_and_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.json");
        write_atomic_with(&path, |file| Ok(serde_json::to_writer(file, &vec![1.5f32; 3])?))
            .unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[1.5,1.5,1.5]");
        let failed = write_atomic_with(&path, |file| {
            file.write_all(b"[2.0,")?;
            anyhow::bail!("serialising failed halfway")
        });
        assert!(failed.is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[1.5,1.5,1.5]");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[tokio::test]
    async fn write_atomic_async_writes_on_the_blocking_pool() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.bin");
        write_atomic_async(path.clone(), vec![1, 2, 3]).await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), vec![1, 2, 3]);
    }
}
