//! Reading a review's body within the webhook's bounds: refused at once
//! when its declared length is over the largest review, cut off (and
//! refused) as soon as a streamed one grows past it, and every byte read
//! charged to a memory budget shared by all requests, so the reviews in
//! flight together never hold more than it.

use std::sync::Arc;

use http::StatusCode;
use http_body_util::BodyExt;
use hyper::body::{Body as _, Incoming};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The unit the budget counts in.
const UNIT: usize = 1024;

/// The memory shared by the review bodies read at once.
#[derive(Debug, Clone)]
pub struct Budget(Arc<Semaphore>);

impl Budget {
    /// `bytes` of bodies at once.
    pub fn new(bytes: usize) -> Self {
        Self(Arc::new(Semaphore::new(bytes.div_ceil(UNIT).max(1))))
    }

    /// Waits for `units` more of it.
    async fn take(&self, units: usize) -> Option<OwnedSemaphorePermit> {
        let units = u32::try_from(units).ok()?;
        self.0.clone().acquire_many_owned(units).await.ok()
    }
}

/// Why a body was not read.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// Declared or grown larger than the largest review.
    #[error("the review is larger than the largest one this webhook reads ({limit} bytes)")]
    TooLarge {
        /// The bound.
        limit: usize,
    },
    /// The connection failed while sending it.
    #[error("the review's body could not be read: {0}")]
    Read(#[source] hyper::Error),
}

impl Refused {
    /// The HTTP status answering it.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Read(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// A body read whole, with the share of the budget it holds.
pub struct Read {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// Its charge: hold it as long as the bytes (or the answer made of them).
    pub charge: Option<OwnedSemaphorePermit>,
}

/// Reads `body` if it is at most `limit` bytes, charging `budget` for each
/// piece as it arrives (so a client declaring a large body and sending
/// little holds little). Nothing is read when the declared length is over.
pub async fn read(mut body: Incoming, limit: usize, budget: &Budget) -> Result<Read, Refused> {
    let too_large = Refused::TooLarge { limit };
    let declared = body.size_hint().exact();
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large);
    }
    let mut read = Read {
        bytes: Vec::new(),
        charge: None,
    };
    // Room for what is declared, untouched (so not resident) until read.
    if let Some(n) = declared.and_then(|n| usize::try_from(n).ok()) {
        read.bytes.reserve_exact(n);
    }
    let mut charged = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(Refused::Read)?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if read.bytes.len() + data.len() > limit {
            return Err(too_large);
        }
        // Charged in whole units of what has arrived so far.
        let due = (read.bytes.len() + data.len()).div_ceil(UNIT) - charged;
        if due > 0 {
            let Some(more) = budget.take(due).await else {
                return Err(too_large);
            };
            charged += due;
            match &mut read.charge {
                Some(charge) => charge.merge(more),
                None => read.charge = Some(more),
            }
        }
        read.bytes.extend_from_slice(&data);
    }
    Ok(read)
}
