//! The credentials of a source, read from the Secret its rule names: a
//! bearer `token`, or `username` and `password`; `ca.crt`; `tls.crt` and
//! `tls.key`. Read when a request is sent (a rotated Secret is used at the
//! next request); never shown.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

use crate::egress::{Auth, ClientIdentity, SecretBytes, Tls};
use crate::rules::external::SecretRef;

/// Why the credentials cannot be read (names only, never values).
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The GET failed (not found, forbidden, unreachable).
    #[error("cannot read Secret {namespace}/{name}")]
    Read {
        /// The Secret's namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API's error.
        #[source]
        source: kube::Error,
    },
    /// A key is there without its partner.
    #[error("Secret {0}: {1}")]
    Incomplete(String, &'static str),
}

/// What a Secret gives a request.
pub async fn read(client: &Client, at: &SecretRef) -> Result<(Auth, Tls), CredentialsError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &at.namespace);
    let secret = api
        .get(&at.name)
        .await
        .map_err(|source| CredentialsError::Read {
            namespace: at.namespace.clone(),
            name: at.name.clone(),
            source,
        })?;
    let data = secret.data.unwrap_or_default();
    let get = |k: &str| data.get(k).map(|v| SecretBytes::new(v.0.clone()));
    let whose = format!("{}/{}", at.namespace, at.name);
    let auth = match (get("token"), get("username"), get("password")) {
        (Some(token), _, _) => Auth::Bearer(token),
        (None, Some(username), Some(password)) => Auth::Basic { username, password },
        (None, None, None) => Auth::None,
        _ => {
            return Err(CredentialsError::Incomplete(
                whose,
                "`username` and `password` go together",
            ));
        }
    };
    let identity = match (get("tls.crt"), get("tls.key")) {
        (Some(cert), Some(key)) => Some(ClientIdentity { cert, key }),
        (None, None) => None,
        _ => {
            return Err(CredentialsError::Incomplete(
                whose,
                "`tls.crt` and `tls.key` go together",
            ));
        }
    };
    let ca_bundle = get("ca.crt").map(|c| Arc::new(c.expose().to_vec()));
    Ok((
        auth,
        Tls {
            ca_bundle,
            identity,
        },
    ))
}
