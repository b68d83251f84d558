//! `kiln run`'s conversion webhook settings, from its flags.

use anyhow::bail;
use kiln::api::webhook::{Endpoint, Settings};

use crate::cli::{ConversionArgs, ConversionEndpointArgs};

/// The webhook's settings, when `--conversion-addr` turns it on.
pub fn settings(args: &ConversionArgs, own_namespace: String) -> anyhow::Result<Option<Settings>> {
    let Some(addr) = args.conversion_addr.0 else {
        return Ok(None);
    };
    let Some(endpoint) = endpoint(&args.endpoint)? else {
        bail!(
            "--conversion-addr needs --conversion-service NAMESPACE/NAME[:PORT] (in the cluster) or --conversion-url https://HOST:PORT (outside it): where the API server reaches the webhook"
        );
    };
    Ok(Some(Settings {
        addr,
        endpoint,
        namespace: args.conversion_namespace.clone().unwrap_or(own_namespace),
        secret: args.conversion_secret.clone(),
        validity: args.conversion_cert_validity,
    }))
}

/// Where the API server reaches the webhook, when given.
pub fn endpoint(args: &ConversionEndpointArgs) -> anyhow::Result<Option<Endpoint>> {
    Ok(match (&args.conversion_url, &args.conversion_service) {
        (Some(url), _) if url.starts_with("https://") => Some(Endpoint::Url(url.clone())),
        (Some(url), _) => bail!("--conversion-url `{url}` must start with https://"),
        (None, Some((namespace, name, port))) => Some(Endpoint::Service {
            namespace: namespace.clone(),
            name: name.clone(),
            port: *port,
        }),
        (None, None) => None,
    })
}
