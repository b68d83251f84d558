//! Where the control-plane binaries come from: built from Go modules by
//! `tests/controlplane/build.sh` into a cache outside the repository.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::Error;

const CONTROL_PLANE: &[&str] = &["etcd", "kube-apiserver", "kube-controller-manager"];
const NODE: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
];

/// The binaries a control plane runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// The directory that holds them.
    pub dir: PathBuf,
}

impl Binaries {
    /// The directory of the Go wrapper modules in this checkout.
    pub fn default_source() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/controlplane")
    }

    /// Uses `KILN_CONTROLPLANE_BIN_DIR` when set; otherwise runs the build
    /// script in `source` (a no-op when the cache already holds this version).
    pub fn locate(source: &Path) -> Result<Self, Error> {
        Self::locate_with(source, &[], CONTROL_PLANE)
    }

    /// [`locate`](Self::locate) with the node's binaries too (kubelet,
    /// kube-proxy, kube-scheduler: `build.sh --node`).
    pub fn locate_node(source: &Path) -> Result<Self, Error> {
        Self::locate_with(source, &["--node"], NODE)
    }

    fn locate_with(source: &Path, flags: &[&str], needed: &[&str]) -> Result<Self, Error> {
        if let Some(dir) = std::env::var_os("KILN_CONTROLPLANE_BIN_DIR") {
            return Self::at(PathBuf::from(dir), needed);
        }
        let script = source.join("build.sh");
        if !script.is_file() {
            return Err(Error::NoSources { script });
        }
        let output = Command::new("bash")
            .arg(&script)
            .args(flags)
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(|source| Error::io("run", &script, source))?;
        if !output.status.success() {
            return Err(Error::Build {
                script,
                status: output.status.to_string(),
            });
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let dir = stdout.lines().last().unwrap_or_default().trim();
        Self::at(PathBuf::from(dir), needed)
    }

    fn at(dir: PathBuf, needed: &[&str]) -> Result<Self, Error> {
        let this = Self { dir };
        for bin in needed {
            let path = this.dir.join(bin);
            if !path.is_file() {
                return Err(Error::MissingBinary { path });
            }
        }
        Ok(this)
    }

    /// The path of one binary.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}
