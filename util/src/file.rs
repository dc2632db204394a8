//! Reading a file someone else named (a recording, a config, a token file): only a regular
//! file, and never more than a limit, whatever the file turns out to be.

use std::io::Read;
use std::path::Path;

/// Why a bounded read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// It could not be opened or read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// It is not a regular file (a FIFO would block, a device like `/dev/zero` never ends).
    #[error("not a regular file")]
    NotAFile,
    /// It holds more than the limit.
    #[error("more than the {0} bytes allowed")]
    TooLarge(u64),
}

/// Reads the regular file at `path` whole, refusing anything else (checked before it is
/// opened, so a FIFO is never waited on) and stopping after `max_bytes` (a file that grows
/// while it is read is refused too, not read on).
///
/// # Errors
/// [`ReadError`]: not a regular file, larger than `max_bytes`, or the read failed.
pub fn read_bounded(path: &Path, max_bytes: u64) -> Result<Vec<u8>, ReadError> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(ReadError::NotAFile);
    }
    if meta.len() > max_bytes {
        return Err(ReadError::TooLarge(max_bytes));
    }
    let file = std::fs::File::open(path)?;
    let mut data = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(max_bytes.saturating_add(1)).read_to_end(&mut data)?;
    if data.len() as u64 > max_bytes {
        return Err(ReadError::TooLarge(max_bytes));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_read_and_never_past_the_limit() {
        let dir = std::env::temp_dir().join(format!("volley-read-bounded-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a folder");
        let file = dir.join("f");
        std::fs::write(&file, b"0123456789").expect("written");
        assert_eq!(read_bounded(&file, 10).expect("read"), b"0123456789");
        assert!(matches!(read_bounded(&file, 9), Err(ReadError::TooLarge(9))));
        assert!(matches!(read_bounded(&dir, 1 << 20), Err(ReadError::NotAFile)));
        // A device that never ends, and a FIFO that would block: refused at once.
        assert!(matches!(read_bounded(Path::new("/dev/zero"), 1 << 20), Err(ReadError::NotAFile)));
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        if std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
            assert!(matches!(read_bounded(&fifo, 1 << 20), Err(ReadError::NotAFile)));
        }
        assert!(matches!(read_bounded(&dir.join("missing"), 10), Err(ReadError::Io(_))));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
