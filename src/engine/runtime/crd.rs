//! The status schema of a rule's primary kind, read from its
//! CustomResourceDefinition, and a watch of that one CRD that says when
//! its schema changed.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;

use super::shared::Shared;
use crate::engine::cache::kinds;
use crate::engine::decision::schema::{SchemaError, StatusSchema, StatusWrites, status_writes};
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
/// status fields and conditions. Whether kiln writes the kind's status at
/// all is decided from what the API server serves (its `/status`
/// subresource, and whether a CRD defines it: [`status_writes`]), never
/// from the group's name alone; only a CRD has a schema to read (read on
/// every (re)discovery of the kind), and a custom kind no CRD defines (an
/// aggregated API) is open. A CRD that cannot be read (forbidden, say) is
/// not taken as open: the caller tries again.
pub(crate) async fn status_schema(
    rule: &Rule,
    client: &Client,
    primary: &kinds::Kind,
) -> Result<Schema, SchemaRead> {
    let name = format!("{}.{}", primary.ar.plural, primary.gvk.group);
    let crd = if primary.gvk.is_custom() {
        match crds(client).get(&name).await {
            Ok(crd) => Some(serde_json::to_value(&crd).unwrap_or_default()),
            Err(kube::Error::Api(s)) if s.code == 404 => None,
            Err(e) => return Err(SchemaRead::Failed(e)),
        }
    } else {
        None
    };
    match status_writes(&primary.gvk, primary.has_status, crd.is_some()) {
        StatusWrites::Builtin => return Ok(Schema::none(StatusWrites::Builtin)),
        StatusWrites::NoSubresource => {
            tracing::warn!(rule = %rule.name, kind = %primary.gvk, "the primary's kind has no status subresource: kiln writes no status (no conditions, no fields) on its objects");
            return Ok(Schema::none(StatusWrites::NoSubresource));
        }
        StatusWrites::Yes => {}
    }
    let Some(crd) = crd else {
        tracing::warn!(rule = %rule.name, crd = %name, "the primary kind has no CustomResourceDefinition (an aggregated API?); its status schema is not checked");
        return Ok(Schema::open());
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
        writes: StatusWrites::Yes,
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
    /// Whether kiln writes the kind's status.
    pub(crate) writes: StatusWrites,
}

impl Schema {
    pub(crate) fn open() -> Self {
        Self {
            status: StatusSchema::open(),
            crd: None,
            refused: None,
            writes: StatusWrites::Yes,
        }
    }

    /// A kind whose status kiln does not write.
    fn none(writes: StatusWrites) -> Self {
        Self {
            writes,
            ..Self::open()
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
