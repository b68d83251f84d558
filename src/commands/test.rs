//! `kiln test`: cases beside the rules (`*.test.yaml`), each an object and
//! what the engine should make of it, run offline through the same plan as
//! `kiln render` (`super::offline`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use kiln::engine::decision::Outcome;
use kiln::render::Inputs;
use kiln::template::generate::Draw;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::offline;
use super::render::{documents, load_rules_against};
use super::test_match::{Failure, compare, find_condition};
use crate::cli::TestArgs;

/// The JSON Schema of a test file, pretty-printed (what `kiln schema
/// --tests` prints and `rules/test.schema.json` holds).
pub fn json_schema() -> String {
    let schema = schemars::schema_for!(File);
    serde_json::to_string_pretty(&schema).unwrap_or_default()
}

/// A kiln test file (`*.test.yaml`): cases, each an object and what the
/// engine should make of it.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(title = "Kiln rule tests")]
#[serde(deny_unknown_fields)]
struct File {
    /// Rule files or directories, relative to the test file (default: the
    /// file of the same name without `.test`).
    #[serde(default)]
    rules: Vec<PathBuf>,
    /// CRD files whose schema defaults fill the primary.
    #[serde(default)]
    crds: Vec<PathBuf>,
    cases: Vec<Case>,
}

/// One case: the objects, and what is expected.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Case {
    name: String,
    /// Only this rule (default: every rule on the primary's kind).
    rule: Option<String>,
    /// The instant `now()` gives (default: the clock).
    now: Option<String>,
    primary: Option<Value>,
    primary_file: Option<PathBuf>,
    #[serde(default)]
    related: Map<String, Value>,
    #[serde(default)]
    observed: Map<String, Value>,
    /// What the rule's hook answers (no network): `response`, the JSON it
    /// returns, or `error`, why the call fails.
    hook: Option<Recorded>,
    /// Recorded answers of the rule's external sources, by name (no
    /// network: a source with none recorded fails, as an unreachable one).
    #[serde(default)]
    external: Map<String, Value>,
    #[serde(default)]
    expect: Expect,
}

/// A hook's recorded answer.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Recorded {
    /// The body the hook answers (`status`, `children`, `resyncAfterSeconds`,
    /// `finalized`).
    response: Option<Value>,
    /// Why the call fails (a timeout, a refused connection, a 500).
    error: Option<String>,
}

impl Recorded {
    /// What the engine makes of it, read as an answer from the network is.
    fn called(&self) -> anyhow::Result<kiln::hook::Called> {
        use kiln::hook::Called;
        use kiln::rules::hook::{MAX_BODY, MAX_CHILDREN};
        match (&self.response, &self.error) {
            (Some(response), None) => {
                let body = serde_json::to_vec(response)?;
                Ok(match kiln::hook::answer(&body, MAX_BODY, MAX_CHILDREN) {
                    Ok(answer) => Called::Answered(answer),
                    Err(e) => Called::Failed(format!("the hook answered: {e}")),
                })
            }
            (None, Some(error)) => Ok(Called::Failed(error.clone())),
            _ => bail!("hook: give exactly one of `response` and `error`"),
        }
    }
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Expect {
    /// Children rendered, each a partial object naming `kind` and `metadata.name`.
    #[serde(default)]
    children: Vec<Value>,
    /// Children that must not be rendered: `{kind, name}`.
    #[serde(default)]
    absent: Vec<Named>,
    /// Children deleted: `{kind, name}`.
    #[serde(default)]
    pruned: Vec<Named>,
    /// Status fields (partial).
    status: Option<Value>,
    /// Conditions (partial, found by `type`).
    #[serde(default)]
    conditions: Vec<Value>,
    /// A substring of the error the case must end in.
    error: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Named {
    kind: String,
    name: String,
}

/// What the plans of every rule made of one case.
#[derive(Default)]
struct Got {
    children: Vec<Value>,
    pruned: Vec<(String, String)>,
    status: Map<String, Value>,
    errors: Vec<String>,
}

/// A case's result: its failures (empty: it passed).
struct Outcomes {
    file: PathBuf,
    name: String,
    failures: Result<Vec<Failure>, String>,
}

/// Runs every case of the test files under the paths given.
pub fn run(args: &TestArgs) -> anyhow::Result<ExitCode> {
    let mut results = Vec::new();
    let mut bad = false;
    let mut unevaluated = std::collections::BTreeSet::new();
    for file in test_files(&args.paths)? {
        match run_file(&file, args.update, &mut unevaluated) {
            Ok(mut r) => results.append(&mut r),
            Err(e) => {
                eprintln!("ERROR {}: {e:#}", file.display());
                bad = true;
            }
        }
    }
    let (mut passed, mut failed) = (0, 0);
    for r in &results {
        match &r.failures {
            Ok(f) if f.is_empty() => {
                passed += 1;
                println!("PASS {}: {}", r.file.display(), r.name);
            }
            Ok(f) => {
                failed += 1;
                println!("FAIL {}: {}", r.file.display(), r.name);
                for failure in f {
                    println!("    {failure}");
                }
            }
            Err(e) => {
                bad = true;
                println!("ERROR {}: {}: {e}", r.file.display(), r.name);
            }
        }
    }
    if !unevaluated.is_empty() {
        let names: Vec<&str> = unevaluated.iter().map(String::as_str).collect();
        println!(
            "NOTE validations not evaluated offline: the CEL rules of the API(s) of rule(s) {} are checked by the API server on each write, not by kiln test",
            names.join(", ")
        );
    }
    println!("{passed} passed, {failed} failed");
    if let Some(junit) = &args.junit {
        std::fs::write(junit, super::test_match::junit(&junit_cases(&results)))
            .with_context(|| format!("writing {}", junit.display()))?;
    }
    Ok(if bad || results.is_empty() {
        ExitCode::from(2)
    } else if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn junit_cases(results: &[Outcomes]) -> Vec<(String, String, Option<String>)> {
    results
        .iter()
        .map(|r| {
            let failure = match &r.failures {
                Ok(f) if f.is_empty() => None,
                Ok(f) => Some(
                    f.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("\n"),
                ),
                Err(e) => Some(format!("bad input: {e}")),
            };
            (r.file.display().to_string(), r.name.clone(), failure)
        })
        .collect()
}

/// The test files: each file given, and the `*.test.yaml` of each directory.
fn test_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("reading {}", path.display()))?
                .flatten()
                .map(|e| e.path())
                .filter(|p| kiln::rules::load::is_test_file(p) && p.is_file())
                .collect();
            found.sort();
            files.extend(found);
        } else if path.is_file() {
            files.push(path.clone());
        } else {
            bail!("{}: no such file or directory", path.display());
        }
    }
    Ok(files)
}

/// Runs the cases of one test file; with `update`, writes their snapshots
/// instead of comparing with them.
/// Runs the cases of one test file; adds to `unevaluated` the rules whose
/// API carries CEL rules kiln cannot evaluate.
fn run_file(
    file: &Path,
    update: bool,
    unevaluated: &mut std::collections::BTreeSet<String>,
) -> anyhow::Result<Vec<Outcomes>> {
    let mut docs = documents(file)?;
    if docs.len() != 1 {
        bail!("expected one YAML document, found {}", docs.len());
    }
    let spec: File = serde_json::from_value(docs.remove(0)).context("not a test file")?;
    let dir = file.parent().unwrap_or(Path::new("."));
    let rules: Vec<PathBuf> = if spec.rules.is_empty() {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let stem = name
            .trim_end_matches(".yaml")
            .trim_end_matches(".yml")
            .trim_end_matches(".test");
        vec![dir.join(format!("{stem}.yaml"))]
    } else {
        spec.rules.iter().map(|p| dir.join(p)).collect()
    };
    let mut crds = Vec::new();
    for crd in &spec.crds {
        crds.extend(documents(&dir.join(crd))?);
    }
    let set = load_rules_against(&rules, &crds)?;
    for rule in &set.rules {
        if rule
            .api
            .as_deref()
            .is_some_and(kiln::api::Api::has_cel_rules)
        {
            unevaluated.insert(rule.name.clone());
        }
    }
    let snapshots = match update {
        true => None,
        false => super::test_snapshot::read(file)?,
    };
    if update || snapshots.is_some() {
        let mut names: Vec<&str> = spec.cases.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            bail!(
                "two cases are named `{}`: snapshots are kept by case name",
                w[0]
            );
        }
    }
    let mut made = Vec::new();
    let mut outcomes = Vec::new();
    for case in &spec.cases {
        let failures = run_case(&set, &crds, dir, case)
            .map(|got| {
                let snapshot = got.snapshot();
                let mut failures = check(&case.expect, &got);
                if let Some(s) = &snapshots {
                    failures.extend(super::test_snapshot::compare(s.get(&case.name), &snapshot));
                }
                made.push((case.name.clone(), snapshot));
                failures
            })
            .map_err(|e| format!("{e:#}"));
        outcomes.push(Outcomes {
            file: file.to_path_buf(),
            name: case.name.clone(),
            failures,
        });
    }
    if update {
        let written = super::test_snapshot::write(file, &made)?;
        println!("UPDATED {} ({} cases)", written.display(), made.len());
    }
    Ok(outcomes)
}

/// Runs one case through the plan of every rule that takes its primary.
fn run_case(
    set: &kiln::rules::RuleSet,
    crds: &[Value],
    dir: &Path,
    case: &Case,
) -> anyhow::Result<Got> {
    let given = primary_of(case, dir)?;
    let matching = offline::matching(set, &given, case.rule.as_deref());
    if matching.is_empty() {
        bail!(
            "no rule{} takes {}/{}",
            case.rule
                .as_ref()
                .map(|r| format!(" named `{r}`"))
                .unwrap_or_default(),
            given["apiVersion"].as_str().unwrap_or_default(),
            given["kind"].as_str().unwrap_or_default()
        );
    }
    let now = match &case.now {
        Some(s) => kiln::template::time::parse(s).map_err(|e| anyhow::anyhow!("now: {e}"))?,
        None => kiln::template::time::current(),
    };
    let hook = case.hook.as_ref().map(Recorded::called).transpose()?;
    let namespace = given["metadata"]["namespace"].as_str();
    let labels: std::collections::BTreeMap<String, String> =
        serde_json::from_value(given["metadata"]["labels"].clone()).unwrap_or_default();
    let mut got = Got::default();
    for rule in matching {
        if let Some(why) = rule.primary.refusal(namespace, &labels) {
            got.errors.push(format!(
                "rule `{}` does not select the primary: {why}",
                rule.name
            ));
            continue;
        }
        // Each rule reads the primary at its own version, as the API
        // server serves it.
        let primary = match offline::read_by(set, rule, crds, &given) {
            Ok(p) => p,
            Err(e) => {
                got.errors.push(format!("rule `{}`: {e}", rule.name));
                continue;
            }
        };
        let inputs = Inputs {
            primary,
            related: case.related.clone(),
            observed: case.observed.clone(),
            external: case.external.clone(),
            draw: Draw::Placeholder,
            now: Some(now),
            unserved: Vec::new(),
            hook: hook.clone(),
        };
        got.add(rule, &inputs, crds);
    }
    Ok(got)
}

/// The case's primary: given inline (`primary`) or as a file (`primaryFile`).
fn primary_of(case: &Case, dir: &Path) -> anyhow::Result<Value> {
    match (&case.primary, &case.primary_file) {
        (Some(p), None) => Ok(p.clone()),
        (None, Some(f)) => {
            let mut docs = documents(&dir.join(f))?;
            if docs.len() != 1 {
                bail!("{}: expected one object", f.display());
            }
            Ok(docs.remove(0))
        }
        _ => bail!("give exactly one of `primary` and `primaryFile`"),
    }
}

impl Got {
    /// Adds what the plan of `rule`, which selects the primary, makes of it.
    fn add(&mut self, rule: &kiln::rules::Rule, inputs: &Inputs, crds: &[Value]) {
        let inputs = offline::with_empty_selections(rule, inputs);
        let plan = match offline::decide(rule, &inputs) {
            Ok((rendered, plan)) => {
                self.children
                    .extend(rendered.children.into_iter().map(|c| c.object));
                plan
            }
            Err(plan) => *plan,
        };
        if !matches!(plan.status.outcome, Outcome::Applied { .. }) {
            self.errors.push(format!(
                "rule `{}`: {}",
                rule.name,
                super::verdict::lines(&plan, "").trim_end()
            ));
        }
        self.pruned.extend(
            plan.prune
                .iter()
                .map(|p| (p.gvk.kind.clone(), p.key.name.clone())),
        );
        // What the engine would not write is no status to expect.
        if let Some(schema) = offline::status_schema(rule, crds).schema {
            let patch = offline::status_patch(rule, &inputs.primary, &plan, &schema);
            if let Value::Object(status) = &patch["status"] {
                self.status.extend(status.clone());
            }
        }
    }
}

impl Got {
    /// What a snapshot holds of it: every child whole, the status, and the
    /// pruned children and errors when there are any.
    fn snapshot(&self) -> Value {
        let mut out = Map::new();
        out.insert("children".into(), Value::Array(self.children.clone()));
        if !self.status.is_empty() {
            out.insert("status".into(), Value::Object(self.status.clone()));
        }
        if !self.pruned.is_empty() {
            let pruned = self
                .pruned
                .iter()
                .map(|(kind, name)| serde_json::json!({"kind": kind, "name": name}));
            out.insert("pruned".into(), pruned.collect());
        }
        if !self.errors.is_empty() {
            out.insert("errors".into(), self.errors.iter().cloned().collect());
        }
        Value::Object(out)
    }
}

/// Every way `got` falls short of `expect`.
fn check(expect: &Expect, got: &Got) -> Vec<Failure> {
    let mut out = Vec::new();
    let errors = got.errors.join("\n");
    match &expect.error {
        Some(want) if !errors.contains(want.as_str()) => out.push(Failure::new(
            "error",
            format!("expected an error containing {want:?}, got {errors:?}"),
        )),
        None if !errors.is_empty() => {
            out.push(Failure::new("error", format!("unexpected: {errors}")));
        }
        _ => {}
    }
    let named = |o: &Value| {
        (
            o["kind"].as_str().unwrap_or_default().to_string(),
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    };
    for want in &expect.children {
        let (kind, name) = named(want);
        let at = format!("children[{kind} {name}]");
        match got
            .children
            .iter()
            .find(|c| named(c) == (kind.clone(), name.clone()))
        {
            Some(child) => compare(&at, "", want, child, &mut out),
            None => out.push(Failure::new(&at, "expected it rendered, got no such child")),
        }
    }
    for want in &expect.absent {
        let key = (want.kind.clone(), want.name.clone());
        if got.children.iter().any(|c| named(c) == key) {
            let at = format!("children[{} {}]", want.kind, want.name);
            out.push(Failure::new(&at, "expected absent, got it rendered"));
        }
    }
    for want in &expect.pruned {
        let key = (want.kind.clone(), want.name.clone());
        if !got.pruned.contains(&key) {
            let at = format!("pruned[{} {}]", want.kind, want.name);
            out.push(Failure::new(
                &at,
                format!("expected pruned, got pruned {:?}", got.pruned),
            ));
        }
    }
    let status = Value::Object(got.status.clone());
    if let Some(want) = &expect.status {
        compare("status", "", want, &status, &mut out);
    }
    for want in &expect.conditions {
        let kind = want["type"].as_str().unwrap_or_default();
        let at = format!("status.conditions[{kind}]");
        match find_condition(&status, kind) {
            Some(c) => compare(&at, "", want, c, &mut out),
            None => out.push(Failure::new(&at, "expected it, got no such condition")),
        }
    }
    out
}
