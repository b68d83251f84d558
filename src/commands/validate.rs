//! `kiln validate PATH...`

use std::process::ExitCode;

use kiln::api::served;
use kiln::rules;

use crate::cli::ValidateArgs;

/// Prints every problem (stderr) or a summary (stdout); exit 1 when invalid.
pub fn run(args: &ValidateArgs) -> anyhow::Result<ExitCode> {
    let mut crds = Vec::new();
    for file in &args.crds {
        crds.extend(super::render::documents(file)?);
    }
    match rules::load_against(&args.paths, &crds) {
        Ok(set) => {
            let files: std::collections::BTreeSet<_> = set.rules.iter().map(|r| &r.file).collect();
            let names: Vec<&str> = set.rules.iter().map(|r| r.name.as_str()).collect();
            let count = |n: usize, word: &str| {
                if n == 1 {
                    format!("1 {word}")
                } else {
                    format!("{n} {word}s")
                }
            };
            println!(
                "ok: {} in {} ({})",
                count(set.rules.len(), "rule"),
                count(files.len(), "file"),
                names.join(", ")
            );
            for warning in set.rules.iter().flat_map(|r| &r.warnings) {
                eprintln!("{warning}");
            }
            for note in unchecked(&set) {
                println!("note: {note}");
            }
            for note in set.rules.iter().flat_map(|r| rules::reach::notes(r)) {
                println!("note: {note}");
            }
            for api in set.rules.iter().filter_map(|r| r.api.as_deref()) {
                if api.conversions.is_some() {
                    println!(
                        "note: {} has several versions: kiln run serves it only with the conversion webhook ({}), and kiln crd prints it only with {}",
                        api.name(),
                        served::RUN_FLAGS,
                        served::CRD_FLAGS
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(diagnostics) => {
            for d in &diagnostics {
                eprintln!("{d}");
            }
            let n = diagnostics.len();
            eprintln!(
                "error: {n} problem{} found; no rule was loaded",
                if n == 1 { "" } else { "s" }
            );
            Ok(ExitCode::from(1))
        }
    }
}

/// Each child kind kiln has no schema for, once: its children are applied
/// as rendered, untyped.
fn unchecked(set: &rules::RuleSet) -> Vec<String> {
    let kinds: std::collections::BTreeSet<String> = set
        .rules
        .iter()
        .flat_map(|r| &r.children)
        .filter(|c| c.typing.node().is_none())
        .map(|c| c.gvk.to_string())
        .collect();
    kinds
        .into_iter()
        .map(|k| format!("{k} is unchecked: kiln has no schema for it (give its CRD with --crd); its children are applied as rendered"))
        .collect()
}
