//! The status schema of a rule's primary kind, read from its
//! CustomResourceDefinition, and a watch of that one CRD that says when
//! its status schema changed and lists the kind's objects again when its
//! schema did.

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use serde_json::Value;

use super::shared::Shared;
use crate::engine::cache::informer::Informer;
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
    let crd = if primary.gvk.may_be_crd() {
        match crds(client).get(&name).await {
            Ok(crd) => Some(serde_json::to_value(&crd).unwrap_or_default()),
            Err(kube::Error::Api(s)) if s.code == 404 => None,
            Err(e) => return Err(SchemaRead::Failed(e)),
        }
    } else {
        None
    };
    let version = &primary.gvk.version;
    let defined = crd.as_ref().map(|crd| Defined {
        name: name.clone(),
        version: version.clone(),
        served: crate::api::version_schema(crd, version).cloned(),
    });
    match status_writes(&primary.gvk, primary.has_status, crd.is_some()) {
        StatusWrites::Builtin => return Ok(Schema::none(StatusWrites::Builtin)),
        StatusWrites::NoSubresource => {
            tracing::warn!(rule = %rule.name, kind = %primary.gvk, "the primary's kind has no status subresource: kiln writes no status (no conditions, no fields) on its objects");
            return Ok(Schema {
                defined,
                ..Schema::none(StatusWrites::NoSubresource)
            });
        }
        StatusWrites::Yes => {}
    }
    let Some(crd) = crd else {
        tracing::warn!(rule = %rule.name, crd = %name, "the primary kind has no CustomResourceDefinition (an aggregated API?); its status schema is not checked");
        return Ok(Schema::open());
    };
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
        compare_status: true,
        defined,
        refused: None,
        writes: StatusWrites::Yes,
    })
}

fn crds(client: &Client) -> kube::Api<CustomResourceDefinition> {
    kube::Api::all(client.clone())
}

/// The primary's status schema, and the CRD it was read from.
pub(crate) struct Schema {
    pub(crate) status: StatusSchema,
    /// Whether `status` comes from the CRD (a change of it restarts the rule).
    pub(crate) compare_status: bool,
    /// The CRD that defines the primary kind, when one does.
    pub(crate) defined: Option<Defined>,
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
            compare_status: false,
            defined: None,
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

/// The CustomResourceDefinition of a rule's primary kind, as read when
/// the rule started.
pub(crate) struct Defined {
    name: String,
    version: String,
    /// The `openAPIV3Schema` of the rule's version.
    served: Option<Value>,
}

/// Watches the primary kind's CRD (never returns without one), telling
/// `primary` the schema of the rule's version as the rule starts and as it
/// changes (a field, a default): the API server defaults and prunes the
/// kind's objects by it when it reads them, and the cache lists them again
/// when it is not the one they were listed under ([`Informer::schema_is`]),
/// so templates see what the API server now gives, also when the CRD
/// changed while no rule ran on it (a rule-defined API's CRD is applied
/// before the rule's new version starts). Returns when the status schema
/// differs from `status` (`compare_status`): the rule then starts over.
pub(crate) async fn schema_change(shared: &Shared, schema: &Schema, primary: Arc<Informer>) {
    let Some(defined) = &schema.defined else {
        return std::future::pending().await;
    };
    primary.schema_is(&defined.served);
    let mut crd = shared.crds.subscribe(&shared.client, &defined.name);
    while let Some(json) = crd.next().await {
        primary.schema_is(&crate::api::version_schema(&json, &defined.version).cloned());
        let status = StatusSchema::from_crd(&json, &defined.version).ok();
        if schema.compare_status && status.as_ref() != Some(&schema.status) {
            return;
        }
    }
    std::future::pending().await
}
