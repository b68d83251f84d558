//! `kiln crd --rules DIR`: the CustomResourceDefinitions rules define.

use std::process::ExitCode;

use crate::cli::CrdArgs;

/// Prints each rule-defined API's CRD as a YAML document, in rule order.
pub fn run(args: &CrdArgs) -> anyhow::Result<ExitCode> {
    let set = super::render::load_rules(&args.rules)?;
    let apis: Vec<_> = set.rules.iter().filter_map(|r| r.api.as_ref()).collect();
    if apis.is_empty() {
        eprintln!("note: no rule defines an API (spec.api); nothing to print");
    }
    for api in apis {
        print!("---\n{}", serde_norway::to_string(&api.crd)?);
    }
    Ok(ExitCode::SUCCESS)
}
