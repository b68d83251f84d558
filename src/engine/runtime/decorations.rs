//! Sending a planned decoration: one server-side apply, conditioned on the
//! target's uid, so a target deleted and recreated meanwhile is not
//! decorated by mistake.

use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};

use crate::engine::decision::decorate::Decoration;
use crate::gate::{self, Warrant};

/// What became of a decoration sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// The target holds it.
    Applied,
    /// The target is gone (deleted since kiln saw it): nothing was written.
    Gone,
}

/// Applies one decoration as its decorator's field manager. Its body holds
/// the target's uid as kiln saw it ([`apply_body`]), so a target deleted
/// meanwhile is never created again: that answer is [`Sent::Gone`].
pub async fn send(api: &Api<DynamicObject>, d: &Decoration) -> Result<Sent, kube::Error> {
    let mut pp = PatchParams::apply(&d.manager);
    pp.force = d.force;
    match gate::patch(api, &d.name, &pp, &Patch::Apply(&d.body), Warrant::Named).await {
        Ok(_) => Ok(Sent::Applied),
        Err(kube::Error::Api(s)) if s.code == 404 || uid_mismatch(&s) => Ok(Sent::Gone),
        Err(e) => Err(e),
    }
}

/// Whether the API server refused an apply because the object with the
/// uid it names no longer exists (it then creates nothing).
fn uid_mismatch(status: &kube::core::Status) -> bool {
    status.code == 409 && status.message.contains("uid mismatch")
}
