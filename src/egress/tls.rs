//! The TLS settings of a request as a rustls configuration: the CA bundle
//! it names (else the system's CAs) and its client certificate.

use std::sync::{Arc, OnceLock};

use rustls::crypto::ring::default_provider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use super::error::Error;
use super::request::Tls;

/// The system's CAs, read once.
fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut roots = RootCertStore::empty();
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
            Arc::new(roots)
        })
        .clone()
}

/// A client configuration for `tls`, speaking HTTP/1.1 only.
pub fn client_config(tls: &Tls) -> Result<Arc<ClientConfig>, Error> {
    let roots = match &tls.ca_bundle {
        None => system_roots(),
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| Error::TlsSettings(format!("the CA bundle: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| Error::TlsSettings(format!("the CA bundle: {e}")))?;
            }
            if roots.is_empty() {
                return Err(Error::TlsSettings(
                    "the CA bundle holds no certificate".into(),
                ));
            }
            Arc::new(roots)
        }
    };
    let builder = ClientConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::TlsSettings(e.to_string()))?
        .with_root_certificates(roots);
    let mut config = match &tls.identity {
        None => builder.with_no_client_auth(),
        Some(identity) => {
            let chain = CertificateDer::pem_slice_iter(identity.cert.expose())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| Error::TlsSettings("the client certificate is not PEM".into()))?;
            let key = PrivateKeyDer::from_pem_slice(identity.key.expose()).map_err(|_| {
                Error::TlsSettings("the client key is not a PEM private key".into())
            })?;
            builder.with_client_auth_cert(chain, key).map_err(|_| {
                Error::TlsSettings("the client certificate and key do not fit".into())
            })?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
