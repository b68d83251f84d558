//! `kiln schema`

use std::process::ExitCode;

use crate::cli::SchemaArgs;

/// Prints the JSON Schema of a rule document, or of a test file.
pub fn run(args: &SchemaArgs) -> anyhow::Result<ExitCode> {
    if args.tests {
        println!("{}", super::test::json_schema());
    } else {
        println!("{}", kiln::rules::spec::json_schema());
    }
    Ok(ExitCode::SUCCESS)
}
