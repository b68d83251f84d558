//! Sharding: several `kiln run --shards` processes share 300
//! Widgets. Each replica runs with a field manager of its own, so every
//! write names its writer: a child's `data` owned by two kiln managers at
//! once means both applied it (a double write), and the history of the
//! child's owner, recorded from a watch, shows every handover.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kiln::shard::member::{BUCKETS_ANNOTATION, GROUP_LABEL, parse};
use kiln::shard::ring;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

use crate::engine::{WIDGET_RULE, widget};
use crate::support::{self, KilnProcess, TestNamespace, eventually};
use kiln::controlplane::{Binaries, ControlPlane, Options as ControlPlaneOptions};

const PRIMARIES: usize = 300;
const CONVERGE: Duration = Duration::from_secs(180);
/// The Lease timings of every replica.
const LEASE: [&str; 6] = [
    "--leader-elect-lease-duration",
    "4s",
    "--leader-elect-renew-deadline",
    "3s",
    "--leader-elect-retry-period",
    "1s",
];

/// Per child: when its `data` changed owners or value, the kiln managers
/// owning it then, and the value.
type History = Arc<Mutex<BTreeMap<String, Vec<(Instant, Vec<String>, String)>>>>;

/// One `kiln run --shards` process and its field manager.
struct Replica {
    manager: String,
    kiln: KilnProcess,
}

impl Replica {
    fn start(kubeconfig: &str, ns: &str, index: usize) -> Self {
        Self::running(kubeconfig, ns, index, WIDGET_RULE)
    }

    /// A replica running `rules` (YAML documents).
    fn running(kubeconfig: &str, ns: &str, index: usize, rules: &str) -> Self {
        let manager = format!("kiln-r{index}");
        let mut args = vec![
            "--namespace",
            ns,
            "--shards",
            "--shard-group",
            "widgets",
            "--leader-elect-namespace",
            ns,
            "--field-manager",
            &manager,
            // A fixed identity: the ring, and so each replica's share, is
            // the same on every run.
            "--shard-identity",
            &manager,
        ];
        args.extend(LEASE);
        let kiln = KilnProcess::start_on(kubeconfig, rules, &args);
        Self { manager, kiln }
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.kiln.child.id()).unwrap())
    }

    /// `/readyz`: its status and body, if it answers.
    async fn readiness(&self) -> Option<(u16, String)> {
        support::http_get(self.kiln.health, "/readyz").await
    }
}

/// Who writes, as the cluster shows it.
struct Group {
    client: Client,
    ns: TestNamespace,
    kubeconfig: String,
    replicas: Vec<Replica>,
    /// Per child: the kiln managers owning its `data`, at each change seen.
    history: History,
    recorder: tokio::task::JoinHandle<()>,
    /// A control plane of its own, when the test needs one. Last: dropped
    /// after the replicas (a failed test's kiln logs end as it ended).
    _control_plane: Option<ControlPlane>,
}

impl Group {
    /// `replicas` replicas on the shared test cluster, and the Widgets.
    async fn start(prefix: &str, replicas: usize) -> Self {
        let group = Self::bare(prefix, replicas).await;
        group.set_values("v1").await;
        group
    }

    /// `replicas` replicas on the shared test cluster, no Widget yet.
    async fn bare(prefix: &str, replicas: usize) -> Self {
        Self::bare_with(prefix, replicas, WIDGET_RULE).await
    }

    /// `replicas` replicas running `rules` on the shared test cluster.
    async fn bare_with(prefix: &str, replicas: usize, rules: &str) -> Self {
        Self::start_running(
            support::kubeconfig_yaml().to_string(),
            None,
            prefix,
            replicas,
            rules,
        )
        .await
    }

    /// `replicas` replicas on the cluster of `kubeconfig`, no Widget yet.
    async fn start_on(
        kubeconfig: String,
        control_plane: Option<ControlPlane>,
        prefix: &str,
        replicas: usize,
    ) -> Self {
        Self::start_running(kubeconfig, control_plane, prefix, replicas, WIDGET_RULE).await
    }

    async fn start_running(
        kubeconfig: String,
        control_plane: Option<ControlPlane>,
        prefix: &str,
        replicas: usize,
        rules: &str,
    ) -> Self {
        let client = kiln::controlplane::client_from_kubeconfig(&kubeconfig)
            .await
            .unwrap();
        support::install_crds(&client, "tests/fixtures/crds").await;
        let ns = TestNamespace::new(&client, prefix).await;
        let history = Arc::new(Mutex::new(BTreeMap::new()));
        let recorder = tokio::spawn(record(
            client.clone(),
            ns.name().to_string(),
            history.clone(),
        ));
        let replicas = (0..replicas)
            .map(|i| Replica::running(&kubeconfig, ns.name(), i, rules))
            .collect();
        Self {
            client,
            ns,
            kubeconfig,
            _control_plane: control_plane,
            replicas,
            history,
            recorder,
        }
    }

    fn ns(&self) -> &str {
        self.ns.name()
    }

    fn widgets(&self) -> Api<DynamicObject> {
        self.widgets_through(self.client.clone())
    }

    fn widgets_through(&self, client: Client) -> Api<DynamicObject> {
        let ar = kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("test.kiln.dev", "v1", "Widget"),
            "widgets",
        );
        Api::namespaced_with(client, self.ns(), &ar)
    }

    /// Widgets w0..w299 with `value` = `{prefix}-{i}`.
    async fn set_values(&self, prefix: &str) {
        let api = self.widgets();
        let pp = PatchParams::apply("shard-test").force();
        for i in 0..PRIMARIES {
            let name = format!("w{i}");
            let obj: DynamicObject =
                serde_json::from_value(widget(&name, json!({"value": format!("{prefix}-{i}")})))
                    .unwrap();
            api.patch(&name, &pp, &Patch::Apply(&obj)).await.unwrap();
        }
    }

    /// Every child holds `{prefix}-{i}`, written by exactly one kiln
    /// manager, and every Widget's status shows it.
    async fn converged(&self, prefix: &str) {
        let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), self.ns());
        eventually(
            &format!("{PRIMARIES} widgets at {prefix}"),
            CONVERGE,
            || async {
                let children = cms
                    .list(&ListParams::default().labels("kiln.dev/rule=widgets"))
                    .await
                    .ok()?;
                let ok = children.items.len() == PRIMARIES
                    && children.items.iter().all(|cm| {
                        let name = cm.name_any();
                        cm.data.as_ref().and_then(|d| d.get("value"))
                            == Some(&format!("{prefix}-{}", &name[1..]))
                    });
                let widgets = self.widgets().list(&ListParams::default()).await.ok()?;
                let status = widgets.items.iter().all(|w| {
                    w.data["status"]["value"].as_str()
                        == Some(&format!("{prefix}-{}", &w.name_any()[1..]))
                });
                (ok && status).then_some(())
            },
        )
        .await;
    }

    /// Primary name → the kiln managers owning its child's `data` now.
    async fn writers(&self) -> HashMap<String, Vec<String>> {
        let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), self.ns());
        let children = cms
            .list(&ListParams::default().labels("kiln.dev/rule=widgets"))
            .await
            .unwrap();
        children
            .items
            .iter()
            .map(|cm| (cm.name_any(), data_owners(cm)))
            .collect()
    }

    /// Primary name → its bucket.
    async fn buckets(&self) -> HashMap<String, u32> {
        let widgets = self.widgets().list(&ListParams::default()).await.unwrap();
        widgets
            .items
            .iter()
            .map(|w| (w.name_any(), ring::bucket_of(&w.uid().unwrap())))
            .collect()
    }

    /// Primary name → the manager of the replica the ring assigns its
    /// bucket to, when replicas `kiln-r0..kiln-r{n-1}` are live.
    fn expected_writers(buckets: &HashMap<String, u32>, n: usize) -> HashMap<String, String> {
        let members: Vec<String> = (0..n).map(|i| format!("kiln-r{i}")).collect();
        let sets: Vec<u64> = members
            .iter()
            .map(|m| ring::assigned(m, &members))
            .collect();
        buckets
            .iter()
            .map(|(name, bucket)| {
                let owner = members
                    .iter()
                    .zip(&sets)
                    .find(|(_, set)| ring::contains(**set, *bucket))
                    .map(|(m, _)| m.clone())
                    .unwrap_or_default();
                (name.clone(), owner)
            })
            .collect()
    }

    /// Manager → the buckets its replica's Lease lists (held Leases only).
    async fn leases(&self) -> HashMap<String, u64> {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), self.ns());
        let leases = api
            .list(&ListParams::default().labels(&format!("{GROUP_LABEL}=widgets")))
            .await
            .unwrap();
        let mut out = HashMap::new();
        for lease in leases.items {
            let Some(holder) = lease.spec.as_ref().and_then(|s| s.holder_identity.clone()) else {
                continue;
            };
            let Some(r) = self.replicas.iter().find(|r| r.manager == holder) else {
                continue;
            };
            let listed = parse(
                lease
                    .annotations()
                    .get(BUCKETS_ANNOTATION)
                    .map_or("", String::as_str),
            );
            out.insert(r.manager.clone(), listed);
        }
        out
    }

    /// Waits until `n` replicas are ready (Lease renewed, buckets held as
    /// assigned) and their Leases list every bucket exactly once.
    async fn settled(&self, live: &[usize]) {
        support::until("the shard group to settle", CONVERGE, || async {
            for &i in live {
                let r = &self.replicas[i];
                match r.readiness().await {
                    Some((200, _)) => {}
                    Some((code, why)) => return Err(format!("{} {code}: {why}", r.manager)),
                    None => return Err(format!("{}: no answer on /readyz", r.manager)),
                }
            }
            let leases = self.leases().await;
            let sets: Vec<u64> = live
                .iter()
                .map(|&i| leases.get(&self.replicas[i].manager).copied().unwrap_or(0))
                .collect();
            let total: u32 = sets.iter().map(|s| s.count_ones()).sum();
            let union = sets.iter().fold(0, |a, s| a | s);
            if union == u64::MAX && total == 64 {
                Ok(())
            } else {
                let listed: Vec<String> = leases
                    .iter()
                    .map(|(m, b)| format!("{m} {b:016x}"))
                    .collect();
                Err(format!(
                    "the Leases list {total} buckets, {} distinct: {listed:?}",
                    union.count_ones()
                ))
            }
        })
        .await;
    }

    /// Every child's `data` is owned by exactly one kiln manager, the one
    /// whose Lease lists its primary's bucket now.
    async fn each_written_by_its_owner(&self) -> HashMap<String, String> {
        let (writers, buckets, leases) = (
            self.writers().await,
            self.buckets().await,
            self.leases().await,
        );
        let mut out = HashMap::new();
        for (name, owners) in writers {
            assert_eq!(owners.len(), 1, "{name} has data written by {owners:?}");
            let bucket = buckets[&name];
            let holder = leases
                .iter()
                .find(|(_, set)| ring::contains(**set, bucket))
                .map(|(m, _)| m.clone());
            assert_eq!(
                holder.as_ref(),
                Some(&owners[0]),
                "{name} (bucket {bucket}) was written by {} but is held by {holder:?}",
                owners[0]
            );
            out.insert(name, owners[0].clone());
        }
        out
    }

    /// No child's writer ever went back to a replica it had moved away
    /// from, and no change showed two writers at once.
    fn no_double_writes(&self) {
        for (name, changes) in self.history.lock().unwrap().iter() {
            let mut seen: Vec<&String> = Vec::new();
            for (_, owners, _) in changes {
                assert!(owners.len() <= 1, "{name}: written by {owners:?} at once");
                if let Some(w) = owners.first()
                    && seen.last() != Some(&w)
                {
                    assert!(
                        !seen.contains(&w),
                        "{name}: writers went back and forth: {changes:?}"
                    );
                    seen.push(w);
                }
            }
        }
    }

    /// Of replica `i`, for Widgets: whether the API server applied the
    /// shard selector on the last list (`kiln_shard_server_filtered`), and
    /// how many Widgets received it dropped as not in its share.
    async fn widget_filtering(&self, i: usize) -> (Option<f64>, f64) {
        let gvk = r#"{gvk="test.kiln.dev/v1/Widget"} "#;
        let kiln = &self.replicas[i].kiln;
        (
            kiln.metric(&format!("kiln_shard_server_filtered{gvk}"))
                .await,
            kiln.metric(&format!("kiln_shard_dropped_objects_total{gvk}"))
                .await
                .unwrap_or(0.0),
        )
    }

    /// The replicas' `kiln_shard_primaries` add up to every primary, once.
    /// Waited for: a replica whose Lease lapsed (an API server stalled past
    /// the renew deadline) rightly reports none until it takes its buckets
    /// back.
    async fn primaries_add_up(&self, live: &[usize]) {
        eventually(
            "the shares to add up to every primary, once",
            CONVERGE,
            || async {
                let sum = self.metric_sum(live, "kiln_shard_primaries ").await;
                (sum == PRIMARIES as f64).then_some(())
            },
        )
        .await;
    }

    async fn metric_sum(&self, live: &[usize], prefix: &str) -> f64 {
        let mut sum = 0.0;
        for &i in live {
            sum += self.replicas[i].kiln.metric(prefix).await.unwrap_or(0.0);
        }
        sum
    }

    async fn end(self) {
        let mut put_off = Vec::new();
        for r in &self.replicas {
            let n = r.kiln.metric("kiln_shard_put_off_reconciles_total ").await;
            put_off.push((r.manager.clone(), n));
        }
        eprintln!(
            "{}: reconciles put off by a late renew: {put_off:?}",
            self.ns()
        );
        self.recorder.abort();
        drop(self.replicas);
        self.ns.delete().await;
    }
}

/// The kiln managers (`kiln-r*`) owning fields under `data`.
fn data_owners(cm: &ConfigMap) -> Vec<String> {
    let mut owners: Vec<String> = cm
        .managed_fields()
        .iter()
        .filter(|m| {
            m.manager
                .as_deref()
                .is_some_and(|n| n.starts_with("kiln-r"))
        })
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.get("f:data").is_some())
        })
        .filter_map(|m| m.manager.clone())
        .collect();
    owners.sort();
    owners.dedup();
    owners
}

/// Records, per child, each change of who owns its `data` (and the value).
async fn record(client: Client, ns: String, history: History) {
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let events = watcher(
        api,
        watcher::Config::default().labels("kiln.dev/rule=widgets"),
    );
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        let (watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) = (match event {
            Ok(e) => e,
            Err(_) => continue,
        }) else {
            continue;
        };
        let owners = data_owners(&cm);
        let value = cm
            .data
            .as_ref()
            .and_then(|d| d.get("value"))
            .cloned()
            .unwrap_or_default();
        let mut h = history.lock().unwrap();
        let changes = h.entry(cm.name_any()).or_default();
        if changes
            .last()
            .is_none_or(|(_, o, v)| *o != owners || *v != value)
        {
            changes.push((Instant::now(), owners, value));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_the_primaries_as_the_ring_says_and_a_fourth_takes_its_buckets() {
    let mut group = Group::start("shard-share", 3).await;
    group.converged("v1").await;
    group.settled(&[0, 1, 2]).await;
    let before = group.each_written_by_its_owner().await;
    // Each replica reconciled exactly the share the ring gives it.
    let buckets = group.buckets().await;
    let three = Group::expected_writers(&buckets, 3);
    assert_eq!(before, three, "the writers are not the ring's assignment");
    for r in &group.replicas {
        let mine = before.values().filter(|m| **m == r.manager).count();
        eventually(
            &format!("{} to report {mine} primaries", r.manager),
            CONVERGE,
            || async {
                let owned = r.kiln.metric("kiln_shard_primaries ").await?;
                (owned == mine as f64).then_some(())
            },
        )
        .await;
    }
    // Without the ShardedListAndWatch gate the API server ignores the
    // shard selector and sends every Widget: each replica drops the others'.
    for i in 0..3 {
        let (served, dropped) = group.widget_filtering(i).await;
        assert_eq!(served, Some(0.0), "kiln-r{i}: the gate is off");
        let mine = before
            .values()
            .filter(|m| **m == format!("kiln-r{i}"))
            .count();
        assert!(
            dropped >= (PRIMARIES - mine) as f64,
            "kiln-r{i} dropped {dropped} Widgets, received fewer than the others' {}",
            PRIMARIES - mine
        );
    }
    group.primaries_add_up(&[0, 1, 2]).await;
    assert_eq!(
        group.metric_sum(&[0, 1, 2], "kiln_shard_members ").await,
        9.0
    );
    // No child's name was held by an object another replica's share
    // holds, so none was looked up before it was created: a replica's
    // cache knows what it left out.
    assert_eq!(
        group
            .metric_sum(&[0, 1, 2], "kiln_shard_lookups_total ")
            .await,
        0.0,
        "children were looked up on the API server before being created"
    );

    // A fourth joins; every value changes while the buckets move.
    let ns = group.ns().to_string();
    let fourth = Replica::start(&group.kubeconfig, &ns, 3);
    group.replicas.push(fourth);
    group.set_values("v2").await;
    group.converged("v2").await;
    group.settled(&[0, 1, 2, 3]).await;
    group.set_values("v3").await;
    group.converged("v3").await;
    let after = group.each_written_by_its_owner().await;
    // Exactly the moves the ring decides for these uids: from the first
    // three to the fourth only (the ring's unit tests check that this is
    // about a quarter over many identities).
    let four = Group::expected_writers(&buckets, 4);
    assert_eq!(after, four, "the writers are not the ring's assignment");
    let moved: Vec<&String> = after.keys().filter(|k| before[*k] != after[*k]).collect();
    assert!(!moved.is_empty(), "nothing moved to the fourth replica");
    assert!(
        moved.iter().all(|k| after[*k] == "kiln-r3"),
        "primaries moved between the first three replicas"
    );
    assert_eq!(
        group
            .metric_sum(&[0, 1, 2, 3], "kiln_shard_lookups_total ")
            .await,
        0.0,
        "children were looked up after the buckets moved"
    );
    group.no_double_writes();
    group.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_s_share_is_taken_over_once_its_lease_expired() {
    let group = Group::start("shard-kill", 3).await;
    group.converged("v1").await;
    group.settled(&[0, 1, 2]).await;
    let before = group.each_written_by_its_owner().await;
    let dead: Vec<String> = before
        .iter()
        .filter(|(_, m)| *m == "kiln-r0")
        .map(|(k, _)| k.clone())
        .collect();
    assert!(!dead.is_empty());
    kill(group.replicas[0].pid(), Signal::SIGKILL).unwrap();
    let killed = Instant::now();
    group.set_values("v2").await;
    group.converged("v2").await;
    group.settled(&[1, 2]).await;
    for (name, owners) in group.writers().await {
        assert_eq!(owners.len(), 1, "{name} written by {owners:?}");
        assert_ne!(owners[0], "kiln-r0", "{name} still the dead replica's");
    }
    // Nobody wrote the dead replica's primaries before its Lease could have
    // expired (4 s, less one retry period of the observers' clocks).
    let first = {
        let history = group.history.lock().unwrap();
        dead.iter()
            .filter_map(|name| {
                history[name]
                    .iter()
                    .find(|(_, owners, _)| owners.iter().any(|o| o != "kiln-r0"))
                    .map(|(at, _, _)| *at)
            })
            .min()
            .unwrap()
    };
    let waited = first.saturating_duration_since(killed);
    assert!(
        waited >= Duration::from_secs(3),
        "the dead replica's share was written {waited:?} after SIGKILL, before its Lease expired"
    );
    group.no_double_writes();
    group.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_replica_writes_nothing_after_its_lease_expired() {
    let group = Group::start("shard-pause", 3).await;
    group.converged("v1").await;
    group.settled(&[0, 1, 2]).await;
    let before = group.each_written_by_its_owner().await;
    let pid = group.replicas[0].pid();
    let paused = &group.replicas[0].kiln;
    let taken_in = r#"kiln_shard_handovers_total{direction="in"} "#;
    let (taken, rescopes) = (
        paused.metric(taken_in).await.unwrap_or(0.0),
        paused
            .metric("kiln_shard_rescopes_total ")
            .await
            .unwrap_or(0.0),
    );
    kill(pid, Signal::SIGSTOP).unwrap();
    // The others see its Lease expire and take its share.
    eventually("the others to take the paused share", CONVERGE, || async {
        (group.metric_sum(&[1, 2], "kiln_shard_members ").await == 4.0).then_some(())
    })
    .await;
    group.settled(&[1, 2]).await;
    // Work it will see when it wakes: every value changes.
    group.set_values("v2").await;
    group.converged("v2").await;
    let resumed = Instant::now();
    kill(pid, Signal::SIGCONT).unwrap();
    // When it takes buckets again, it has already listed its caches anew:
    // they were as old as the pause.
    let relisted = eventually(
        "the paused replica to take buckets again",
        CONVERGE,
        || async {
            let now = paused.metric(taken_in).await?;
            let relisted = paused.metric("kiln_shard_rescopes_total ").await? > rescopes;
            (now > taken).then_some(relisted)
        },
    )
    .await;
    assert!(
        relisted,
        "the paused replica took buckets back before it listed its caches again"
    );
    group.settled(&[0, 1, 2]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // It takes its buckets back (its identity is the same) but re-lists
    // before it claims them, so its caches already show the values the
    // others wrote meanwhile: it has nothing to write, at no moment.
    for (name, changes) in group.history.lock().unwrap().iter() {
        for (at, owners, value) in changes {
            assert!(
                *at < resumed || !owners.iter().any(|o| o == "kiln-r0"),
                "the paused replica wrote {name} ({value}) {:?} after waking",
                at.saturating_duration_since(resumed)
            );
        }
    }
    let after = group.writers().await;
    let paused: Vec<&String> = before
        .iter()
        .filter(|(_, m)| *m == "kiln-r0")
        .map(|(k, _)| k)
        .collect();
    for name in paused {
        assert_eq!(after[name].len(), 1, "{name} written by {:?}", after[name]);
        assert_ne!(
            after[name][0], "kiln-r0",
            "the paused replica wrote {name} after waking"
        );
    }
    group.no_double_writes();
    group.end().await;
}

/// With the API server's `ShardedListAndWatch` gate on, the shares are the
/// same, and the API server sends each replica only its share of the
/// Widgets (the shard selector is applied: `shardInfo` echoed), so kiln's
/// filter at ingest has next to nothing to drop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shares_hold_with_the_sharded_list_and_watch_gate_on() {
    let mut opts = ControlPlaneOptions::new(Binaries::locate(&Binaries::default_source()).unwrap());
    opts.apiserver_args = vec!["--feature-gates=ShardedListAndWatch=true".to_string()];
    let cp = ControlPlane::start(opts).await.unwrap();
    let group = Group::start_on(cp.kubeconfig_yaml().to_string(), Some(cp), "shard-gate", 3).await;
    group.set_values("v1").await;
    group.converged("v1").await;
    group.settled(&[0, 1, 2]).await;
    let writers = group.each_written_by_its_owner().await;
    for r in &group.replicas {
        assert!(
            writers.values().any(|m| *m == r.manager),
            "{} wrote nothing",
            r.manager
        );
    }
    group.primaries_add_up(&[0, 1, 2]).await;
    for i in 0..3 {
        let (served, dropped) = group.widget_filtering(i).await;
        assert_eq!(served, Some(1.0), "kiln-r{i}: the server's sharded list");
        eprintln!("kiln-r{i} dropped {dropped} Widgets with the gate on");
        assert!(
            dropped < (PRIMARIES / 10) as f64,
            "kiln-r{i} dropped {dropped} Widgets: the server sent more than its share"
        );
    }
    // A selector the API server cannot parse is refused; the list is sent
    // again without it, so nothing is lost, and the selector is dropped.
    let served = Arc::new(kiln::shard::server::Served::default());
    let refused = kiln::shard::server::client_with(
        group.client.clone(),
        "shardRange(object.metadata.name, '0x0', '0x1')".to_string(),
        u64::MAX,
        served.clone(),
    );
    let all = group
        .widgets_through(refused)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(
        all.items.len(),
        PRIMARIES,
        "a refused selector lost objects"
    );
    assert!(served.refused(), "the refusal was not noted");
    group.no_double_writes();
    group.end().await;
}

/// A uid whose bucket is in `set`.
fn uid_in(set: ring::Buckets) -> String {
    (0u64..)
        .map(|i| format!("00000000-0000-4000-8000-{i:012}"))
        .find(|uid| ring::contains(set, ring::bucket_of(uid)))
        .unwrap()
}

/// An object kiln's labels were copied onto, naming as its primary a uid
/// of another replica's share, holds the name a child of this replica's
/// primary would take. This replica's cache left it out, yet kiln neither
/// rewrites nor adopts it: the name was noted as left out, so the child
/// is looked up on the API server before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_name_held_by_an_object_of_another_share_is_not_taken_over() {
    let group = Group::bare("shard-decoy", 2).await;
    group.settled(&[0, 1]).await;
    let members = vec!["kiln-r0".to_string(), "kiln-r1".to_string()];
    let theirs = uid_in(ring::assigned("kiln-r1", &members));
    let cms: Api<ConfigMap> = Api::namespaced(group.client.clone(), group.ns());
    let names: Vec<String> = (0..12).map(|i| format!("d{i}")).collect();
    for name in &names {
        let decoy: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {
                "kiln.dev/rule": "widgets",
                "kiln.dev/child": "main",
                "kiln.dev/owner-uid": theirs,
            }},
            "data": {"value": "the user's"},
        }))
        .unwrap();
        cms.create(&Default::default(), &decoy).await.unwrap();
    }
    // Widgets of those names, and one whose child's name is free.
    let pp = PatchParams::apply("shard-test").force();
    for name in names.iter().chain([&"free".to_string()]) {
        let w: DynamicObject =
            serde_json::from_value(widget(name, json!({"value": "kiln's"}))).unwrap();
        group
            .widgets()
            .patch(name, &pp, &Patch::Apply(&w))
            .await
            .unwrap();
    }
    eventually("the free name's child", CONVERGE, || async {
        let cm = cms.get_opt("free").await.ok()??;
        (cm.data?.get("value")? == "kiln's").then_some(())
    })
    .await;
    // Every Widget was reconciled: its status shows the value written, or
    // a condition saying why nothing was.
    let widgets = group.widgets();
    eventually("every Widget reconciled", CONVERGE, || async {
        for name in &names {
            let w = widgets.get(name).await.ok()?;
            let status = &w.data["status"];
            let done = status["value"].is_string()
                || status["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["message"].as_str().is_some_and(|m| m.contains("exists")))
                });
            if !done {
                return None;
            }
        }
        Some(())
    })
    .await;
    for name in &names {
        let cm = cms.get(name).await.unwrap();
        assert_eq!(
            cm.data
                .as_ref()
                .and_then(|d| d.get("value"))
                .map(String::as_str),
            Some("the user's"),
            "{name} was rewritten"
        );
        assert!(
            data_owners(&cm).is_empty(),
            "{name} was written by {:?}",
            data_owners(&cm)
        );
        assert!(cm.owner_references().is_empty(), "{name} was adopted");
    }
    // The decoys of Widgets in kiln-r0's share were left out of its cache:
    // each was looked up (and found) before kiln-r0 would write it.
    let buckets = group.buckets().await;
    let owners = Group::expected_writers(&buckets, 2);
    let r0 = names.iter().filter(|n| owners[*n] == "kiln-r0").count();
    assert!(r0 > 0, "no Widget fell in kiln-r0's share: {owners:?}");
    let looked = group.replicas[0]
        .kiln
        .metric("kiln_shard_lookups_total ")
        .await
        .unwrap_or(0.0);
    assert!(
        looked >= r0 as f64,
        "kiln-r0 looked up {looked} children, fewer than its {r0} decoys"
    );
    group.end().await;
}

/// A rule that counts, for each Secret labelled `counter: "yes"`, the
/// children the `widgets` rule made, in a ConfigMap of its own.
const COUNTER_RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: counter}
spec:
  for:
    apiVersion: v1
    kind: Secret
    selector: {matchLabels: {counter: "yes"}}
  watches:
    - name: made
      apiVersion: v1
      kind: ConfigMap
      selector: {matchLabels: {kiln.dev/rule: widgets}}
  children:
    - id: count
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-count"}
        data: {made: "n{{ related.made | length }}"}
"#;

/// A rule reading (`watches`) the children another rule made reads them
/// all, whichever replica's share their primaries are in: the kind it
/// reads is cached in full on every replica, never only the share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_reading_another_rule_s_children_sees_them_all() {
    let rules = format!("{WIDGET_RULE}\n---\n{COUNTER_RULE}");
    let group = Group::bare_with("shard-read", 2, &rules).await;
    group.settled(&[0, 1]).await;
    let pp = PatchParams::apply("shard-test").force();
    let names: Vec<String> = (0..16).map(|i| format!("w{i}")).collect();
    for name in &names {
        let w: DynamicObject = serde_json::from_value(widget(name, json!({"value": "v"}))).unwrap();
        group
            .widgets()
            .patch(name, &pp, &Patch::Apply(&w))
            .await
            .unwrap();
    }
    let owners = Group::expected_writers(&group.buckets().await, 2);
    assert!(
        ["kiln-r0", "kiln-r1"]
            .iter()
            .all(|m| owners.values().any(|o| o == m)),
        "all 16 Widgets fell in one share: {owners:?}"
    );
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(group.client.clone(), group.ns());
    for name in ["c0", "c1", "c2", "c3"] {
        let s: k8s_openapi::api::core::v1::Secret = serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {"counter": "yes"}}}),
        )
        .unwrap();
        secrets.create(&Default::default(), &s).await.unwrap();
    }
    // Every counter, whichever replica holds it, counts all 16 children,
    // and a child made or pruned in either share.
    let cms: Api<ConfigMap> = Api::namespaced(group.client.clone(), group.ns());
    counted(&cms, 16).await;
    for (extra, n) in [(true, 17), (false, 16)] {
        let w: DynamicObject =
            serde_json::from_value(widget("w0", json!({"value": "v", "extra": extra}))).unwrap();
        group
            .widgets()
            .patch("w0", &pp, &Patch::Apply(&w))
            .await
            .unwrap();
        counted(&cms, n).await;
    }
    group.end().await;
}

/// Waits until each of the four counters says `n`.
async fn counted(cms: &Api<ConfigMap>, n: usize) {
    eventually(&format!("every counter to count {n}"), CONVERGE, || async {
        for name in ["c0", "c1", "c2", "c3"] {
            let cm = cms.get_opt(&format!("{name}-count")).await.ok()??;
            if *cm.data?.get("made")? != format!("n{n}") {
                return None;
            }
        }
        Some(())
    })
    .await;
}
