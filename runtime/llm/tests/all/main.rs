//! The integration tests of troupe-llm, gathered in one test binary.

mod decoding;
mod provider_fixtures;
mod provider_http;
mod provider_responses;
mod provider_scripted;
