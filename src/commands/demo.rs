//! `kiln demo` (`make run`): the example rules running against a cluster, with
//! the example CRDs and objects installed. Uses the cluster in $KUBECONFIG
//! when it answers; otherwise starts a local control plane for the demo and
//! stops it on exit: as root with its single node, so pods really run (the
//! WebApp `shop` then runs a small local image instead of nginx, which cannot
//! be pulled there), else without nodes.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kiln::api::webhook::{self, Webhook};
use kiln::controlplane::{
    Binaries, ControlPlane, NodePaths, Options as ControlPlaneOptions, node_unsupported,
};
use kiln::engine::{Engine, Options};
use kiln::metrics::Metrics;
use kiln::reload::CurrentRules;
use kiln::rules::{self, RuleSet};
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
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async {
            // Caught from the start: a Ctrl-C while starting stops what started.
            let stop = super::StopSignals::catch()?;
            let Cluster {
                client,
                control_plane,
                kubeconfig,
                kubectl,
            } = connect(args).await?;
            let on_node = control_plane.as_ref().is_some_and(|cp| cp.node().is_some());
            // The local control plane reaches a webhook on this machine.
            let webhook = match &control_plane {
                Some(_) => serve_conversion(&client, &set).await?,
                None => None,
            };
            let set = match webhook {
                Some(_) => set,
                None => without_conversion(set),
            };
            install_examples(&client, &args.examples, on_node, &set).await?;
            let pods = if on_node {
                Pods::LocalNode
            } else {
                pods_run_on(&client).await
            };
            let engine = Engine::new(client, Options::default());
            engine.start_all(&set);
            println!();
            println!(
                "kiln is running the rules in {} (Ctrl-C to stop). Look with:",
                args.rules.display()
            );
            print_hints(&kubectl, &kubeconfig, pods, set.converts());
            stop.received().await;
            // Everything kiln started stops with the rules, before the local
            // control plane does: nothing is left asking a server that is gone.
            let draining = async {
                if let Some(serving) = webhook {
                    serving.drain(Duration::from_secs(5)).await;
                }
            };
            tokio::join!(draining, engine.shutdown());
            drop(control_plane);
            Ok(ExitCode::SUCCESS)
        })
}

/// The configured cluster when it answers, else a local control plane.
/// The cluster the demo runs on, and how its hints reach it.
struct Cluster {
    client: Client,
    /// The local control plane, when the demo started one.
    control_plane: Option<ControlPlane>,
    /// The kubeconfig the hints export.
    kubeconfig: String,
    /// The `kubectl` the hints run: the one built with the local control
    /// plane, else the one on `PATH`.
    kubectl: String,
}

async fn connect(args: &DemoArgs) -> anyhow::Result<Cluster> {
    if std::env::var_os("KUBECONFIG").is_some() || home_kubeconfig().is_some_and(|p| p.exists()) {
        if let Ok(config) = kube::Config::infer().await {
            let client = Client::try_from(config)?;
            if tokio::time::timeout(ANSWER_WITHIN, client.apiserver_version())
                .await
                .is_ok_and(|r| r.is_ok())
            {
                let shown = std::env::var("KUBECONFIG").unwrap_or_else(|_| "~/.kube/config".into());
                println!("using the cluster in {shown}");
                return Ok(Cluster {
                    client,
                    control_plane: None,
                    kubeconfig: shown,
                    kubectl: "kubectl".into(),
                });
            }
        }
        println!("the configured cluster does not answer; starting a local control plane instead");
    }
    let dir = std::path::absolute(&args.dir).context("resolving --dir")?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    let source = Binaries::default_source();
    let mut opts = match node_unsupported() {
        None => {
            let mut opts = ControlPlaneOptions::new(Binaries::locate_node(&source)?);
            opts.node = Some(NodePaths::new(&source));
            opts
        }
        Some(reason) => {
            println!("no local node ({reason}): pods will not run");
            ControlPlaneOptions::new(Binaries::locate(&source)?)
        }
    };
    opts.dir = Some(dir);
    let kubectl = opts.binaries.path("kubectl").display().to_string();
    let cp = ControlPlane::start(opts).await?;
    println!("local control plane ready at {}", cp.server());
    if cp.node().is_some() {
        println!(
            "node {} Ready: pods run on this machine",
            kiln::controlplane::NODE_NAME
        );
    }
    Ok(Cluster {
        client: cp.client().await?,
        kubeconfig: cp.kubeconfig_path().display().to_string(),
        control_plane: Some(cp),
        kubectl,
    })
}

fn home_kubeconfig() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| Path::new(&h).join(".kube/config"))
}

/// Where the demo's pods run, which decides what it suggests trying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pods {
    /// On the node of the local control plane the demo started.
    LocalNode,
    /// On the nodes of the cluster in $KUBECONFIG.
    Nodes,
    /// Nowhere: the cluster has no node.
    Nowhere,
}

/// Whether the cluster has a node (pods run) or none; a failed read counts
/// as having some, so the demo never suggests playing a controller that runs.
async fn pods_run_on(client: &Client) -> Pods {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    match nodes.list(&kube::api::ListParams::default().limit(1)).await {
        Ok(list) if list.items.is_empty() => Pods::Nowhere,
        _ => Pods::Nodes,
    }
}

/// The shell commands the demo suggests, each line runnable as printed
/// (a test runs every one): two example APIs share the kind WebApp (and so
/// the plural `webapps`), so each is named with its group; the one with
/// several versions only when the demo runs it (`converting`).
fn hints(kubectl: &str, kubeconfig: &str, pods: Pods, converting: bool) -> Vec<String> {
    let versioned = if converting {
        "webapps.apps.demo.kiln.dev,"
    } else {
        ""
    };
    let mut lines = vec![
        format!("export KUBECONFIG={kubeconfig}"),
        format!(
            "{kubectl} get webapps.demo.kiln.dev,{versioned}databases,applications,jobschedules -A"
        ),
        format!(
            "{kubectl} get deploy,svc,cm,statefulset,cronjob,resourcequota -A -l app.kubernetes.io/managed-by=kiln"
        ),
        format!("{kubectl} describe webapps.demo.kiln.dev shop"),
    ];
    lines.push(match pods {
        Pods::LocalNode | Pods::Nodes => format!("{kubectl} get pods -o wide"),
        Pods::Nowhere => format!(
            "{kubectl} patch deploy shop --subresource=status --type=merge -p '{{\"status\":{{\"replicas\":2,\"readyReplicas\":2}}}}'"
        ),
    });
    lines
}

/// Prints [`hints`], indented, with what the last one is for.
fn print_hints(kubectl: &str, kubeconfig: &str, pods: Pods, converting: bool) {
    let mut lines = hints(kubectl, kubeconfig, pods, converting);
    let last = lines.pop().unwrap_or_default();
    for line in lines {
        println!("  {line}");
    }
    if pods == Pods::Nowhere {
        println!("The cluster has no nodes, so Deployments never report ready pods and WebApps");
        println!("stay Ready=False; play the deployment controller to watch Ready flip:");
    }
    println!("  {last}");
    if pods == Pods::LocalNode {
        print_node_notes();
    }
}

/// Serves the CRD conversion webhook of the rules' APIs with several
/// versions (webapp-api's `v1alpha1` and `v1`) at a URL on this machine, as
/// `kiln run --conversion-addr 127.0.0.1:PORT --conversion-url
/// https://127.0.0.1:PORT` would; its certificates in a Secret in
/// `default`. None when no rule converts.
async fn serve_conversion(client: &Client, set: &RuleSet) -> anyhow::Result<Option<Webhook>> {
    if !set.converts() {
        return Ok(None);
    }
    let addr = SocketAddr::from(([127, 0, 0, 1], kiln::controlplane::free_port()?));
    let settings = webhook::Settings {
        addr,
        endpoint: webhook::Endpoint::Url(format!("https://{addr}")),
        namespace: "default".into(),
        secret: webhook::DEFAULT_SECRET.into(),
        validity: Duration::from_secs(365 * 24 * 3600),
        crd_manager: kiln::api::install::FIELD_MANAGER.into(),
    };
    let rules = CurrentRules::new(set.clone());
    let serving = webhook::start(client.clone(), settings, rules, Arc::new(Metrics::new()))
        .await
        .context("serving the conversion webhook")?;
    println!("serving CRD conversion at https://{addr}");
    Ok(Some(serving))
}

/// Points `crd` at the conversion webhook (`conversion`, its
/// `spec.conversion`) when a rule of `set` defines it with several
/// versions; whether it did.
fn point_at_webhook(crd: &mut Value, set: &RuleSet, conversion: &Value) -> bool {
    let converts = set
        .rules
        .iter()
        .filter_map(|r| r.api.as_ref())
        .any(|a| a.conversions.is_some() && crd["metadata"]["name"] == a.name().as_str());
    if converts {
        crd["spec"]["conversion"] = conversion.clone();
    }
    converts
}

/// Applies every CRD under `dir` (one whose rule converts between versions
/// pointed at the webhook this process serves, before any object of it is
/// written), waits until each is served, then every other object
/// (namespaced ones without a namespace go to `default`). YAML documents
/// that are not Kubernetes objects are left out.
async fn install_examples(
    client: &Client,
    dir: &Path,
    on_node: bool,
    set: &RuleSet,
) -> anyhow::Result<()> {
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
            // Kubernetes objects only: an example may also hold other YAML
            // (my-platform's Helm values file).
            objects.extend(
                docs.iter()
                    .map(kiln::yaml::Node::to_json)
                    .filter(|o| o["apiVersion"].is_string() && o["kind"].is_string()),
            );
        }
    }
    if on_node {
        objects.iter_mut().for_each(adapt_for_node);
    }
    let dropped = unrun_apis(&objects, set);
    objects.retain(|o| !left_out(o, &dropped));
    let (mut crds, rest): (Vec<Value>, Vec<Value>) = objects
        .into_iter()
        .partition(|o| o["kind"] == "CustomResourceDefinition");
    if let Some(conversion) = webhook::ready_conversion(Duration::from_secs(60)).await? {
        for crd in &mut crds {
            point_at_webhook(crd, set, &conversion);
        }
    }
    for crd in &crds {
        apply(client, crd).await?;
    }
    // A CRD applied a moment ago takes a while to be served (longer on a
    // busy machine).
    let deadline = tokio::time::Instant::now() + SERVED_WITHIN;
    for obj in &rest {
        while let Err(e) = apply(client, obj).await {
            if tokio::time::Instant::now() >= deadline {
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

/// How long the example CRDs are given to be served.
const SERVED_WITHIN: Duration = Duration::from_secs(120);

/// How long the cluster in $KUBECONFIG is given to answer before the demo
/// starts a local control plane instead (one that refuses connections
/// answers at once).
const ANSWER_WITHIN: Duration = Duration::from_secs(15);

/// The rules the demo runs on a cluster it serves no conversion webhook
/// for: an API with several versions would be served without conversion,
/// and lose data, so its rules (and its examples) are left out, saying so.
fn without_conversion(mut set: RuleSet) -> RuleSet {
    let converting: Vec<(String, String)> = set
        .rules
        .iter()
        .filter_map(|r| r.api.as_ref())
        .filter(|a| a.conversions.is_some())
        .map(|a| (a.group.clone(), a.kind.clone()))
        .collect();
    set.rules.retain(|r| {
        let gvk = &r.primary.gvk;
        let left_out = converting.contains(&(gvk.group.clone(), gvk.kind.clone()));
        if left_out {
            println!(
                "rule {} left out: {} has several versions, and the demo serves the conversion webhook only on a control plane of its own",
                r.name, gvk
            );
        }
        !left_out
    });
    set
}

/// The (group, kind) of each CRD with several versions among `objects`
/// that no rule of `set` defines: the demo leaves out its examples (its
/// rule was left out for want of a conversion webhook).
fn unrun_apis(objects: &[Value], set: &RuleSet) -> Vec<(String, String)> {
    let defined = |crd: &Value| {
        set.rules
            .iter()
            .filter_map(|r| r.api.as_ref())
            .any(|a| crd["metadata"]["name"] == a.name().as_str())
    };
    objects
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .filter(|crd| {
            crd["spec"]["versions"]
                .as_array()
                .is_some_and(|v| v.len() > 1)
        })
        .filter(|crd| !defined(crd))
        .map(|crd| {
            let text = |p: &str| crd.pointer(p).and_then(Value::as_str).unwrap_or_default();
            (
                text("/spec/group").to_string(),
                text("/spec/names/kind").to_string(),
            )
        })
        .collect()
}

/// Whether the demo leaves `object` out: a CRD no rule of `set` defines
/// while a rule left out did, or an object of such a kind.
fn left_out(object: &Value, dropped: &[(String, String)]) -> bool {
    let (group, kind) = if object["kind"] == "CustomResourceDefinition" {
        (
            object["spec"]["group"].as_str().unwrap_or_default(),
            object["spec"]["names"]["kind"].as_str().unwrap_or_default(),
        )
    } else {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        (group, object["kind"].as_str().unwrap_or_default())
    };
    dropped
        .iter()
        .any(|(g, k)| g.as_str() == group && k.as_str() == kind)
}

/// The image the WebApp `shop` runs on the local node: busybox's `httpd`
/// (Debian busybox-static) serving one page on 8080, built by the node's
/// `prepare.sh`. The node has no registry and no network, so `nginx:1.27`
/// could not be pulled.
const NODE_WEB_IMAGE: &str = "kiln.local/httpd:1.35";

/// Makes an example runnable on the local node: `shop` gets the local image.
fn adapt_for_node(object: &mut Value) {
    if object["apiVersion"] == "demo.kiln.dev/v1"
        && object["kind"] == "WebApp"
        && object["metadata"]["name"] == "shop"
    {
        object["spec"]["image"] = Value::from(NODE_WEB_IMAGE);
    }
}

/// What the demo changed or cannot do on the local node, said plainly.
fn print_node_notes() {
    println!(
        "On the local node, images come only from its own containerd (no registry, no network):"
    );
    println!(
        "  - WebApp shop runs {NODE_WEB_IMAGE} instead of nginx:1.27: busybox's httpd (Debian"
    );
    println!(
        "    busybox-static) serving one page on :8080; shop turns Ready=True once its pods run."
    );
    println!(
        "  - Database orders (postgres:17), Application my-awesome-app (nginx) and the JobSchedule"
    );
    println!(
        "    images cannot be pulled here, and orders' PersistentVolumeClaim has no provisioner,"
    );
    println!(
        "    so those pods stay Pending or ErrImageNeverPull/ImagePullBackOff and never turn Ready."
    );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_crd_of_a_rule_that_converts_is_pointed_at_the_webhook() {
        let set =
            rules::load(&[PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/rules"))]).unwrap();
        let conversion = serde_json::json!({"strategy": "Webhook"});
        let crd = |name: &str| serde_json::json!({"metadata": {"name": name}, "spec": {}});
        let mut api = crd("webapps.apps.demo.kiln.dev");
        assert!(point_at_webhook(&mut api, &set, &conversion));
        assert_eq!(api["spec"]["conversion"], conversion);
        let mut plain = crd("webapps.demo.kiln.dev");
        assert!(!point_at_webhook(&mut plain, &set, &conversion));
        assert!(plain["spec"].get("conversion").is_none());
    }

    #[test]
    fn the_hints_name_each_webapp_api_by_its_group_and_suit_where_pods_run() {
        let hints = |pods| hints("kubectl", "/tmp/kc", pods, true);
        let nowhere = hints(Pods::Nowhere);
        assert_eq!(nowhere[0], "export KUBECONFIG=/tmp/kc");
        assert!(nowhere.contains(&"kubectl describe webapps.demo.kiln.dev shop".to_string()));
        assert!(
            nowhere.iter().all(|l| !l.contains(" webapp ")
                && !l.contains(" webapps ")
                && !l.contains(" webapps,")),
            "a bare `webapp` is ambiguous: {nowhere:?}"
        );
        assert!(
            nowhere
                .last()
                .unwrap()
                .contains("patch deploy shop --subresource=status")
        );
        for pods in [Pods::Nodes, Pods::LocalNode] {
            assert_eq!(hints(pods).last().unwrap(), "kubectl get pods -o wide");
        }
    }

    #[test]
    fn on_the_node_only_shop_gets_the_local_image() {
        let mut shop = serde_json::json!({"apiVersion": "demo.kiln.dev/v1", "kind": "WebApp", "metadata": {"name": "shop"}, "spec": {"image": "nginx:1.27"}});
        let mut other = serde_json::json!({"apiVersion": "demo.kiln.dev/v1", "kind": "WebApp", "metadata": {"name": "blog"}, "spec": {"image": "nginx:1.27"}});
        let image = serde_json::json!({"repository": "nginx", "tag": "1.27"});
        let mut api_shop = serde_json::json!({"apiVersion": "apps.demo.kiln.dev/v1", "kind": "WebApp", "metadata": {"name": "shop"}, "spec": {"image": image}});
        adapt_for_node(&mut shop);
        adapt_for_node(&mut other);
        adapt_for_node(&mut api_shop);
        assert_eq!(shop["spec"]["image"], NODE_WEB_IMAGE);
        assert_eq!(other["spec"]["image"], "nginx:1.27");
        assert_eq!(
            api_shop["spec"]["image"], image,
            "webapp-api's shop keeps its map"
        );
    }
}
