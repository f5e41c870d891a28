//! What went wrong so far for one call (see [`Troubles`]).

/// The parts of a call's state that only a call in trouble uses (a lost
/// connection, a refusal, the recovery ladder): kept apart and allocated
/// on the first trouble, so a call that goes through first time carries
/// none of it.
///
/// Private to the call's file, changed through the call's methods. The
/// subscribe is the recovery ladder's (`core/call_machine.rs` sends it,
/// `core/inbound/verdicts.rs` marks it refused); the rejections are only
/// counted and read on a loss (`core/link_events.rs`).
#[derive(Debug, Default)]
pub(super) struct Troubles {
    /// Subscribed with history on this connection generation.
    subscribed_on: Option<u64>,
    pub(super) subscribe_request: Option<String>,
    subscribe_refused: bool,
    /// Connections the runtime closed with a request-level code while this
    /// call's attempt was written and unanswered: (count, last code, reason,
    /// whether the last one happened with no other request outstanding).
    pub(super) rejections: (u32, u16, String, bool),
}

impl Troubles {
    /// Whether a subscribe may be sent on connection `generation`: none
    /// was refused, and none was sent on that connection.
    pub(super) fn may_subscribe_on(&self, generation: u64) -> bool {
        !self.subscribe_refused && self.subscribed_on != Some(generation)
    }

    /// A subscribe with history goes out on connection `generation` as
    /// `request`.
    pub(super) fn subscribing(&mut self, generation: u64, request: String) {
        self.subscribed_on = Some(generation);
        self.subscribe_request = Some(request);
    }

    /// The runtime refused the subscribe: the ladder re-sends instead,
    /// from now on.
    pub(super) fn subscribe_refused(&mut self) {
        self.subscribe_request = None;
        self.subscribe_refused = true;
    }

    /// A connection closed with request-level `code` while an attempt was
    /// written and unanswered (`alone`: with no other request
    /// outstanding). Returns how many such closes the call has met.
    pub(super) fn rejected(&mut self, code: u16, reason: String, alone: bool) -> u32 {
        let rejections = &mut self.rejections;
        rejections.0 += 1;
        rejections.1 = code;
        rejections.2 = reason;
        rejections.3 = alone;
        rejections.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscribe_goes_out_once_per_connection_and_never_after_a_refusal() {
        let mut troubles = Troubles::default();
        assert!(troubles.may_subscribe_on(1));
        troubles.subscribing(1, "sub-1".into());
        assert_eq!(troubles.subscribe_request.as_deref(), Some("sub-1"));
        assert!(
            !troubles.may_subscribe_on(1),
            "one subscribe per connection"
        );
        assert!(
            troubles.may_subscribe_on(2),
            "a new connection may subscribe"
        );
        troubles.subscribing(2, "sub-2".into());
        troubles.subscribe_refused();
        assert_eq!(
            troubles.subscribe_request, None,
            "the refused request is forgotten"
        );
        assert!(!troubles.may_subscribe_on(3), "refused once, never again");
    }

    #[test]
    fn rejections_are_counted_and_keep_the_last_close() {
        let mut troubles = Troubles::default();
        assert_eq!(troubles.rejected(1009, "too big".into(), false), 1);
        assert_eq!(troubles.rejected(1003, "unsupported".into(), true), 2);
        assert_eq!(troubles.rejections, (2, 1003, "unsupported".into(), true));
    }
}
