//! A source's request for one primary: the rule author's literal
//! destination, with the path segments, query values and POST body
//! rendered from the primary. The key of the shared cache is the request
//! as rendered, so every primary that makes the same request shares one
//! answer.

use std::sync::Arc;

use minijinja::Value as JinjaValue;

use crate::egress::{Method, Request, Tls};
use crate::rules::Rule;
use crate::rules::external::External;
use crate::template::Budget;

/// A rendered request (credentials are added when it is sent).
#[derive(Debug, Clone)]
pub struct Asked {
    /// The cache key: method, URL and body.
    pub key: String,
    /// What status shows: method and URL.
    pub shown: String,
    /// The request, without credentials.
    pub request: Request,
}

/// Renders `source`'s request for the primary in `ctx` (which holds `self`
/// and `rule`).
pub fn render(rule: &Rule, source: &External, ctx: &JinjaValue) -> Result<Asked, String> {
    let mut budget = Budget::default();
    let mut path = Vec::with_capacity(source.path.len());
    for piece in &source.path {
        path.push(
            piece
                .render_string(&rule.templates, ctx, &mut budget)
                .map_err(|e| e.to_string())?,
        );
    }
    let mut query = Vec::with_capacity(source.query.len());
    // What status shows: a value the rule author wrote (an API key, say)
    // is left out; a value rendered from the primary is the primary's.
    let mut shown_query = Vec::with_capacity(source.query.len());
    for (name, piece) in &source.query {
        let value = piece
            .render_string(&rule.templates, ctx, &mut budget)
            .map_err(|e| e.to_string())?;
        let shown = if piece.template().is_some() {
            value.clone()
        } else {
            "_".to_string()
        };
        shown_query.push((name.clone(), shown));
        query.push((name.clone(), value));
    }
    let body = match &source.body {
        Some(tree) => Some(
            tree.render(&rule.templates, ctx, &mut budget)
                .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    let url = source
        .destination
        .url(&path, &query)
        .map_err(|e| format!("external.{}: {e}", source.name))?;
    let shown_url = source
        .destination
        .url(&path, &shown_query)
        .map_err(|e| format!("external.{}: {e}", source.name))?;
    let method = source.method.as_str();
    let body_text = body.as_ref().map(|b| b.to_string()).unwrap_or_default();
    let request = Request {
        method: source.method,
        destination: Arc::clone(&source.destination),
        path,
        query,
        headers: source.headers.clone(),
        body: body.filter(|_| source.method == Method::Post),
        auth: crate::egress::Auth::None,
        tls: Tls::default(),
        allow: source.allow.clone(),
        limits: source.limits,
    };
    Ok(Asked {
        key: format!("{method} {url} {body_text}"),
        shown: format!("{method} {shown_url}"),
        request,
    })
}

/// Every source's request for the primary `this`, in the rule's order.
pub fn all(rule: &Rule, this: &JinjaValue) -> Vec<(usize, Result<Asked, String>)> {
    if rule.external.is_empty() {
        return Vec::new();
    }
    let ctx = minijinja::context! {
        self => this.clone(),
        rule => minijinja::context! { name => rule.name.clone() },
    };
    rule.external
        .iter()
        .enumerate()
        .map(|(i, s)| (i, render(rule, s, &ctx)))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn status_shows_the_primary_s_values_but_not_the_rule_author_s() {
        let rule = crate::rules::one_rule(
            r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: r}
spec:
  for: {apiVersion: v1, kind: ConfigMap}
  external:
    - name: vpc
      url: https://api.example.com/v1
      path: ["{{ self.data.vpc }}"]
      query: {key: s3cr3t-api-key, region: "{{ self.data.region }}"}
"#,
        );
        let this = crate::template::to_jinja(&json!({"data": {"vpc": "a/b", "region": "eu"}}));
        let (_, asked) = super::all(&rule, &this).remove(0);
        let asked = asked.unwrap();
        assert_eq!(
            asked.shown,
            "GET https://api.example.com/v1/a%2Fb?key=_&region=eu"
        );
        assert!(
            asked.key.contains("s3cr3t-api-key"),
            "the request itself keeps it"
        );
        assert_eq!(
            asked.request.query[0],
            ("key".into(), "s3cr3t-api-key".into())
        );
    }
}
