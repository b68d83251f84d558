//! One control-plane component as an operating-system process: spawned with
//! its output in a log file, checked for an early exit, stopped gracefully.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::Error;

/// How a component's lifetime is tied to ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tether {
    /// The component exits when this process dies, however it dies (the Go
    /// wrappers poll their parent PID; see `tests/controlplane/lifeline`).
    Lifeline,
    /// The component runs in its own process group and outlives us, for
    /// `kiln controlplane up --detach`.
    Detached,
}

/// A running component.
#[derive(Debug)]
pub struct Component {
    name: &'static str,
    child: Child,
    log: PathBuf,
    bin: PathBuf,
    args: Vec<String>,
    tether: Tether,
}

impl Component {
    /// Starts `bin` with `args`, sending stdout and stderr to `log`.
    pub fn spawn(
        name: &'static str,
        bin: &Path,
        args: &[String],
        log: PathBuf,
        tether: Tether,
    ) -> Result<Self, Error> {
        let child = launch(bin, args, &log, tether, false)?;
        Ok(Self {
            name,
            child,
            log,
            bin: bin.to_path_buf(),
            args: args.to_vec(),
            tether,
        })
    }

    /// Starts the component again with the same flags (after [`stop`](Self::stop)),
    /// appending to its log.
    pub fn restart(&mut self) -> Result<(), Error> {
        self.stop(Duration::from_secs(10));
        self.child = launch(&self.bin, &self.args, &self.log, self.tether, true)?;
        Ok(())
    }

    /// The flags it runs with.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// The binary it runs.
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// The component's name (`etcd`, `kube-apiserver`, ...).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The operating-system process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails with the tail of the component's log if it has exited.
    pub fn ensure_running(&mut self) -> Result<(), Error> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(Error::Exited {
                component: self.name,
                status: status.to_string(),
                log: self.log.clone(),
                tail: log_tail(&self.log, 20),
            }),
            Err(source) => Err(Error::io("wait for", &self.log, source)),
        }
    }

    /// Sends SIGTERM, waits up to `grace`, then SIGKILLs.
    pub fn stop(&mut self, grace: Duration) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        terminate(self.child.id(), grace, || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        });
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Gives up ownership without stopping the process (detached mode).
    pub fn release(self) -> u32 {
        self.child.id()
    }
}

fn launch(
    bin: &Path,
    args: &[String],
    log: &Path,
    tether: Tether,
    append: bool,
) -> Result<Child, Error> {
    let out = File::options()
        .create(true)
        .append(append)
        .write(true)
        .truncate(!append)
        .open(log)
        .map_err(|source| Error::io("open log", log, source))?;
    let err = out
        .try_clone()
        .map_err(|source| Error::io("open log", log, source))?;
    let mut cmd = Command::new(bin);
    cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
    match tether {
        Tether::Lifeline => {
            cmd.env("KILN_LIFELINE", std::process::id().to_string());
        }
        Tether::Detached => {
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        }
    }
    cmd.spawn()
        .map_err(|source| Error::io("start", bin, source))
}

/// SIGTERM `pid`, then poll `exited` for up to `grace`, then SIGKILL.
pub fn terminate(pid: u32, grace: Duration, mut exited: impl FnMut() -> bool) {
    let Ok(raw) = i32::try_from(pid) else { return };
    let pid = Pid::from_raw(raw);
    if kill(pid, Signal::SIGTERM).is_err() {
        return;
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if exited() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = kill(pid, Signal::SIGKILL);
}

/// Whether a process with this id exists.
pub fn alive(pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(|raw| kill(Pid::from_raw(raw), None).is_ok())
}

/// The last `lines` lines of a log file, for error messages.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("x.log");
        std::fs::write(&log, "a\nb\nc\nd\n").unwrap();
        assert_eq!(log_tail(&log, 2), "c\nd");
        assert_eq!(log_tail(&log, 10), "a\nb\nc\nd");
        assert_eq!(log_tail(&dir.path().join("missing"), 3), "");
    }

    #[test]
    fn an_early_exit_is_reported_with_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let args = vec!["-c".to_string(), "echo boom; exit 3".to_string()];
        let mut c = Component::spawn(
            "sh",
            Path::new("/bin/sh"),
            &args,
            dir.path().join("sh.log"),
            Tether::Lifeline,
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let err = c.ensure_running().unwrap_err().to_string();
        assert!(err.contains("sh exited during start-up"), "{err}");
        assert!(err.contains("boom"), "{err}");
    }

    #[test]
    fn stop_terminates_and_reaps() {
        let dir = tempfile::tempdir().unwrap();
        let args = vec!["30".to_string()];
        let mut c = Component::spawn(
            "sleep",
            Path::new("/bin/sleep"),
            &args,
            dir.path().join("s.log"),
            Tether::Lifeline,
        )
        .unwrap();
        let pid = c.pid();
        assert!(alive(pid));
        c.stop(Duration::from_secs(5));
        assert!(!alive(pid));
    }
}
