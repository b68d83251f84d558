//! The rules `kiln explain` explains with when they are read from the
//! cluster (the rules ConfigMap or the `Rule` resources), through the same
//! sources as `kiln run`: a refused rule is named, the others explained.

use kiln::reload::{RuleResources, RuleSource as _, Version};
use kiln::rules::RuleSet;
use kube::Client;

/// Every Rule resource's rule. A Rule whose current generation is refused
/// is left out and named on stderr (kiln keeps running an earlier
/// generation of it, which the cluster does not keep).
pub async fn from_resources(client: &Client) -> anyhow::Result<RuleSet> {
    let version = RuleResources::new(client.clone()).first().await?;
    Ok(valid(version))
}

/// The rules of `version` (a ConfigMap's or the Rule resources'); when the
/// set is invalid, every problem on stderr and the rules valid on their own,
/// each refused one named.
pub fn valid(version: Version) -> RuleSet {
    match kiln::reload::load(version.clone(), true) {
        Ok(set) => set,
        Err(refusal) => {
            for d in refusal.diagnostics() {
                eprintln!("{d}");
            }
            each_valid(version)
        }
    }
}

/// The rules of `version` that are valid on their own.
fn each_valid(version: Version) -> RuleSet {
    let mut rules = Vec::new();
    for source in version.sources {
        let file = source.file.display().to_string();
        let one = Version {
            sources: vec![source],
            ..Version::default()
        };
        match kiln::reload::load(one, true) {
            Ok(set) => rules.extend(set.rules),
            Err(_) => eprintln!(
                "{file} is refused and left out: kiln keeps running its last good version, if any (the Warning Events on the ConfigMap, or `kubectl describe rule`, say why)"
            ),
        }
    }
    RuleSet { rules }
}
