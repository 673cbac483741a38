//! A window drawn from part of its data: a source that stops reading at one
//! of its limits notes it on the reading thread ([`note`]), and the
//! renderer that asked takes the note after the read ([`take`]) to mark
//! the tile.

use std::cell::Cell;

/// Which limit cut a window's read short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partial {
    /// The most items per window were read (`max_items`): the same window
    /// stops at the same items every time.
    MaxItems,
    /// The time per window ran out (`max_seconds`): another read may get
    /// further.
    MaxSeconds,
}

impl Partial {
    /// Its name in the `X-Tessera-Partial` header and the log.
    pub fn name(self) -> &'static str {
        match self {
            Partial::MaxItems => "max_items",
            Partial::MaxSeconds => "max_seconds",
        }
    }

    /// Whether a tile drawn so is what every later read would draw (and
    /// may be cached): true for `max_items`, false for `max_seconds`.
    pub fn lasts(self) -> bool {
        self == Partial::MaxItems
    }
}

thread_local! {
    static NOTED: Cell<Option<Partial>> = const { Cell::new(None) };
}

/// Notes that the read on this thread stopped at `limit`; a `max_seconds`
/// note outweighs a `max_items` one.
pub fn note(limit: Partial) {
    NOTED.with(|n| {
        if n.get() != Some(Partial::MaxSeconds) {
            n.set(Some(limit));
        }
    });
}

/// The note of the reads on this thread since the last `take`, cleared.
pub fn take() -> Option<Partial> {
    NOTED.with(Cell::take)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transient_limit_outweighs_and_take_clears() {
        assert_eq!(take(), None);
        note(Partial::MaxSeconds);
        note(Partial::MaxItems);
        assert_eq!(take(), Some(Partial::MaxSeconds));
        assert_eq!(take(), None);
        note(Partial::MaxItems);
        assert_eq!(take(), Some(Partial::MaxItems));
    }
}
