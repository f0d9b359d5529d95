//! The integration tests of troupe-tools, gathered in one test binary.

mod security_tools;
mod tools_bash;
mod tools_files;
mod tools_search;
mod tools_support;
mod tools_web;
