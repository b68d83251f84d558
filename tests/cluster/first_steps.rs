//! What a newcomer runs first, run as written: every command block of the
//! README's quick start and every shell command `kiln demo` prints, on a
//! control plane of this test's own (both run every shipped rule across the
//! cluster, which would reach into the other tests' namespaces), with the
//! `kubectl` the control-plane build made.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use kiln::controlplane::{Binaries, ControlPlane, Options};

use crate::support::{self, PATIENCE, eventually};

/// The quick start's first lines build kiln from a fresh clone; the test
/// stands in for them by putting the kiln it was built with on `PATH`.
const BUILD: [&str; 3] = [
    "git clone ",
    "cargo build --release --locked",
    "export PATH=\"$PWD/target/release:$PATH\"",
];

/// The metrics address the quick start's `kiln run` binds: another process
/// on this machine may hold it, so the test binds a free port instead.
const QUICK_START_METRICS: &str = "127.0.0.1:8080";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_quick_start_command_and_every_command_the_demo_prints_succeeds() {
    let bins = Binaries::locate(&Binaries::default_source()).unwrap();
    let cp = ControlPlane::start(Options::new(bins.clone()))
        .await
        .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let shell = Shell {
        path: search_path(&bins),
        kubeconfig: cp.kubeconfig_path().to_path_buf(),
        scratch: scratch.path().to_path_buf(),
    };

    let blocks = quick_start_blocks(
        &std::fs::read_to_string(support::repo_root().join("README.md")).unwrap(),
    );
    assert_eq!(
        blocks.len(),
        2,
        "the quick start's command blocks: {blocks:#?}"
    );
    let (build, offline) = blocks[0].split_at(BUILD.len());
    for (line, want) in build.iter().zip(BUILD) {
        assert!(
            line.starts_with(want),
            "the quick start builds kiln otherwise now: {line}"
        );
    }
    for command in offline {
        shell.run(command);
    }
    shell.run_script(&on_a_cluster(&blocks[1]));

    let printed = demo_hints(&cp, &shell).await;
    let (export, commands) = printed.split_first().expect("the demo prints commands");
    assert!(export.starts_with("export KUBECONFIG="), "{export}");
    assert!(
        commands
            .iter()
            .any(|c| c.ends_with("describe webapps.demo.kiln.dev shop")),
        "{commands:#?}"
    );
    for command in commands {
        shell.run(&format!("{export}\n{command}"));
    }
}

/// The quick start's ```sh blocks, each as its commands (a line ending in
/// `\` joined with the next; blank lines left out).
fn quick_start_blocks(readme: &str) -> Vec<Vec<String>> {
    let start = readme
        .find("\n## Quick start")
        .expect("a quick start section");
    let section = &readme[start + 1..];
    let section = &section[..section[1..].find("\n## ").map_or(section.len(), |e| e + 1)];
    let mut blocks = Vec::new();
    for (i, part) in section.split("```").enumerate() {
        let Some(body) = part.strip_prefix("sh\n").filter(|_| i % 2 == 1) else {
            continue;
        };
        let mut commands: Vec<String> = Vec::new();
        let mut open = false;
        for line in body.lines().filter(|l| !l.trim().is_empty()) {
            match commands.last_mut() {
                Some(last) if open => last.push_str(&format!("\n{line}")),
                _ => commands.push(line.to_string()),
            }
            open = line.ends_with('\\');
        }
        blocks.push(commands);
    }
    blocks
}

/// The cluster block as one script (its `kiln run … &` runs beside the
/// commands after it): each command said before it runs, the first that
/// fails ends it, `kiln diff`'s exit 1 ("something would change") counts as
/// done, and `kiln run` must still be running at the end.
fn on_a_cluster(block: &[String]) -> String {
    let port = support::free_port();
    let mut script = String::from("set -eu\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n");
    for command in block {
        let command = command.replace(QUICK_START_METRICS, &format!("127.0.0.1:{port}"));
        let said = command.replace('\'', "'\\''");
        script.push_str(&format!("echo '+ {said}' >&2\n"));
        if command.starts_with("kiln diff") {
            let bare = command.split(" #").next().unwrap_or_default();
            script.push_str(&format!("{bare} || [ $? -eq 1 ]\n"));
        } else {
            script.push_str(&format!("{command}\n"));
        }
    }
    assert!(
        script.contains(" &\n"),
        "the quick start runs kiln in the background"
    );
    script.push_str("kill -0 \"$!\" # kiln run still runs\n");
    script
}

/// Runs `kiln demo` on the control plane until it says what to look with,
/// stops it with SIGTERM (it exits 0, having printed every hint), and
/// returns the commands it printed after "Look with:".
async fn demo_hints(cp: &ControlPlane, shell: &Shell) -> Vec<String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["demo", "--dir"])
        .arg(shell.scratch.join("demo"))
        .current_dir(support::repo_root())
        .env("KUBECONFIG", &shell.kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let out = child.stdout.take().unwrap();
    let reading = {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                lines.lock().unwrap().push(line.unwrap_or_default());
            }
        })
    };
    let mut demo = Demo(child);
    eventually("the demo's hints", PATIENCE, || {
        let said = lines.lock().unwrap().clone();
        assert!(
            !said.iter().any(|l| l.contains("does not answer")),
            "the demo did not use the test's cluster: {said:#?}"
        );
        if let Some(status) = demo.0.try_wait().unwrap() {
            panic!("kiln demo exited ({status}): {said:#?}");
        }
        async move { said.iter().any(|l| l.ends_with("Look with:")).then_some(()) }
    })
    .await;
    // What the hints look at is there (kiln's child of the WebApp shop).
    let client = cp.client().await.unwrap();
    eventually("the Deployment shop", PATIENCE, || async {
        support::get(&client, "apps/v1", "Deployment", "default", "shop").await
    })
    .await;
    support::terminate(&demo.0);
    let status = support::exited(&mut demo.0, PATIENCE).await;
    assert!(status.success(), "kiln demo on SIGTERM: {status}");
    reading.join().unwrap();
    let said = lines.lock().unwrap().clone();
    let look = said
        .iter()
        .position(|l| l.ends_with("Look with:"))
        .unwrap_or_else(|| panic!("no hints: {said:#?}"));
    said[look + 1..]
        .iter()
        .filter_map(|l| l.strip_prefix("  "))
        .filter(|l| !l.starts_with(' ') && !l.starts_with("- "))
        .map(str::to_string)
        .collect()
}

/// `kiln demo`, killed when dropped (a failing test leaves none running).
struct Demo(std::process::Child);

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A shell as a newcomer's: kiln and the control plane's `kubectl` on
/// `PATH`, the test's cluster in `$KUBECONFIG`, in the repository. (`HOME`
/// stays: the control plane's binaries are cached under it.)
struct Shell {
    path: String,
    kubeconfig: PathBuf,
    /// Where the demo keeps its files.
    scratch: PathBuf,
}

impl Shell {
    /// Runs one command; it must succeed.
    fn run(&self, command: &str) {
        self.run_script(command);
    }

    fn run_script(&self, script: &str) {
        let out = Command::new("bash")
            .args(["-c", script])
            .current_dir(support::repo_root())
            .env("PATH", &self.path)
            .env("KUBECONFIG", &self.kubeconfig)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "`{script}` failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `PATH` with the tested kiln and the built `kubectl` first.
fn search_path(bins: &Binaries) -> String {
    let kiln = Path::new(env!("CARGO_BIN_EXE_kiln")).parent().unwrap();
    let kubectl = bins.path("kubectl");
    format!(
        "{}:{}:{}",
        kiln.display(),
        kubectl.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}
