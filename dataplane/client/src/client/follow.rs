//! Frames that follow a request's first answer: every frame of a token
//! stream carries the OPEN's request id, which is no longer outstanding
//! once its first frame is answered. A followed id's frames are kept
//! (bounded) instead of being dropped as stale, whichever call reads them,
//! so a stream and other requests can share the client. UDP only: the
//! appliance sends token frames by datagram.

use super::*;

/// Frames kept per followed id before the oldest are dropped (counted
/// stale); a reader that falls this far behind sees a seq gap.
pub const FOLLOW_QUEUE_MAX: usize = 4096;

/// Ids followed at once.
pub const FOLLOWED_MAX: usize = 1024;

impl Client {
    /// Keeps the frames of `request_id` that arrive from now on, for
    /// [`Client::recv_followed`]: call it right after [`Client::send`] of a
    /// token stream's OPEN, and the first frame comes there too (the id
    /// is then no longer outstanding for [`Client::recv`]). Fails with
    /// `TooManyOutstanding` past [`FOLLOWED_MAX`] ids.
    pub fn follow(&mut self, request_id: u64) -> Result<(), ClientError> {
        if !self.followed.contains_key(&request_id) && self.followed.len() >= FOLLOWED_MAX {
            return Err(ClientError::TooManyOutstanding);
        }
        self.followed.entry(request_id).or_default();
        Ok(())
    }

    /// Stops following `request_id`; its kept frames are dropped.
    pub fn unfollow(&mut self, request_id: u64) {
        self.followed.remove(&request_id);
    }

    pub(super) fn keep_followed(&mut self, id: u64, frame: Frame<Vec<u8>>) {
        // Tags as for answers: an error frame is taken unsigned.
        if frame.flags() & flags::AUTHENTICATED != 0
            && frame.kind() != Kind::Error
            && self.key.as_ref().is_some_and(|k| !k.verify(&frame))
        {
            self.stats.bad_tag += 1;
            return;
        }
        let Some(q) = self.followed.get_mut(&id) else {
            return;
        };
        if q.len() >= FOLLOW_QUEUE_MAX {
            q.pop_front();
            self.stats.stale += 1;
        }
        self.stats.answers_copied += 1;
        self.stats.answer_bytes_copied += frame.as_bytes().len() as u64;
        q.push_back(frame);
    }

    fn pop_followed(&mut self, id: u64) -> Option<Result<Response, ClientError>> {
        let f = self.followed.get_mut(&id)?.pop_front()?;
        self.stats.received += 1;
        Some(match f.kind() {
            Kind::Response => Ok(Response::new(f)),
            Kind::Error => Err(server_error(&f)),
            _ => Err(ClientError::Malformed("a followed frame of the wrong kind")),
        })
    }

    /// The next frame of followed `request_id` (see [`Client::follow`]),
    /// waiting up to `wait` (zero: only what has arrived); `Ok(None)` when
    /// none came. An error frame is the server's error. Answers to other
    /// outstanding requests read meanwhile wait for [`Client::recv`].
    pub fn recv_followed(
        &mut self,
        request_id: u64,
        wait: Duration,
    ) -> Result<Option<Response>, ClientError> {
        if !self.followed.contains_key(&request_id) {
            return Err(ClientError::NothingPending);
        }
        let until = Instant::now() + wait;
        loop {
            if let Some(r) = self.pop_followed(request_id) {
                return r.map(Some);
            }
            let left = until.saturating_duration_since(Instant::now());
            let Some(n) = self.receive_udp(!left.is_zero(), Some(left))? else {
                return Ok(None);
            };
            if let Some(ev) = self.classify(Incoming::Udp(n)) {
                // Another request's answer: for the next recv.
                self.ready.push_back(ev);
            }
        }
    }
}
