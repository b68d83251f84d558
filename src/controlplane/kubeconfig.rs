//! The kubeconfig a local control plane hands to its users: kiln, the tests,
//! kube-controller-manager and kubectl.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;

use super::pki::Pki;

/// The context name written into the kubeconfig.
pub const CONTEXT: &str = "kiln-local";

/// Renders a kubeconfig (YAML) for the admin user against `server`, with every
/// certificate embedded so the file stands alone.
pub fn render(server: &str, pki: &Pki) -> Result<String, serde_norway::Error> {
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": CONTEXT,
            "cluster": {
                "server": server,
                "certificate-authority-data": STANDARD.encode(&pki.ca_pem),
            },
        }],
        "users": [{
            "name": CONTEXT,
            "user": {
                "client-certificate-data": STANDARD.encode(&pki.admin_cert_pem),
                "client-key-data": STANDARD.encode(&pki.admin_key_pem),
            },
        }],
        "contexts": [{
            "name": CONTEXT,
            "context": { "cluster": CONTEXT, "user": CONTEXT, "namespace": "default" },
        }],
        "current-context": CONTEXT,
    });
    serde_norway::to_string(&doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_standalone_kubeconfig_kube_can_read() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::generate(dir.path()).unwrap();
        let yaml = render("https://127.0.0.1:6443", &pki).unwrap();
        let kc = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some(CONTEXT));
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        let ca = STANDARD
            .decode(cluster.certificate_authority_data.as_ref().unwrap())
            .unwrap();
        assert_eq!(String::from_utf8(ca).unwrap(), pki.ca_pem);
    }
}
