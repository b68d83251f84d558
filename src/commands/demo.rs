//! `kiln demo` (`make run`): the example rules running against a cluster, with
//! the example CRDs and objects installed. Uses the cluster in $KUBECONFIG
//! when it answers; otherwise starts a local control plane for the demo and
//! stops it on exit.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use kiln::controlplane::{Binaries, ControlPlane, Options as ControlPlaneOptions};
use kiln::engine::{Engine, Options};
use kiln::rules;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::{GroupVersionKind, TypeMeta};
use kube::discovery::{self, Scope};
use kube::{Api, Client};
use serde_json::Value;

use crate::cli::DemoArgs;

/// Runs the demo until Ctrl-C.
pub fn run(args: &DemoArgs) -> anyhow::Result<ExitCode> {
    let set = rules::load(std::slice::from_ref(&args.rules)).map_err(|d| {
        anyhow::anyhow!(
            "the rules are invalid ({} problems); run `kiln validate {}`",
            d.len(),
            args.rules.display()
        )
    })?;
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async {
        let (client, control_plane, kubeconfig) = connect(args).await?;
        install_examples(&client, &args.examples).await?;
        let engine = Engine::new(client, Options::default());
        engine.start_all(&set);
        println!();
        println!("kiln is running the rules in {} (Ctrl-C to stop). Look with:", args.rules.display());
        let kubectl = kubectl_hint();
        println!("  export KUBECONFIG={kubeconfig}");
        println!("  {kubectl} get webapps,databases,jobschedules -A");
        println!("  {kubectl} get deploy,svc,cm,statefulset,cronjob,resourcequota -A -l app.kubernetes.io/managed-by=kiln");
        println!("  {kubectl} describe webapp shop");
        if control_plane.is_some() {
            println!("The local control plane has no nodes, so Deployments never report ready pods and");
            println!("WebApps stay Ready=False; play the deployment controller to watch Ready flip:");
            println!("  {kubectl} patch deploy shop --subresource=status --type=merge -p '{{\"status\":{{\"replicas\":2,\"readyReplicas\":2}}}}'");
        }
        super::shutdown_signal().await?;
        engine.shutdown().await;
        drop(control_plane);
        Ok(ExitCode::SUCCESS)
    })
}

/// The configured cluster when it answers, else a local control plane.
async fn connect(args: &DemoArgs) -> anyhow::Result<(Client, Option<ControlPlane>, String)> {
    if std::env::var_os("KUBECONFIG").is_some() || home_kubeconfig().is_some_and(|p| p.exists()) {
        if let Ok(config) = kube::Config::infer().await {
            let client = Client::try_from(config)?;
            if tokio::time::timeout(Duration::from_secs(5), client.apiserver_version())
                .await
                .is_ok_and(|r| r.is_ok())
            {
                let shown = std::env::var("KUBECONFIG").unwrap_or_else(|_| "~/.kube/config".into());
                println!("using the cluster in {shown}");
                return Ok((client, None, shown));
            }
        }
        println!("the configured cluster does not answer; starting a local control plane instead");
    }
    let dir = std::path::absolute(&args.dir).context("resolving --dir")?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    let mut opts = ControlPlaneOptions::new(Binaries::locate(&Binaries::default_source())?);
    opts.dir = Some(dir);
    let cp = ControlPlane::start(opts).await?;
    println!("local control plane ready at {}", cp.server());
    let kubeconfig = cp.kubeconfig_path().display().to_string();
    Ok((cp.client().await?, Some(cp), kubeconfig))
}

fn home_kubeconfig() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| Path::new(&h).join(".kube/config"))
}

fn kubectl_hint() -> String {
    let built = Binaries::locate(&Binaries::default_source())
        .ok()
        .map(|b| b.path("kubectl"));
    match built {
        Some(path) if path.exists() => path.display().to_string(),
        _ => "kubectl".to_string(),
    }
}

/// Applies every CRD under `dir`, waits until each is served, then every
/// other object (namespaced ones without a namespace go to `default`).
async fn install_examples(client: &Client, dir: &Path) -> anyhow::Result<()> {
    let mut objects = Vec::new();
    let mut subdirs: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    subdirs.sort();
    for sub in subdirs {
        for file in rules::load::list_dir(&sub)? {
            let text = std::fs::read_to_string(&file)?;
            let docs = kiln::yaml::parse_documents(&text, kiln::yaml::Limits::default())
                .map_err(|e| anyhow::anyhow!("{}:{}: {}", file.display(), e.pos, e.message))?;
            objects.extend(docs.iter().map(kiln::yaml::Node::to_json));
        }
    }
    let (crds, rest): (Vec<Value>, Vec<Value>) = objects
        .into_iter()
        .partition(|o| o["kind"] == "CustomResourceDefinition");
    for crd in &crds {
        apply(client, crd).await?;
    }
    for obj in &rest {
        let mut tries = 0;
        // A CRD applied a moment ago takes a little while to be served.
        while let Err(e) = apply(client, obj).await {
            tries += 1;
            if tries > 50 {
                return Err(e);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    println!(
        "installed {} CRDs and {} example objects from {}",
        crds.len(),
        rest.len(),
        dir.display()
    );
    Ok(())
}

async fn apply(client: &Client, object: &Value) -> anyhow::Result<()> {
    let types: TypeMeta = serde_json::from_value(object.clone())?;
    let gvk = GroupVersionKind::try_from(&types)?;
    let (ar, caps) = discovery::pinned_kind(client, &gvk).await?;
    let mut obj: DynamicObject = serde_json::from_value(object.clone())?;
    obj.metadata.uid = None;
    obj.metadata.creation_timestamp = None;
    let name = obj.metadata.name.clone().unwrap_or_default();
    let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
        let ns = obj
            .metadata
            .namespace
            .get_or_insert_with(|| "default".to_string())
            .clone();
        Api::namespaced_with(client.clone(), &ns, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    api.patch(
        &name,
        &PatchParams::apply("kiln-demo").force(),
        &Patch::Apply(&obj),
    )
    .await?;
    Ok(())
}
