//! Certificates and keys for a local control plane: a cluster CA that signs the
//! API server's serving certificate and the admin's client certificate, and a
//! key pair for signing service-account tokens.
//!
//! Authentication is by client certificate, as in envtest: the admin is a user
//! in the `system:masters` group, which RBAC always allows.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

use super::Error;

/// The user name of the admin client certificate.
pub const ADMIN_USER: &str = "kiln-admin";
/// The group that makes the admin a cluster superuser.
pub const ADMIN_GROUP: &str = "system:masters";

/// The local node's bridge address (`kiln0`, see tests/controlplane/NODE.md).
pub const NODE_BRIDGE_IP: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 1);
/// The `kubernetes` Service's ClusterIP: the first address of
/// `--service-cluster-ip-range=10.0.0.0/24`.
pub const KUBERNETES_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

/// PEM material generated for one control plane, and where it was written.
#[derive(Debug, Clone)]
pub struct Pki {
    /// The CA certificate (PEM) that signed the serving and client certificates.
    pub ca_pem: String,
    /// The admin's client certificate (PEM).
    pub admin_cert_pem: String,
    /// The admin's private key (PEM).
    pub admin_key_pem: String,
    /// Files handed to kube-apiserver.
    pub files: PkiFiles,
}

/// Paths of the files kube-apiserver reads.
#[derive(Debug, Clone)]
pub struct PkiFiles {
    /// `--client-ca-file`
    pub ca_cert: PathBuf,
    /// `--tls-cert-file`
    pub serving_cert: PathBuf,
    /// `--tls-private-key-file`
    pub serving_key: PathBuf,
    /// `--service-account-key-file`
    pub sa_public_key: PathBuf,
    /// `--service-account-signing-key-file`
    pub sa_private_key: PathBuf,
    /// The admin's client certificate, for `--kubelet-client-certificate`.
    pub admin_cert: PathBuf,
    /// The admin's private key, for `--kubelet-client-key`.
    pub admin_key: PathBuf,
}

impl Pki {
    /// Generates fresh keys and certificates and writes them under `dir`.
    pub fn generate(dir: &Path) -> Result<Self, Error> {
        std::fs::create_dir_all(dir).map_err(|source| Error::io("create pki dir", dir, source))?;

        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "kiln-local-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

        let mut serving = CertificateParams::new(Vec::<String>::new())?;
        serving
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        serving.subject_alt_names = vec![
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            // The local node's bridge and the `kubernetes` Service address, so
            // pods reach the API server with the CA of `kube-root-ca.crt`
            // (tests/controlplane/NODE.md); harmless without a node.
            SanType::IpAddress(IpAddr::V4(NODE_BRIDGE_IP)),
            SanType::IpAddress(IpAddr::V4(KUBERNETES_SERVICE_IP)),
            SanType::DnsName("localhost".try_into()?),
            SanType::DnsName("kubernetes".try_into()?),
            SanType::DnsName("kubernetes.default".try_into()?),
            SanType::DnsName("kubernetes.default.svc".try_into()?),
        ];
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_key = KeyPair::generate()?;
        let serving_cert = serving.signed_by(&serving_key, &ca)?;

        let mut admin = CertificateParams::new(Vec::<String>::new())?;
        admin
            .distinguished_name
            .push(DnType::CommonName, ADMIN_USER);
        admin
            .distinguished_name
            .push(DnType::OrganizationName, ADMIN_GROUP);
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let admin_key = KeyPair::generate()?;
        let admin_cert = admin.signed_by(&admin_key, &ca)?;

        let sa_key = KeyPair::generate()?;

        let files = PkiFiles {
            ca_cert: dir.join("ca.crt"),
            serving_cert: dir.join("apiserver.crt"),
            serving_key: dir.join("apiserver.key"),
            sa_public_key: dir.join("sa.pub"),
            sa_private_key: dir.join("sa.key"),
            admin_cert: dir.join("admin.crt"),
            admin_key: dir.join("admin.key"),
        };
        write_secret(&files.ca_cert, &ca.pem())?;
        write_secret(&files.serving_cert, &serving_cert.pem())?;
        write_secret(&files.serving_key, &serving_key.serialize_pem())?;
        write_secret(&files.sa_public_key, &sa_key.public_key_pem())?;
        write_secret(&files.sa_private_key, &sa_key.serialize_pem())?;
        write_secret(&files.admin_cert, &admin_cert.pem())?;
        write_secret(&files.admin_key, &admin_key.serialize_pem())?;

        Ok(Self {
            ca_pem: ca.pem(),
            admin_cert_pem: admin_cert.pem(),
            admin_key_pem: admin_key.serialize_pem(),
            files,
        })
    }
}

/// Writes a file readable by its owner only: these are private keys.
fn write_secret(path: &Path, contents: &str) -> Result<(), Error> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(contents.as_bytes()))
        .map_err(|source| Error::io("write", path, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_file_the_api_server_reads_with_private_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::generate(dir.path()).unwrap();
        let f = &pki.files;
        for path in [
            &f.ca_cert,
            &f.serving_cert,
            &f.serving_key,
            &f.sa_public_key,
            &f.sa_private_key,
            &f.admin_cert,
            &f.admin_key,
        ] {
            let meta = std::fs::metadata(path).unwrap();
            assert_eq!(
                meta.permissions().mode() & 0o777,
                0o600,
                "{}",
                path.display()
            );
        }
        assert!(
            std::fs::read_to_string(&f.sa_public_key)
                .unwrap()
                .contains("BEGIN PUBLIC KEY")
        );
        assert!(
            pki.admin_cert_pem
                .starts_with("-----BEGIN CERTIFICATE-----")
        );
        assert!(pki.admin_key_pem.contains("PRIVATE KEY"));
    }

    #[test]
    fn the_serving_certificate_names_the_node_bridge_and_the_service_address() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::generate(dir.path()).unwrap();
        let pem = std::fs::read_to_string(&pki.files.serving_cert).unwrap();
        let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64).unwrap();
        // A SAN iPAddress is context tag [7] (0x87), length 4, the octets.
        for ip in [Ipv4Addr::LOCALHOST, NODE_BRIDGE_IP, KUBERNETES_SERVICE_IP] {
            let mut san = vec![0x87, 4];
            san.extend(ip.octets());
            assert!(
                der.windows(san.len()).any(|w| w == san.as_slice()),
                "{ip} missing from the serving certificate"
            );
        }
        // A dNSName is context tag [2] (0x82), then the length and the name.
        let name = b"kubernetes.default";
        let mut san = vec![0x82, 18];
        san.extend(name);
        assert!(der.windows(san.len()).any(|w| w == san.as_slice()));
    }
}
