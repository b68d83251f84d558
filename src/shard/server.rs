//! The API server's sharded list and watch (KEP-5866, alpha in Kubernetes
//! 1.36 behind the `ShardedListAndWatch` gate): a list or watch may carry
//! `shardSelector=shardRange(object.metadata.uid, '0x…', '0x…') || …`, and
//! the server then sends only the objects whose uid's 64-bit FNV-1a hash
//! falls in one of the ranges (a bucket is one such range, see
//! [`super::ring`]). A server without the gate ignores the parameter, so
//! kiln keeps its own filter at ingest either way and only notes which one
//! did the work: a list the server filtered echoes the selector in
//! `metadata.shardInfo` — for built-in kinds only: in 1.36 the custom
//! resources' list type (`UnstructuredList`) has no `SetShardInfo`, so a
//! filtered list of custom resources comes back without it. A list is
//! therefore judged filtered when it echoes `shardInfo`, or when it holds
//! objects and none outside the share; not filtered when it holds one
//! outside.
//!
//! kube 5's `ListParams` and `WatchParams` have no `shardSelector`: the
//! parameter is added by a client whose service rewrites each request's
//! query ([`client`]), so kube's watcher (re-lists, bookmarks, backoff) is
//! used unchanged.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;

use super::ring::{self, Buckets};

/// The query parameter (`metav1.ListOptions.ShardSelector`).
pub const PARAM: &str = "shardSelector";

/// The selector for the primaries in `set`: one `shardRange` per run of
/// adjacent buckets, joined by `||`. `None` when `set` is empty (no
/// selector says "nothing") or whole (nothing to select).
pub fn selector(set: Buckets) -> Option<String> {
    if set == 0 || set == u64::MAX {
        return None;
    }
    let ranges: Vec<String> = ring::ranges(set)
        .into_iter()
        .map(|(start, end)| {
            // The server compares 16-digit hex strings; 2^64 has 17.
            let end = end.map_or_else(|| "0x10000000000000000".to_string(), hex);
            format!("shardRange(object.metadata.uid, '{}', '{end}')", hex(start))
        })
        .collect();
    Some(ranges.join(" || "))
}

fn hex(v: u64) -> String {
    format!("0x{v:016x}")
}

/// `uri` with `shardSelector=<selector>` added to its query.
pub fn with_selector(uri: &http::Uri, selector: &str) -> Result<http::Uri, http::Error> {
    let path = uri.path();
    let param = format!("{PARAM}={}", encode(selector));
    let pq = match uri.query() {
        Some(q) if !q.is_empty() => format!("{path}?{q}&{param}"),
        _ => format!("{path}?{param}"),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(pq.parse()?);
    Ok(http::Uri::from_parts(parts)?)
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Whether the API server filtered a list response (`body`) to `share`:
/// `Some(true)` when it echoes `shardInfo` or holds objects all in the
/// share, `Some(false)` when it holds one outside, `None` when it cannot
/// tell (empty, unreadable).
pub fn filtered(body: &[u8], share: Buckets) -> Option<bool> {
    #[derive(serde::Deserialize)]
    struct List {
        metadata: Option<Meta>,
        #[serde(default)]
        items: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(rename = "shardInfo")]
        shard_info: Option<serde::de::IgnoredAny>,
        uid: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Item {
        metadata: Option<Meta>,
    }
    let list: List = serde_json::from_slice(body).ok()?;
    if list.metadata.is_some_and(|m| m.shard_info.is_some()) {
        return Some(true);
    }
    let uids: Vec<String> = list
        .items
        .into_iter()
        .filter_map(|i| i.metadata?.uid)
        .collect();
    if uids.is_empty() {
        return None;
    }
    Some(
        uids.iter()
            .all(|uid| ring::contains(share, ring::bucket_of(uid))),
    )
}

/// Whether a response refuses the shard selector: a 400, or an error that
/// names it (1.36 answers a selector it cannot parse with a 500 "invalid
/// shard selector").
fn refusal(status: http::StatusCode, body: &[u8]) -> bool {
    status == http::StatusCode::BAD_REQUEST
        || (status.is_server_error()
            && String::from_utf8_lossy(body)
                .to_ascii_lowercase()
                .contains("shard selector"))
}

/// What the last list of a kind showed of the server's filtering.
#[derive(Debug, Default)]
pub struct Served(AtomicU8);

impl Served {
    const UNKNOWN: u8 = 0;
    const NO: u8 = 1;
    const YES: u8 = 2;
    const REFUSED: u8 = 3;

    /// `Some(true)`: the server applied the selector on the last list;
    /// `Some(false)`: it ignored or refused it (kiln's own filter did the
    /// work); `None`: no list with a selector yet.
    pub fn get(&self) -> Option<bool> {
        match self.0.load(Ordering::Relaxed) {
            Self::UNKNOWN => None,
            v => Some(v == Self::YES),
        }
    }

    /// Whether the server refused the selector (it is no longer sent).
    pub fn refused(&self) -> bool {
        self.0.load(Ordering::Relaxed) == Self::REFUSED
    }

    fn set(&self, served: bool) {
        let v = if served { Self::YES } else { Self::NO };
        self.0.store(v, Ordering::Relaxed);
    }

    fn refuse(&self) {
        self.0.store(Self::REFUSED, Ordering::Relaxed);
    }
}

/// A client like `base` that asks for the objects of `share` only (adds
/// its [`selector`] to every request), and notes in `served` whether each
/// list came back filtered; `None` when `share` has no selector.
pub fn client(base: Client, share: Buckets, served: Arc<Served>) -> Option<Client> {
    Some(client_with(base, selector(share)?, share, served))
}

/// [`client`] with the selector given: a list the API server refuses
/// with it (400 Bad Request: a server whose grammar differs) is sent again
/// without it, and so is every request after; kiln's filter at ingest
/// does the work then.
pub fn client_with(base: Client, selector: String, share: Buckets, served: Arc<Served>) -> Client {
    let namespace = base.default_namespace().to_string();
    let service = tower::service_fn(move |request: http::Request<Body>| {
        let (base, selector, served) = (base.clone(), selector.clone(), served.clone());
        async move {
            if served.refused() {
                return base.send(request).await;
            }
            let (mut parts, body) = request.into_parts();
            let watch = parts
                .uri
                .query()
                .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
            let plain = (parts.clone(), body.try_clone());
            parts.uri = with_selector(&parts.uri, &selector).map_err(kube::Error::HttpError)?;
            let response = base.send(http::Request::from_parts(parts, body)).await?;
            if watch {
                return Ok::<_, kube::Error>(response);
            }
            let (head, body) = response.into_parts();
            let bytes = body.collect().await?.to_bytes();
            if refusal(head.status, &bytes)
                && let (parts, Some(body)) = plain
            {
                tracing::warn!(%selector, "the API server refused the shard selector; kiln filters at ingest");
                served.refuse();
                return base.send(http::Request::from_parts(parts, body)).await;
            }
            if !head.status.is_success() {
                return Ok(http::Response::from_parts(head, Body::from(bytes)));
            }
            if let Some(verdict) = filtered(&bytes, share) {
                if served.get() != Some(verdict) {
                    tracing::info!(%selector, served = verdict, "the API server's sharded list: {}",
                        if verdict { "applied" } else { "not served; kiln filters at ingest" });
                }
                served.set(verdict);
            }
            Ok(http::Response::from_parts(head, Body::from(bytes)))
        }
    });
    Client::new(service, namespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_one_range_per_run_of_buckets_in_the_server_s_format() {
        assert_eq!(selector(0), None);
        assert_eq!(selector(u64::MAX), None);
        assert_eq!(
            selector(0b1011).unwrap(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x0800000000000000') \
             || shardRange(object.metadata.uid, '0x0c00000000000000', '0x1000000000000000')"
        );
        assert_eq!(
            selector(1 << 63).unwrap(),
            "shardRange(object.metadata.uid, '0xfc00000000000000', '0x10000000000000000')"
        );
    }

    #[test]
    fn a_refusal_is_a_400_or_an_error_naming_the_selector() {
        assert!(refusal(http::StatusCode::BAD_REQUEST, b""));
        assert!(refusal(
            http::StatusCode::INTERNAL_SERVER_ERROR,
            br#"{"message":"invalid shard selector: unsupported field path"}"#
        ));
        assert!(!refusal(
            http::StatusCode::INTERNAL_SERVER_ERROR,
            b"etcdserver: leader changed"
        ));
        assert!(!refusal(http::StatusCode::OK, b"shard selector"));
    }

    #[test]
    fn the_selector_is_added_to_the_query_encoded() {
        let uri: http::Uri = "/apis/g/v1/widgets?limit=500&resourceVersion=0"
            .parse()
            .unwrap();
        let out = with_selector(&uri, "shardRange(a, '0x0', '0x1') || b").unwrap();
        assert_eq!(
            out.to_string(),
            "/apis/g/v1/widgets?limit=500&resourceVersion=0&shardSelector=shardRange%28a%2C%20%270x0%27%2C%20%270x1%27%29%20%7C%7C%20b"
        );
        let bare: http::Uri = "/api/v1/configmaps".parse().unwrap();
        assert_eq!(
            with_selector(&bare, "x").unwrap().to_string(),
            "/api/v1/configmaps?shardSelector=x"
        );
    }

    fn uid_in(bucket: u32) -> String {
        (0..)
            .map(|i| format!("uid-{i}"))
            .find(|u| ring::bucket_of(u) == bucket)
            .unwrap_or_default()
    }

    #[test]
    fn a_list_is_judged_filtered_by_shard_info_or_by_its_items() {
        let share = 0b11;
        let list = |meta: &str, uids: &[String]| {
            let items: Vec<String> = uids
                .iter()
                .map(|u| format!(r#"{{"metadata":{{"uid":"{u}"}},"spec":{{}}}}"#))
                .collect();
            format!(
                r#"{{"kind":"PodList","metadata":{{"resourceVersion":"5"{meta}}},"items":[{}]}}"#,
                items.join(",")
            )
        };
        let echoed = list(r#","shardInfo":{"selector":"x"}"#, &[uid_in(9)]);
        assert_eq!(filtered(echoed.as_bytes(), share), Some(true));
        let mine = list("", &[uid_in(0), uid_in(1)]);
        assert_eq!(filtered(mine.as_bytes(), share), Some(true));
        let mixed = list("", &[uid_in(0), uid_in(9)]);
        assert_eq!(filtered(mixed.as_bytes(), share), Some(false));
        assert_eq!(filtered(list("", &[]).as_bytes(), share), None);
        assert_eq!(filtered(b"not json", share), None);
    }
}
