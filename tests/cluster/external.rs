//! External sources against a stand-in cloud API on loopback (opened by the
//! test-only setting): the shipped EC2 example waits while its VPC is
//! Pending, asking again every interval, and makes its children once it is
//! Available; a 500, a timeout, an oversize answer and a redirect each
//! leave those children exactly as they are.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::support::rule_from_yaml;
use crate::support::scene::{CONVERGE, Scene, condition, configmap};

/// How the stand-in answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Pending,
    Available,
    Error,
    Slow,
    Oversize,
    Redirect,
}

/// A stand-in of the cloud API: `GET /v1/vpcs/<id>` as `mode` says.
struct CloudApi {
    addr: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    requests: Arc<AtomicUsize>,
}

impl CloudApi {
    async fn start(mode: Mode) -> Self {
        // Not 127.0.0.1: the test control plane's API server is there.
        let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mode = Arc::new(Mutex::new(mode));
        let requests = Arc::new(AtomicUsize::new(0));
        let (m, r) = (mode.clone(), requests.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (m, r) = (m.clone(), r.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req| answer(req, *m.lock().unwrap(), r.clone()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            addr,
            mode,
            requests,
        }
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Waits until the stand-in has been asked `more` times after now.
    async fn asked_again(&self, more: usize) {
        let from = self.requests();
        crate::support::eventually("the source to be asked again", CONVERGE, || async {
            (self.requests() >= from + more).then_some(())
        })
        .await;
    }
}

async fn answer(
    req: http::Request<hyper::body::Incoming>,
    mode: Mode,
    requests: Arc<AtomicUsize>,
) -> Result<http::Response<Full<Bytes>>, Infallible> {
    requests.fetch_add(1, Ordering::SeqCst);
    let id = req
        .uri()
        .path()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let vpc =
        |state: &str| json!({"id": id, "state": state, "subnets": ["subnet-9f8e"]}).to_string();
    let res = http::Response::builder();
    let res = match mode {
        Mode::Pending => res.body(Full::new(Bytes::from(vpc("Pending")))),
        Mode::Available => res.body(Full::new(Bytes::from(vpc("Available")))),
        Mode::Error => res
            .status(500)
            .body(Full::new(Bytes::from(vpc("Available")))),
        Mode::Slow => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            res.body(Full::new(Bytes::from(vpc("Available"))))
        }
        Mode::Oversize => {
            let big = json!({"id": id, "state": "Available", "subnets": ["subnet-9f8e"], "pad": "x".repeat(8192)});
            res.body(Full::new(Bytes::from(big.to_string())))
        }
        Mode::Redirect => res
            .status(302)
            .header("location", "http://169.254.169.254/latest/meta-data/")
            .body(Full::new(Bytes::new())),
    };
    Ok(res.unwrap())
}

/// The shipped example's rule, asking the stand-in every second, giving
/// up after one, reading at most 2 KiB.
fn example_rule(api: &CloudApi) -> Arc<kiln::rules::Rule> {
    let text = std::fs::read_to_string("examples/ported/ec2-instance/rule.yaml").unwrap();
    let text = text
        .replace(
            "https://ec2.cloud.example.com/v1/vpcs",
            &format!("http://{}/v1/vpcs", api.addr),
        )
        .replace(
            "      secretRef: {namespace: kiln-system, name: cloud-api}\n",
            "      timeout: 1s\n      maxBytes: 2048\n",
        )
        .replace("interval: 30s", "interval: 1s");
    assert!(
        text.contains("timeout: 1s") && text.contains("127.0.0.2"),
        "{text}"
    );
    rule_from_yaml(&text)
}

fn instance(instance_type: &str) -> Value {
    json!({"apiVersion": "cloud.example.com/v1", "kind": "Instance",
        "metadata": {"name": "web"},
        "spec": {"vpcId": "vpc-0a1b2c3d", "passwordSecret": "web-password", "instanceType": instance_type}})
}

fn instance_at() -> (&'static str, &'static str, &'static str) {
    ("cloud.example.com/v1", "Instance", "web")
}

async fn scene(api: &CloudApi, prefix: &str) -> Scene {
    let scene = Scene::new(prefix)
        .await
        .with_crds("examples/ported/ec2-instance")
        .await
        .with_loopback_egress()
        .await;
    scene
        .apply(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "web-password"}, "stringData": {"password": "p"}}))
        .await;
    scene.apply(instance("t3.micro")).await;
    scene.running(&[example_rule(api)]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_waits_while_its_vpc_is_pending_and_is_made_once_available() {
    let api = CloudApi::start(Mode::Pending).await;
    let scene = scene(&api, "ext-wait").await;
    let waiting = scene
        .until("the Instance to wait for its VPC", instance_at(), |i| {
            condition(i, "Waiting")["reason"] == "ExternalNotReady"
        })
        .await;
    let message = condition(&waiting, "Waiting")["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("external.vpc (GET http://127.0.0.2:"),
        "{message}"
    );
    assert!(message.contains("/v1/vpcs/vpc-0a1b2c3d"), "{message}");
    assert!(
        message.contains("waiting until `external.vpc.state == 'Available'`"),
        "{message}"
    );
    assert!(
        message.contains(r#""state":"Pending""#) && message.contains("s ago"),
        "{message}"
    );
    // It asks again at the source's interval, and makes nothing meanwhile.
    api.asked_again(2).await;
    assert!(scene.get("v1", "ConfigMap", "web-launch").await.is_none());

    api.set(Mode::Available);
    let launch = scene
        .until("the launch configuration", configmap("web-launch"), |c| {
            c["data"]["vpc"] == "vpc-0a1b2c3d"
        })
        .await;
    assert_eq!(launch["data"]["subnet"], "subnet-9f8e");
    scene
        .until("the Instance to say Available", instance_at(), |i| {
            i["status"]["vpcState"] == "Available" && condition(i, "Ready")["status"] == "True"
        })
        .await;
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_a_timeout_an_oversize_answer_and_a_redirect_leave_the_children_untouched() {
    let api = CloudApi::start(Mode::Available).await;
    let scene = scene(&api, "ext-fail").await;
    scene
        .until("the launch configuration", configmap("web-launch"), |c| {
            c["data"]["instanceType"] == "t3.micro"
        })
        .await;
    for (i, (mode, says)) in [
        (Mode::Error, "answered 500"),
        (Mode::Slow, "no answer within 1s"),
        (Mode::Oversize, "larger than 2048 bytes"),
        (Mode::Redirect, "redirects are not followed"),
    ]
    .into_iter()
    .enumerate()
    {
        api.set(mode);
        let failing = scene
            .until(
                &format!("the Instance to say why ({mode:?})"),
                instance_at(),
                |o| {
                    let ready = condition(o, "Ready");
                    ready["reason"] == "ExternalUnavailable"
                        && ready["message"].as_str().is_some_and(|m| m.contains(says))
                },
            )
            .await;
        assert_eq!(condition(&failing, "Waiting")["status"], "True");
        let message = condition(&failing, "Ready")["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            !message.contains("meta-data"),
            "a redirect's path is not shown: {message}"
        );
        // The Instance changes: with no answer to use, not even the change
        // that needs none reaches the child.
        let before = scene.get("v1", "ConfigMap", "web-launch").await.unwrap();
        let wanted = format!("t3.large-{i}");
        scene.apply(instance(&wanted)).await;
        // Asked again twice (backoff; the reconcile after the first is
        // done by the second) and still failing: the child is as it was.
        api.asked_again(2).await;
        let after = scene.get("v1", "ConfigMap", "web-launch").await.unwrap();
        assert_eq!(
            after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
            "{mode:?} changed the child"
        );
        // Once the source answers again, the child follows the Instance.
        api.set(Mode::Available);
        scene
            .until(
                &format!("the child to follow after {mode:?}"),
                configmap("web-launch"),
                |c| c["data"]["instanceType"] == wanted.as_str(),
            )
            .await;
    }
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_test_setting_loopback_is_refused_and_nothing_is_made() {
    let api = CloudApi::start(Mode::Available).await;
    // The default policy: loopback refused (as are link-local, metadata and
    // the API server); the rule's own `allow` does not name it.
    let scene = Scene::new("ext-refused")
        .await
        .with_crds("examples/ported/ec2-instance")
        .await;
    scene
        .apply(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "web-password"}, "stringData": {"password": "p"}}))
        .await;
    scene.apply(instance("t3.micro")).await;
    let scene = scene.running(&[example_rule(&api)]).await;
    let refused = scene
        .until(
            "the Instance to say the address is refused",
            instance_at(),
            |o| {
                let ready = condition(o, "Ready");
                ready["reason"] == "ExternalUnavailable"
                    && ready["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("address 127.0.0.2 is refused: loopback"))
            },
        )
        .await;
    assert_eq!(condition(&refused, "Waiting")["status"], "True");
    assert_eq!(api.requests(), 0, "no connection was made");
    assert!(scene.get("v1", "ConfigMap", "web-launch").await.is_none());
    scene.end().await;
}
