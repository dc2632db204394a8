//! The one-kind schema the recording and border-frame targets build their valid inputs with.
//! Include with `#[path = "../common/thing.rs"] mod thing;`.

use std::sync::Arc;

use volley::protocol::quant::Bits;
use volley::protocol::snapshot::Schema;

volley::replicated! {
    /// A thing.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Thing {
        /// Where.
        pub x: u32 = Bits(12),
        /// What.
        pub y: u8 = Bits(5),
    }
}

/// A schema of `Thing` alone.
pub fn schema() -> Arc<Schema> {
    let mut s = Schema::new();
    s.register::<Thing>().expect("one kind");
    Arc::new(s)
}
