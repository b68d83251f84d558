//! `kiln schema`

use std::process::ExitCode;

/// Prints the JSON Schema of a rule document.
pub fn run() -> anyhow::Result<ExitCode> {
    println!("{}", kiln::rules::spec::json_schema());
    Ok(ExitCode::SUCCESS)
}
