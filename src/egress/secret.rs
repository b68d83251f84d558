//! Credentials a request carries, kept out of every message: their `Debug`
//! says `[redacted]`, they have no `Display`, and errors never quote them.

use std::fmt;

/// Bytes read from a Secret.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretBytes(Vec<u8>);

impl SecretBytes {
    /// Wraps bytes read from a Secret.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into())
    }

    /// The bytes, to put on the wire.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SecretBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(crate::redact::REDACTED)
    }
}

/// How a request proves who sends it. kiln's own ServiceAccount token is
/// never one of them: the client reads no token file and uses no kube
/// client.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Auth {
    /// Nothing.
    #[default]
    None,
    /// `Authorization: Bearer <token>`.
    Bearer(SecretBytes),
    /// `Authorization: Basic base64(<username>:<password>)`.
    Basic {
        /// The user name.
        username: SecretBytes,
        /// The password.
        password: SecretBytes,
    },
}

/// A client certificate and its key, PEM (mTLS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The certificate chain, PEM.
    pub cert: SecretBytes,
    /// The private key, PEM.
    pub key: SecretBytes,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_print() {
        let auth = Auth::Basic {
            username: SecretBytes::new("alice"),
            password: SecretBytes::new("hunter22"),
        };
        let shown = format!("{auth:?} {:?}", Auth::Bearer(SecretBytes::new("tok-123")));
        assert!(
            !shown.contains("alice") && !shown.contains("hunter22") && !shown.contains("tok-123"),
            "{shown}"
        );
    }
}
