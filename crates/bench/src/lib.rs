//! Placeholder until the load generator lands.
