//! The webhook's certificates: a CA of its own and a serving certificate it
//! signs for the hosts the API server calls, both valid for the same
//! period, renewed once two thirds of it have passed. The CA bundle the CRD
//! trusts holds the new CA and the one before it, so replicas still serving
//! the previous certificate are trusted until they switch.

use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

/// A CA and the serving certificate it signed, PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Material {
    /// The CAs the CRD trusts: the current one, then the one before it.
    pub bundle: String,
    /// The current CA.
    pub ca: String,
    /// The serving certificate.
    pub cert: String,
    /// Its private key.
    pub key: String,
    /// The hosts it is valid for.
    pub hosts: Vec<String>,
    /// Valid from (seconds since the epoch).
    pub not_before: u64,
    /// Valid until (seconds since the epoch).
    pub not_after: u64,
}

/// Seconds since the epoch.
pub fn epoch(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Material {
    /// Whether it should be replaced at `now`: two thirds of its lifetime
    /// gone, or made for other hosts.
    pub fn due(&self, now: u64, hosts: &[String]) -> bool {
        let life = self.not_after.saturating_sub(self.not_before);
        self.hosts != hosts || now >= self.not_before + life * 2 / 3
    }
}

fn time_at(secs: u64) -> Result<time::OffsetDateTime, rcgen::Error> {
    let secs = i64::try_from(secs).map_err(|_| rcgen::Error::CouldNotParseCertificate)?;
    time::OffsetDateTime::from_unix_timestamp(secs)
        .map_err(|_| rcgen::Error::CouldNotParseCertificate)
}

/// A new CA and serving certificate for `hosts`, valid `validity` from
/// `now` (backdated a minute for clocks a little behind); `previous` is the
/// CA before it, kept in the bundle.
pub fn issue(
    hosts: &[String],
    validity: Duration,
    now: SystemTime,
    previous: Option<&str>,
) -> Result<Material, rcgen::Error> {
    let not_before = epoch(now).saturating_sub(60);
    let not_after = epoch(now) + validity.as_secs();
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "kiln conversion webhook CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca_params.not_before = time_at(not_before)?;
    ca_params.not_after = time_at(not_after)?;
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(
        DnType::CommonName,
        hosts.first().map_or("kiln", String::as_str),
    );
    params.subject_alt_names = hosts
        .iter()
        .map(|h| match h.parse::<IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => Ok(SanType::DnsName(h.clone().try_into()?)),
        })
        .collect::<Result<_, rcgen::Error>>()?;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.not_before = time_at(not_before)?;
    params.not_after = time_at(not_after)?;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &ca)?;
    let ca_pem = ca.pem();
    let bundle = match previous {
        Some(p) if !p.trim().is_empty() => format!("{ca_pem}{p}"),
        _ => ca_pem.clone(),
    };
    Ok(Material {
        bundle,
        ca: ca_pem,
        cert: cert.pem(),
        key: key.serialize_pem(),
        hosts: hosts.to_vec(),
        not_before,
        not_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_is_due_after_two_thirds_of_the_lifetime_or_for_other_hosts() {
        let hosts = vec!["127.0.0.1".to_string()];
        let m = issue(
            &hosts,
            Duration::from_secs(3000),
            UNIX_EPOCH + Duration::from_secs(100_000),
            None,
        )
        .unwrap();
        assert_eq!((m.not_before, m.not_after), (99_940, 103_000));
        assert!(!m.due(100_000, &hosts));
        assert!(!m.due(101_900, &hosts));
        assert!(m.due(101_981, &hosts));
        assert!(m.due(100_000, &["kiln.kiln-system.svc".to_string()]));
    }

    #[test]
    fn the_bundle_keeps_the_previous_ca() {
        let hosts = vec!["kiln.kiln-system.svc".to_string(), "127.0.0.1".to_string()];
        let first = issue(&hosts, Duration::from_secs(60), SystemTime::now(), None).unwrap();
        assert_eq!(first.bundle, first.ca);
        let second = issue(
            &hosts,
            Duration::from_secs(60),
            SystemTime::now(),
            Some(&first.ca),
        )
        .unwrap();
        assert_ne!(second.ca, first.ca);
        assert_eq!(second.bundle, format!("{}{}", second.ca, first.ca));
        assert!(second.cert.starts_with("-----BEGIN CERTIFICATE-----"));
    }
}
