//! Where payload bytes get copied.

/// Where payload bytes get copied, each with its reason. The design copies
/// none; a path that must copy says so here and is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum CopyPath {
    /// The echo model answers with its inputs: a copy by definition.
    EchoReply = 0,
    /// A model handler whose input or output did not stay in place.
    #[default]
    ModelInput = 1,
    /// A request forwarded to a peer through a transport without a
    /// send-from-receive-buffer path (one copy into a transmit buffer).
    Forward = 2,
    /// A peer's answer relayed to its client the same way.
    Relay = 3,
}

/// How many copy paths there are.
pub const COPY_PATHS: usize = 4;

impl CopyPath {
    /// Every path, in index order.
    pub const ALL: [CopyPath; COPY_PATHS] = [
        CopyPath::EchoReply,
        CopyPath::ModelInput,
        CopyPath::Forward,
        CopyPath::Relay,
    ];

    /// Name in stats and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            CopyPath::EchoReply => "echo_reply",
            CopyPath::ModelInput => "model_tensor",
            CopyPath::Forward => "forward",
            CopyPath::Relay => "relay",
        }
    }

    /// Why the path copies.
    pub fn reason(self) -> &'static str {
        match self {
            CopyPath::EchoReply => "echo answers with its inputs",
            CopyPath::ModelInput => "tensor not bound in place by the runtime",
            CopyPath::Forward => "transport cannot send from the receive buffer",
            CopyPath::Relay => "transport cannot send from the receive buffer",
        }
    }
}
