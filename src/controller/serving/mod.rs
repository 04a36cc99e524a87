//! What the controller serves and how it holds its place: `/metrics`, `/healthz` and `/readyz`,
//! leadership through a Lease, and the researcher API's answers and Watch events.

pub mod api_answers;
pub mod api_events;
pub mod api_requests;
pub mod http;
pub mod leadership;
pub mod lease;
pub mod metrics;
