//! Noticing that rule files may have changed.
//!
//! A mounted ConfigMap is updated by the kubelet's atomic writer: it writes a
//! new hidden timestamped directory, points `..data_tmp` at it, renames that
//! over `..data` (the rule files are symlinks through `..data`) and removes
//! the old directory. Editors save by writing in place, by writing a temp
//! file and renaming it over, or by moving the original to a backup first.
//! Rather than interpret each pattern, any event in a watched directory
//! (hidden names included: `..data` is one) starts a debounce; once the
//! directory has been quiet for a moment the caller re-reads the files and
//! compares their contents with the last load. A periodic poll covers events
//! inotify cannot deliver, such as the directory itself being replaced, after
//! which the directory is watched anew.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

/// Watches the directories holding some rule paths.
pub struct DirWatcher {
    dirs: Vec<Watched>,
    tx: mpsc::UnboundedSender<()>,
    rx: mpsc::UnboundedReceiver<()>,
}

struct Watched {
    dir: PathBuf,
    inode: Option<u64>,
    watcher: Option<RecommendedWatcher>,
}

impl DirWatcher {
    /// Watches every directory in `paths`, and the directory of every file.
    pub fn new(paths: &[PathBuf]) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut dirs: Vec<PathBuf> = paths
            .iter()
            .map(|p| {
                if p.is_dir() {
                    p.clone()
                } else {
                    p.parent()
                        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
                }
            })
            .collect();
        dirs.sort();
        dirs.dedup();
        let mut this = Self {
            dirs: dirs
                .into_iter()
                .map(|dir| Watched {
                    dir,
                    inode: None,
                    watcher: None,
                })
                .collect(),
            tx,
            rx,
        };
        this.rewatch();
        this
    }

    /// (Re)creates the watch of every directory that is new or was replaced.
    fn rewatch(&mut self) {
        for w in &mut self.dirs {
            let inode = std::fs::metadata(&w.dir).ok().map(|m| m.ino());
            if inode == w.inode && w.watcher.is_some() {
                continue;
            }
            w.inode = inode;
            w.watcher = None;
            if inode.is_none() {
                continue;
            }
            let tx = self.tx.clone();
            let made = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                if event.is_ok_and(|e| !e.kind.is_access()) {
                    let _ = tx.send(());
                }
            });
            match made.and_then(|mut watcher| {
                watcher
                    .watch(&w.dir, RecursiveMode::NonRecursive)
                    .map(|()| watcher)
            }) {
                Ok(watcher) => w.watcher = Some(watcher),
                Err(error) => {
                    tracing::warn!(dir = %w.dir.display(), %error, "cannot watch the rules directory; polling only")
                }
            }
        }
    }

    /// Resolves when the files may have changed: once a burst of events has
    /// been quiet for `debounce`, or after `poll` without any event.
    pub async fn changed(&mut self, debounce: Duration, poll: Duration) {
        tokio::select! {
            got = self.rx.recv() => {
                if got.is_none() {
                    tokio::time::sleep(poll).await;
                    return;
                }
                // A burst of events is one change.
                while tokio::time::timeout(debounce, self.rx.recv()).await.is_ok_and(|e| e.is_some()) {}
            }
            () = tokio::time::sleep(poll) => {}
        }
        self.rewatch();
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::symlink;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::rules::load::read_sources;

    const DEBOUNCE: Duration = Duration::from_millis(200);
    /// Long enough that these tests see inotify, not the poll.
    const POLL: Duration = Duration::from_secs(30);

    /// The fingerprint the reloader compares, of the directory's files now.
    fn content(dir: &Path) -> u64 {
        let (sources, errors) = read_sources(&[dir.to_path_buf()]);
        crate::reload::loader::fingerprint(&crate::reload::Version {
            sources,
            read_errors: errors,
            ..Default::default()
        })
    }

    /// Counts what a reloader would load: distinct contents after each settle.
    fn count_reloads(
        dir: &Path,
        poll: Duration,
    ) -> (Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
        let count = Arc::new(AtomicUsize::new(0));
        let seen = count.clone();
        let dir = dir.to_path_buf();
        let mut watcher = DirWatcher::new(std::slice::from_ref(&dir));
        let task = tokio::spawn(async move {
            let mut last = content(&dir);
            loop {
                watcher.changed(DEBOUNCE, poll).await;
                let now = content(&dir);
                if now != last {
                    last = now;
                    seen.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        (count, task)
    }

    async fn settle() {
        tokio::time::sleep(DEBOUNCE * 4).await;
    }

    fn rule(name: &str, kind: &str) -> String {
        format!(
            "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: {name}}}\nspec:\n  for: {{apiVersion: v1, kind: {kind}}}\n"
        )
    }

    /// Writes a ConfigMap volume the way the kubelet's atomic writer does.
    fn kubelet_update(dir: &Path, generation: u32, files: &[(&str, String)]) {
        let ts = format!("..2026_11_21_15_00_{generation:02}.{}", 1000 + generation);
        let ts_dir = dir.join(&ts);
        fs::create_dir(&ts_dir).unwrap();
        for (name, text) in files {
            fs::write(ts_dir.join(name), text).unwrap();
        }
        let old = fs::read_link(dir.join("..data")).ok();
        symlink(&ts, dir.join("..data_tmp")).unwrap();
        fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
        for (name, _) in files {
            let link = dir.join(name);
            if fs::symlink_metadata(&link).is_err() {
                symlink(Path::new("..data").join(name), &link).unwrap();
            }
        }
        if let Some(old) = old {
            fs::remove_dir_all(dir.join(old)).unwrap();
        }
    }

    #[tokio::test]
    async fn one_reload_per_kubelet_configmap_update() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        kubelet_update(dir, 1, &[("a.yaml", rule("a", "ConfigMap"))]);
        let (count, task) = count_reloads(dir, POLL);
        settle().await;
        kubelet_update(dir, 2, &[("a.yaml", rule("a", "Secret"))]);
        settle().await;
        assert_eq!(count.load(Ordering::SeqCst), 1);
        // A second key appears in the ConfigMap.
        kubelet_update(
            dir,
            3,
            &[
                ("a.yaml", rule("a", "Secret")),
                ("b.yaml", rule("b", "Service")),
            ],
        );
        settle().await;
        assert_eq!(count.load(Ordering::SeqCst), 2);
        let (sources, _) = read_sources(&[dir.to_path_buf()]);
        let names: Vec<String> = sources
            .iter()
            .map(|s| s.file.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["a.yaml", "b.yaml"],
            "hidden ..data entries are not rule files"
        );
        // An update that changes nothing (the kubelet re-syncs) reloads nothing.
        kubelet_update(
            dir,
            4,
            &[
                ("a.yaml", rule("a", "Secret")),
                ("b.yaml", rule("b", "Service")),
            ],
        );
        settle().await;
        assert_eq!(count.load(Ordering::SeqCst), 2);
        task.abort();
    }

    #[tokio::test]
    async fn one_reload_per_editor_save() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let file = dir.join("r.yaml");
        fs::write(&file, rule("r", "ConfigMap")).unwrap();
        let (count, task) = count_reloads(dir, POLL);
        settle().await;

        // In place (VS Code, `>`): truncate and write, sometimes in two writes.
        fs::write(&file, "").unwrap();
        fs::write(&file, rule("r", "Secret")).unwrap();
        settle().await;
        assert_eq!(count.load(Ordering::SeqCst), 1, "in-place write");

        // vim: swap file, original renamed to a backup, new file written, backup removed.
        fs::write(dir.join(".r.yaml.swp"), "swap").unwrap();
        fs::rename(&file, dir.join("r.yaml~")).unwrap();
        fs::write(&file, rule("r", "Service")).unwrap();
        fs::remove_file(dir.join("r.yaml~")).unwrap();
        fs::remove_file(dir.join(".r.yaml.swp")).unwrap();
        settle().await;
        assert_eq!(count.load(Ordering::SeqCst), 2, "vim");

        // emacs / sed -i: write a temporary file, rename it over the original.
        fs::write(dir.join(".#r.yaml"), "lock").unwrap();
        fs::write(dir.join("sedAbC123"), rule("r", "Pod")).unwrap();
        fs::rename(dir.join("sedAbC123"), &file).unwrap();
        fs::remove_file(dir.join(".#r.yaml")).unwrap();
        settle().await;
        assert_eq!(count.load(Ordering::SeqCst), 3, "rename over");

        // Hidden and non-YAML files alone change nothing.
        fs::write(dir.join(".notes.yaml"), "x").unwrap();
        fs::write(dir.join("README.md"), "x").unwrap();
        settle().await;
        assert_eq!(count.load(Ordering::SeqCst), 3, "hidden / non-YAML");

        // Files added and removed.
        fs::write(dir.join("s.yaml"), rule("s", "Namespace")).unwrap();
        settle().await;
        fs::remove_file(dir.join("s.yaml")).unwrap();
        settle().await;
        assert_eq!(count.load(Ordering::SeqCst), 5, "add, then remove");
        task.abort();
    }

    #[tokio::test]
    async fn a_replaced_directory_is_found_by_the_poll_and_watched_again() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("rules");
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("r.yaml"), rule("r", "ConfigMap")).unwrap();
        let (count, task) = count_reloads(&dir, Duration::from_millis(500));
        settle().await;
        let next = tmp.path().join("rules.new");
        fs::create_dir(&next).unwrap();
        fs::write(next.join("r.yaml"), rule("r", "Secret")).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        fs::rename(&next, &dir).unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            count.load(Ordering::SeqCst),
            1,
            "the new directory's contents were loaded"
        );
        // And the new directory is watched: an edit there is seen.
        fs::write(dir.join("r.yaml"), rule("r", "Service")).unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(count.load(Ordering::SeqCst), 2);
        task.abort();
    }
}
