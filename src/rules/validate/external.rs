//! `external`: each source's destination must be literal and safe to
//! parse; what a primary may fill (path segments, query values, a POST
//! body) is compiled as templates that see only `self` and `rule`.

use std::time::Duration;

use super::*;
use crate::egress::client::RESERVED_HEADERS;
use crate::egress::{AllowList, Cidr, Destination, Limits, Method};
use crate::rules::external::{
    DEFAULT_INTERVAL, DEFAULT_MIN_INTERVAL, External, MIN_INTERVAL, SecretRef,
};
use crate::rules::spec::RawExternal;
use crate::template::tree::is_template;

impl<'a> Checker<'a> {
    pub(super) fn externals(&mut self) -> Vec<External> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, e) in self.raw.spec.external.iter().enumerate() {
            let at = vec![key("spec"), key("external"), Step::Index(i)];
            self.unique_identifier(
                &[at.as_slice(), &[key("name")]].concat(),
                &mut seen,
                "external source name",
                &e.name,
                "external.<name>",
            );
            if let Some(source) = self.external(&at, e) {
                out.push(source);
            }
        }
        out
    }

    fn external(&mut self, at: &[Step], e: &RawExternal) -> Option<External> {
        let with = |k: &str| [at, &[key(k)]].concat();
        let destination = self.destination(&with("url"), &e.url);
        let method = self.method(at, e);
        // A request is found from the primary alone.
        let scope = Scope {
            roots: &["self", "rule"],
        };
        let (path, query) = self.fills(at, e, &scope);
        self.headers(&with("headers"), e);
        let body = e
            .body
            .as_ref()
            .and_then(|b| self.tree(&with("body"), b, &scope, &[], &[]));
        let allow = self.allow(&with("allow"), &e.allow);
        let limits = self.limits(at, e);
        let (interval, min_interval, last_good) = self.timing(at, e);
        let ready_scope = Scope {
            roots: &["self", "rule", "external"],
        };
        let ready_when = e
            .ready_when
            .as_ref()
            .and_then(|r| self.expr(&with("readyWhen"), r, &ready_scope, &[], &[]));
        let secret = self.secret(at, e);
        Some(External {
            name: e.name.clone(),
            method: method?,
            destination: Arc::new(destination?),
            path,
            query,
            headers: e
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            body,
            secret,
            allow,
            limits,
            interval,
            min_interval,
            ready_when,
            last_good,
        })
    }

    fn method(&mut self, at: &[Step], e: &RawExternal) -> Option<Method> {
        let with = |k: &str| [at, &[key(k)]].concat();
        let method = match e.method.as_deref().unwrap_or("GET") {
            "GET" => Some(Method::Get),
            "POST" => Some(Method::Post),
            other => {
                self.error(
                    &with("method"),
                    format!("method `{other}` is not GET or POST"),
                );
                None
            }
        };
        if e.body.is_some() && method != Some(Method::Post) {
            self.error(&with("body"), "a body is sent with `method: POST` only");
        }
        method
    }

    /// The path segments and query values a primary fills.
    fn fills(
        &mut self,
        at: &[Step],
        e: &RawExternal,
        scope: &Scope<'_>,
    ) -> (Vec<Piece>, Vec<(String, Piece)>) {
        let with = |k: &str| [at, &[key(k)]].concat();
        let mut path = Vec::new();
        for (j, segment) in e.path.iter().enumerate() {
            let here = [with("path").as_slice(), &[Step::Index(j)]].concat();
            path.extend(self.piece(&here, segment, scope, &[], &[]));
        }
        let mut query = Vec::new();
        for (name, value) in &e.query {
            let here = [with("query").as_slice(), &[key(name)]].concat();
            if is_template(name) {
                self.error(
                    &here,
                    "a query parameter's name is literal (its value may be a template)",
                );
            }
            if let Some(piece) = self.piece(&here, value, scope, &[], &[]) {
                query.push((name.clone(), piece));
            }
        }
        (path, query)
    }

    /// `interval`, `minInterval` and `lastGood.maxAge`.
    fn timing(&mut self, at: &[Step], e: &RawExternal) -> (Duration, Duration, Option<Duration>) {
        let with = |k: &str| [at, &[key(k)]].concat();
        let interval = self
            .bounded_duration(&with("interval"), e.interval.as_ref(), DEFAULT_INTERVAL)
            .max(MIN_INTERVAL);
        let min_interval = self.bounded_duration(
            &with("minInterval"),
            e.min_interval.as_ref(),
            DEFAULT_MIN_INTERVAL,
        );
        let last_good = e.last_good.as_ref().map(|l| {
            let here = [with("lastGood").as_slice(), &[key("maxAge")]].concat();
            self.bounded_duration(&here, Some(&l.max_age), Duration::ZERO)
        });
        (interval, min_interval, last_good)
    }

    fn secret(&mut self, at: &[Step], e: &RawExternal) -> Option<SecretRef> {
        let s = e.secret_ref.as_ref()?;
        let here = [at, &[key("secretRef")]].concat();
        for (field, v) in [("namespace", &s.namespace), ("name", &s.name)] {
            if let Err(why) = dns_subdomain(v) {
                self.error(
                    &[here.as_slice(), &[key(field)]].concat(),
                    format!("`{v}` {why}"),
                );
                return None;
            }
        }
        Some(SecretRef {
            namespace: s.namespace.clone(),
            name: s.name.clone(),
        })
    }

    fn destination(&mut self, at: &[Step], url: &str) -> Option<Destination> {
        if is_template(url) {
            self.error(
                at,
                "the url is literal: a primary's values go in `path` and `query`, never in the destination",
            );
            return None;
        }
        match Destination::parse(url) {
            Ok(d) => Some(d),
            Err(why) => {
                self.error(at, format!("url `{}`: {why}", url.escape_debug()));
                None
            }
        }
    }

    fn headers(&mut self, at: &[Step], e: &RawExternal) {
        for (name, value) in &e.headers {
            let here = [at, &[key(name)]].concat();
            let lower = name.to_ascii_lowercase();
            if RESERVED_HEADERS.contains(&lower.as_str()) {
                self.error(
                    &here,
                    format!("header `{name}` is kiln's to set (credentials come from `secretRef`)"),
                );
            } else if http::HeaderName::try_from(name.as_str()).is_err()
                || http::HeaderValue::try_from(value.as_str()).is_err()
            {
                self.error(&here, format!("header `{name}` is not a valid HTTP header"));
            } else if is_template(value) {
                self.error(&here, "header values are literal");
            }
        }
    }

    fn allow(&mut self, at: &[Step], entries: &[String]) -> AllowList {
        let mut allow = AllowList::default();
        for (j, entry) in entries.iter().enumerate() {
            let here = [at, &[Step::Index(j)]].concat();
            if entry.starts_with(|c: char| c.is_ascii_digit()) || entry.contains(':') {
                match entry.parse::<Cidr>() {
                    Ok(c) => allow.cidrs.push(c),
                    Err(why) => self.error(&here, why.to_string()),
                }
            } else if Destination::parse(&format!("https://{entry}"))
                .is_ok_and(|d| d.host() == entry.to_ascii_lowercase())
            {
                allow.hosts.push(entry.to_ascii_lowercase());
            } else {
                self.error(
                    &here,
                    format!("`{entry}` is neither a CIDR nor a host name"),
                );
            }
        }
        allow
    }

    fn limits(&mut self, at: &[Step], e: &RawExternal) -> Limits {
        let with = |k: &str| [at, &[key(k)]].concat();
        let timeout = self.bounded_duration(
            &with("timeout"),
            e.timeout.as_ref(),
            Limits::DEFAULT_TIMEOUT,
        );
        if timeout > Limits::MAX_TIMEOUT || timeout.is_zero() {
            self.error(&with("timeout"), "a timeout is more than 0 and at most 60s");
        }
        let max_bytes = e.max_bytes.unwrap_or(Limits::DEFAULT_MAX_BODY);
        if max_bytes == 0 || max_bytes > Limits::MAX_MAX_BODY {
            self.error(
                &with("maxBytes"),
                format!("maxBytes is from 1 to {} (8 MiB)", Limits::MAX_MAX_BODY),
            );
        }
        Limits::bounded(timeout, max_bytes)
    }

    fn bounded_duration(
        &mut self,
        at: &[Step],
        text: Option<&crate::rules::spec::DurationText>,
        default: Duration,
    ) -> Duration {
        let Some(text) = text else { return default };
        match duration::parse(&text.0) {
            Ok(d) => d,
            Err(why) => {
                self.error(at, why);
                default
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::rules::load::Source;

    fn refusals(external: &str) -> Vec<String> {
        let text = format!(
            "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: r}}\nspec:\n  for: {{apiVersion: v1, kind: ConfigMap}}\n  external:\n{external}"
        );
        let source = Source {
            file: "rule.yaml".into(),
            text,
        };
        match crate::rules::load_sources(vec![source]) {
            Ok(_) => Vec::new(),
            Err(d) => d.into_iter().map(|d| d.message).collect(),
        }
    }

    #[test]
    fn a_destination_a_primary_could_steer_is_refused() {
        for (source, says) in [
            (
                "    - {name: vpc, url: \"https://{{ self.spec.host }}/v1\"}\n",
                "the url is literal",
            ),
            (
                "    - {name: vpc, url: \"https://api.example.com/{{ self.spec.p }}\"}\n",
                "the url is literal",
            ),
            (
                "    - {name: vpc, url: \"https://a@evil.example\"}\n",
                "user or password",
            ),
            (
                "    - {name: vpc, url: \"https://2130706433/\"}\n",
                "not a host name",
            ),
            (
                "    - {name: vpc, url: \"file:///etc/passwd\"}\n",
                "https:// or http://",
            ),
            (
                "    - {name: vpc, url: \"https://a.example\", headers: {Authorization: x}}\n",
                "is kiln's to set",
            ),
            (
                "    - {name: vpc, url: \"https://a.example\", headers: {X-A: \"{{ self.x }}\"}}\n",
                "header values are literal",
            ),
            (
                "    - {name: vpc, url: \"https://a.example\", allow: [\"10.0.0.1/8\"]}\n",
                "bits set below",
            ),
            (
                "    - {name: vpc, url: \"https://a.example\", timeout: 5m}\n",
                "at most 60s",
            ),
            (
                "    - {name: vpc, url: \"https://a.example\", path: [\"{{ related.x }}\"]}\n",
                "unknown variable `related`",
            ),
            (
                "    - {name: vpc, url: \"https://a.example\", body: {a: 1}}\n",
                "`method: POST` only",
            ),
        ] {
            let got = refusals(source);
            assert!(got.iter().any(|m| m.contains(says)), "{source}: {got:?}");
        }
    }

    #[test]
    fn a_literal_destination_with_filled_segments_is_taken() {
        let ok = "    - name: vpc\n      url: https://api.example.com:8443/v1/vpcs\n      path: [\"{{ self.metadata.name }}\"]\n      query: {region: \"{{ self.metadata.namespace }}\"}\n      allow: [10.0.0.5/32, internal.example]\n      readyWhen: \"external.vpc.state == 'ok'\"\n";
        assert_eq!(refusals(ok), Vec::<String>::new());
    }
}
