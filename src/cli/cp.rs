//! `agenthold cp`: one file between this machine and an agent, streamed both ways.

use std::path::{Path, PathBuf};

use anyhow::Context;
use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio_util::io::ReaderStream;

use super::client::ApiClient;

#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct CpArgs {
    /// Source: a local path or AGENT:PATH (write ./a:b for a local file whose name has a colon)
    pub src: String,
    /// Destination: AGENT:PATH or a local path; ending in / (or naming a local directory)
    /// keeps the source's file name
    pub dst: String,
}

/// One side of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Local(PathBuf),
    /// `path` is as typed: relative to /home/agent unless absolute; empty means the home.
    Remote {
        agent: String,
        path: String,
    },
}

impl Location {
    /// `AGENT:PATH` is remote; anything starting with `/` or `.`, anything with a `/` before
    /// its first colon, and drive-like `C:\…` / `C:/…` are local paths.
    pub fn parse(s: &str) -> Location {
        let local = || Location::Local(PathBuf::from(s));
        if s.starts_with('/') || s.starts_with('.') {
            return local();
        }
        let Some((agent, path)) = s.split_once(':') else {
            return local();
        };
        if agent.is_empty() || agent.contains(['/', '\\']) {
            return local();
        }
        if drive_like(s) {
            return local();
        }
        Location::Remote {
            agent: agent.to_string(),
            path: path.to_string(),
        }
    }
}

/// `C:\…` or `C:/…`: a drive letter, not a one-letter agent.
fn drive_like(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 3 && b[0].is_ascii_alphabetic() && b[1] == b':' && (b[2] == b'/' || b[2] == b'\\')
}

pub(super) async fn run(client: &ApiClient, args: CpArgs) -> anyhow::Result<i32> {
    match (Location::parse(&args.src), Location::parse(&args.dst)) {
        (Location::Local(src), Location::Remote { agent, path }) => {
            upload(client, &src, &agent, &path).await
        }
        (Location::Remote { agent, path }, Location::Local(_)) => {
            download(client, &agent, &path, &args.dst).await
        }
        (Location::Local(_), Location::Local(_)) => {
            let hint = if drive_like(&args.src) || drive_like(&args.dst) {
                " (X:/… reads as a drive letter; name a one-letter agent by its id)"
            } else {
                ""
            };
            anyhow::bail!("neither side names an agent: write one as AGENT:PATH{hint}")
        }
        (Location::Remote { .. }, Location::Remote { .. }) => {
            anyhow::bail!("copying between two agents is not supported; copy through this machine")
        }
    }
}

/// Where the file goes in the agent: a path naming a directory gets the source's name.
pub fn remote_target(path: &str, file_name: &str) -> String {
    if path.is_empty() || path.ends_with('/') {
        format!("{path}{file_name}")
    } else {
        path.to_string()
    }
}

/// The last component of a remote file path, refusing paths that name a directory.
pub fn remote_file_name(path: &str) -> anyhow::Result<&str> {
    let name = path.rsplit('/').next().unwrap_or_default();
    if name.is_empty() || name == "." || name == ".." {
        anyhow::bail!("{path:?} names a directory; cp copies one file, so name it")
    }
    Ok(name)
}

async fn upload(client: &ApiClient, src: &Path, agent: &str, path: &str) -> anyhow::Result<i32> {
    let file = tokio::fs::File::open(src)
        .await
        .with_context(|| format!("opening {}", src.display()))?;
    let meta = file.metadata().await?;
    if meta.is_dir() {
        anyhow::bail!("{} is a directory; cp copies one file", src.display());
    }
    let name = src
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{} has no file name usable in the agent", src.display()))?;
    let target = remote_target(path, name);
    let agent = client.find_agent(agent).await?;
    let body = reqwest::Body::wrap_stream(ReaderStream::new(file));
    client.fs_write(&agent.id, &target, body).await?;
    Ok(0)
}

async fn download(client: &ApiClient, agent: &str, path: &str, dst: &str) -> anyhow::Result<i32> {
    let name = remote_file_name(path)?;
    let dst_path = Path::new(dst);
    let into_dir = dst.ends_with('/')
        || tokio::fs::metadata(dst_path)
            .await
            .map(|m| m.is_dir())
            .unwrap_or(false);
    let dest = if into_dir {
        dst_path.join(name)
    } else {
        dst_path.to_path_buf()
    };
    let agent = client.find_agent(agent).await?;
    // Asked before any local file exists, so a missing remote file leaves nothing behind.
    let mut body = client.fs_read(&agent.id, path).await?;
    let mut part = PartFile::create_next_to(&dest).await?;
    let copy = async {
        while let Some(chunk) = body.next().await {
            part.file.write_all(&chunk?).await?;
        }
        part.file.flush().await?;
        part.file.sync_all().await?;
        anyhow::Ok(())
    };
    tokio::select! {
        done = copy => done.with_context(|| format!("downloading {path}"))?,
        // Without this the half-written part file would outlive an interrupted copy.
        _ = tokio::signal::ctrl_c() => return Ok(130),
    }
    part.persist(&dest).await?;
    Ok(0)
}

/// A file being downloaded, beside its destination so the final rename stays on one file
/// system; removed unless persisted, so the destination is whole or untouched.
struct PartFile {
    file: tokio::fs::File,
    path: PathBuf,
    persisted: bool,
}

impl PartFile {
    async fn create_next_to(dest: &Path) -> anyhow::Result<Self> {
        let dir = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let base = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "download".into());
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let path = dir.join(format!(".{base}.{}-{nonce}.part", std::process::id()));
        let file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .await
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(Self {
            file,
            path,
            persisted: false,
        })
    }

    async fn persist(mut self, dest: &Path) -> anyhow::Result<()> {
        tokio::fs::rename(&self.path, dest)
            .await
            .with_context(|| format!("moving the download to {}", dest.display()))?;
        self.persisted = true;
        Ok(())
    }
}

impl Drop for PartFile {
    fn drop(&mut self) {
        if !self.persisted {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(agent: &str, path: &str) -> Location {
        Location::Remote {
            agent: agent.into(),
            path: path.into(),
        }
    }

    fn local(p: &str) -> Location {
        Location::Local(PathBuf::from(p))
    }

    #[test]
    fn agent_paths() {
        assert_eq!(
            Location::parse("builder:src/main.rs"),
            remote("builder", "src/main.rs")
        );
        assert_eq!(
            Location::parse("k3f9x2m1q8ab:/etc/hosts"),
            remote("k3f9x2m1q8ab", "/etc/hosts")
        );
        assert_eq!(Location::parse("builder:"), remote("builder", ""));
        assert_eq!(Location::parse("builder:dir/"), remote("builder", "dir/"));
        // Only the first colon separates; the path may hold more.
        assert_eq!(
            Location::parse("b:logs/12:30:00.txt"),
            remote("b", "logs/12:30:00.txt")
        );
        assert_eq!(Location::parse("bo:/x/a:b"), remote("bo", "/x/a:b"));
        // A one-letter agent is still an agent unless a slash follows, like a drive would.
        assert_eq!(Location::parse("c:notes.txt"), remote("c", "notes.txt"));
    }

    #[test]
    fn local_paths() {
        for p in [
            "notes.txt",
            "/tmp/a:b",
            "./a:b",
            "../x:y",
            "dir/file:with:colons",
            "C:\\Users\\me\\f.txt",
            "C:/Users/me/f.txt",
            "d:\\",
            ":odd",
            "a\\b:c",
            "",
        ] {
            assert_eq!(Location::parse(p), local(p), "{p}");
        }
    }

    #[test]
    fn directory_targets_take_the_source_name() {
        assert_eq!(remote_target("", "f.txt"), "f.txt");
        assert_eq!(remote_target("src/", "f.txt"), "src/f.txt");
        assert_eq!(remote_target("/tmp/g.txt", "f.txt"), "/tmp/g.txt");
        assert_eq!(remote_file_name("a/b/c.txt").ok(), Some("c.txt"));
        assert_eq!(remote_file_name("c.txt").ok(), Some("c.txt"));
        for dir in ["", "a/", "/", "a/..", "."] {
            assert!(remote_file_name(dir).is_err(), "{dir}");
        }
    }

    #[tokio::test]
    async fn part_files_vanish_unless_persisted() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let dest = dir.path().join("out.bin");
        {
            let mut part = PartFile::create_next_to(&dest).await?;
            part.file.write_all(b"half").await?;
        }
        assert_eq!(std::fs::read_dir(dir.path())?.count(), 0);

        let mut part = PartFile::create_next_to(&dest).await?;
        part.file.write_all(b"whole").await?;
        part.file.flush().await?;
        part.persist(&dest).await?;
        assert_eq!(std::fs::read(&dest)?, b"whole");
        assert_eq!(std::fs::read_dir(dir.path())?.count(), 1);
        Ok(())
    }
}
