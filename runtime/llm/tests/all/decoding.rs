//! Feeding a body to a decoder the way a network would: in chunks of a
//! chosen size, collected with a bound on how long decoding may take.

use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use troupe_llm::{EventStream, ProviderError, StreamEvent};

/// How long one decoding may take before the test fails.
const TEST_TIMEOUT: Duration = Duration::from_secs(10);

/// `bytes` as a stream of chunks of `size` bytes (the last one shorter).
pub(crate) fn chunked(
    bytes: Vec<u8>,
    size: usize,
) -> impl Stream<Item = Result<Bytes, ProviderError>> + Send + 'static {
    let chunks: Vec<Result<Bytes, ProviderError>> = bytes
        .chunks(size.min(bytes.len().max(1)))
        .map(|chunk| Ok(Bytes::copy_from_slice(chunk)))
        .collect();
    futures::stream::iter(chunks)
}

/// Every item of `stream`, failing the test past [`TEST_TIMEOUT`].
pub(crate) async fn collect(stream: EventStream) -> Vec<Result<StreamEvent, ProviderError>> {
    tokio::time::timeout(TEST_TIMEOUT, stream.collect::<Vec<_>>())
        .await
        .expect("decoding finished")
}
