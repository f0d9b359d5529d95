//! The errors of the cluster connection.

/// What went wrong talking to the cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The settings are unusable (a URL that does not parse, a bad node name).
    #[error("{0}")]
    Settings(String),
    /// The node could not connect: the server is unreachable or refused the
    /// credentials. The URL is masked.
    #[error("cannot connect to the cluster at {url}: {cause}")]
    Connect {
        /// The server's URL without its secret.
        url: String,
        /// Why.
        cause: String,
    },
    /// The server answers but offers no JetStream.
    #[error("the NATS server at {url} has no JetStream (start it with `-js`): {cause}")]
    NoJetStream {
        /// The server's URL without its secret.
        url: String,
        /// What the server said.
        cause: String,
    },
    /// A stream, consumer or bucket could not be created or does not have
    /// the configuration the cluster needs.
    #[error("the cluster's {what} could not be set up: {cause}")]
    Setup {
        /// Which one.
        what: String,
        /// Why.
        cause: String,
    },
    /// A request to the server failed.
    #[error("the cluster did not take the request ({what}): {cause}")]
    Request {
        /// What was asked.
        what: String,
        /// Why.
        cause: String,
    },
    /// A message could not be written.
    #[error("a cluster message could not be written: {0}")]
    Encode(#[from] serde_json::Error),
}

impl ClusterError {
    /// A failed request.
    pub(crate) fn request(what: impl Into<String>, cause: impl std::fmt::Display) -> Self {
        Self::Request {
            what: what.into(),
            cause: cause.to_string(),
        }
    }

    /// A failed set-up step.
    pub(crate) fn setup(what: impl Into<String>, cause: impl std::fmt::Display) -> Self {
        Self::Setup {
            what: what.into(),
            cause: cause.to_string(),
        }
    }
}
