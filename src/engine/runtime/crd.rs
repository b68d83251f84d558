//! The status schema of a rule's primary kind, read from its
//! CustomResourceDefinition, and a watch of that one CRD that says when
//! its schema changed.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;

use super::shared::Shared;
use crate::engine::cache::kinds;
use crate::engine::decision::schema::{SchemaError, StatusSchema};
use crate::rules::Rule;

/// Why the primary's status schema did not let the rule start.
pub(crate) enum SchemaRead {
    /// The rule writes status the schema does not declare.
    Refused(SchemaError),
    /// The CRD could not be read (kiln may not, say): tried again, never
    /// guessed.
    Failed(kube::Error),
}

/// The status schema of the rule's primary kind, checked against the rule's
/// status fields and conditions. Only custom resources whose status kiln
/// writes have one to read (their CRD, read on every (re)discovery of the
/// kind); for anything else, and for a kind that is not a CRD (an
/// aggregated API), anything goes. A CRD that cannot be read (forbidden,
/// say) is not taken as open: the caller tries again.
pub(crate) async fn status_schema(
    rule: &Rule,
    client: &Client,
    primary: &kinds::Kind,
) -> Result<Schema, SchemaRead> {
    if !kinds::writes_status(primary) {
        if primary.gvk.is_custom() {
            tracing::warn!(rule = %rule.name, kind = %primary.gvk, "the primary's kind has no status subresource: kiln writes no status (no conditions, no fields) on its objects");
        }
        return Ok(Schema::open());
    }
    let name = format!("{}.{}", primary.ar.plural, primary.gvk.group);
    let crd = match crds(client).get(&name).await {
        Ok(crd) => serde_json::to_value(&crd).unwrap_or_default(),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            tracing::warn!(rule = %rule.name, crd = %name, "the primary kind has no CustomResourceDefinition (an aggregated API?); its status schema is not checked");
            return Ok(Schema::open());
        }
        Err(e) => return Err(SchemaRead::Failed(e)),
    };
    let version = &primary.gvk.version;
    let status = StatusSchema::from_crd(&crd, version).map_err(SchemaRead::Refused)?;
    status
        .check(
            &name,
            version,
            &rule.status_fields,
            !rule.conditions.is_empty(),
        )
        .map_err(SchemaRead::Refused)?;
    Ok(Schema {
        status,
        crd: Some((name, version.clone())),
        refused: None,
    })
}

fn crds(client: &Client) -> kube::Api<CustomResourceDefinition> {
    kube::Api::all(client.clone())
}

/// The primary's status schema, and the CRD (name, version) it was read from.
pub(crate) struct Schema {
    pub(crate) status: StatusSchema,
    pub(crate) crd: Option<(String, String)>,
    /// Why the rule is refused, if it is: it then only tears down the
    /// primaries being deleted, and checks the schema again every
    /// `kind_retry`.
    pub(crate) refused: Option<String>,
}

impl Schema {
    pub(crate) fn open() -> Self {
        Self {
            status: StatusSchema::open(),
            crd: None,
            refused: None,
        }
    }

    pub(crate) fn refused(why: String) -> Self {
        Self {
            refused: Some(why),
            ..Self::open()
        }
    }
}

/// Returns once the status schema of the CRD differs from `current` (the
/// CRD was edited in place), watching that one CRD; never without a CRD.
pub(crate) async fn schema_change(
    shared: &Shared,
    crd: Option<(String, String)>,
    current: StatusSchema,
) {
    let Some((name, version)) = crd else {
        return std::future::pending().await;
    };
    let mut crd = shared.crds.subscribe(&shared.client, &name);
    while let Some(json) = crd.next().await {
        if StatusSchema::from_crd(&json, &version).ok().as_ref() != Some(&current) {
            return;
        }
    }
    std::future::pending().await
}
