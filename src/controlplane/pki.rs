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
            SanType::DnsName("localhost".try_into()?),
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
        };
        write_secret(&files.ca_cert, &ca.pem())?;
        write_secret(&files.serving_cert, &serving_cert.pem())?;
        write_secret(&files.serving_key, &serving_key.serialize_pem())?;
        write_secret(&files.sa_public_key, &sa_key.public_key_pem())?;
        write_secret(&files.sa_private_key, &sa_key.serialize_pem())?;

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
}
