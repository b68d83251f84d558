//! The cluster's API server addresses, which no external source may reach
//! unless its rule names them: the in-cluster Service address
//! (`KUBERNETES_SERVICE_HOST`) and the address kiln's own configuration
//! reaches the API server at, resolved.

use std::net::IpAddr;

/// The addresses found (none when nothing is configured).
pub async fn addresses() -> Vec<IpAddr> {
    let mut hosts = Vec::new();
    if let Ok(host) = std::env::var("KUBERNETES_SERVICE_HOST") {
        hosts.push((host, 443));
    }
    if let Ok(config) = kube::Config::infer().await
        && let Some(host) = config.cluster_url.host()
    {
        let port = config.cluster_url.port_u16().unwrap_or(443);
        hosts.push((host.trim_matches(['[', ']']).to_string(), port));
    }
    let mut out = Vec::new();
    for (host, port) in hosts {
        match host.parse::<IpAddr>() {
            Ok(ip) => out.push(ip),
            Err(_) => {
                if let Ok(found) = tokio::net::lookup_host((host.as_str(), port)).await {
                    out.extend(found.map(|a| a.ip()));
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}
