//! One contender's cluster: a fresh local control plane with the audit log
//! on, the WebApp CRD, the benchmark namespace, a ServiceAccount for the
//! contender (with a kubeconfig of its own) and the N primaries.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kiln::controlplane::{Binaries, ControlPlane, Options};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::config::Kubeconfig;
use kube::{Api, Client};
use serde_json::json;

use crate::audit;
use crate::workload::{self, NAMESPACE};

/// The WebApp kind.
pub fn webapps() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("demo.kiln.dev", "v1", "WebApp"),
        "webapps",
    )
}

/// A control plane prepared for one contender.
pub struct Cluster {
    /// The control plane (stopped on drop).
    pub _control_plane: ControlPlane,
    /// The admin client.
    pub admin: Client,
    /// The contender's kubeconfig file.
    pub contender_kubeconfig: PathBuf,
    /// The audit log file.
    pub audit_log: PathBuf,
}

impl Cluster {
    /// Starts a control plane whose audit log records the contender's
    /// requests, installs the CRD and creates the namespace, the Secret, the
    /// ServiceAccount and `n` WebApps. `dir` holds the audit files.
    pub async fn start(binaries: &Binaries, dir: &Path, n: usize) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let policy = dir.join("audit-policy.yaml");
        std::fs::write(&policy, audit::policy())?;
        let audit_log = dir.join("audit.log");
        let _ = std::fs::remove_file(&audit_log);
        let mut opts = Options::new(binaries.clone());
        opts.apiserver_args = vec![
            format!("--audit-policy-file={}", policy.display()),
            format!("--audit-log-path={}", audit_log.display()),
            "--audit-log-mode=blocking".to_string(),
            "--audit-log-format=json".to_string(),
            // One Service per WebApp: the default /24 holds 254.
            "--service-cluster-ip-range=10.0.0.0/16".to_string(),
            // The API server's sharded list and watch (KEP-5866, alpha):
            // only kiln-sharded asks for it; the others are unaffected.
            "--feature-gates=ShardedListAndWatch=true".to_string(),
        ];
        let control_plane = ControlPlane::start(opts).await?;
        let admin = control_plane.client().await?;

        install_crd(&admin).await?;
        create(
            Api::<Namespace>::all(admin.clone()),
            &json!({"metadata": {"name": NAMESPACE}}),
        )
        .await?;
        create(
            Api::<Secret>::namespaced(admin.clone(), NAMESPACE),
            &workload::secret(),
        )
        .await?;
        create(
            Api::<ServiceAccount>::namespaced(admin.clone(), NAMESPACE),
            &json!({"metadata": {"name": audit::SERVICE_ACCOUNT}}),
        )
        .await?;
        create(
            Api::<ClusterRoleBinding>::all(admin.clone()),
            &json!({
                "metadata": {"name": "bench-contender"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": audit::SERVICE_ACCOUNT, "namespace": NAMESPACE}],
            }),
        )
        .await?;
        let token = token(&admin).await?;
        let contender_kubeconfig = dir.join("contender.kubeconfig");
        std::fs::write(
            &contender_kubeconfig,
            with_token(control_plane.kubeconfig_yaml(), &token)?,
        )?;
        create_webapps(&admin, n).await?;
        Ok(Self {
            _control_plane: control_plane,
            admin,
            contender_kubeconfig,
            audit_log,
        })
    }
}

async fn create<K>(api: Api<K>, value: &serde_json::Value) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    let obj: K = serde_json::from_value(value.clone())?;
    api.create(&PostParams::default(), &obj)
        .await
        .with_context(|| format!("creating {}", value["metadata"]["name"]))?;
    Ok(())
}

async fn install_crd(admin: &Client) -> anyhow::Result<()> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/webapp/crd.yaml");
    let text = std::fs::read_to_string(&path)?;
    let crd: CustomResourceDefinition = serde_norway::from_str(&text)?;
    let api: Api<CustomResourceDefinition> = Api::all(admin.clone());
    api.create(&PostParams::default(), &crd).await?;
    let served: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NAMESPACE, &webapps());
    let deadline = Instant::now() + Duration::from_secs(30);
    while served.list(&ListParams::default().limit(1)).await.is_err() {
        if Instant::now() > deadline {
            bail!("the WebApp CRD was not served within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

async fn token(admin: &Client) -> anyhow::Result<String> {
    let request: TokenRequest = serde_json::from_value(json!({
        "spec": {"audiences": [], "expirationSeconds": 4 * 3600}
    }))?;
    let sa: Api<ServiceAccount> = Api::namespaced(admin.clone(), NAMESPACE);
    let response = sa
        .create_token_request(audit::SERVICE_ACCOUNT, &PostParams::default(), &request)
        .await?;
    response
        .status
        .and_then(|s| s.token)
        .context("the TokenRequest came back without a token")
}

/// The admin kubeconfig with its user's credentials replaced by `token`.
fn with_token(admin_kubeconfig: &str, token: &str) -> anyhow::Result<String> {
    let mut kc = Kubeconfig::from_yaml(admin_kubeconfig)?;
    let user = kc
        .auth_infos
        .first_mut()
        .context("kubeconfig has no user")?;
    user.auth_info = Some(serde_json::from_value(json!({ "token": token }))?);
    Ok(serde_norway::to_string(&kc)?)
}

async fn create_webapps(admin: &Client, n: usize) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NAMESPACE, &webapps());
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let obj: DynamicObject = serde_json::from_value(workload::webapp(i))?;
                api.create(&PostParams::default(), &obj).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await
}
