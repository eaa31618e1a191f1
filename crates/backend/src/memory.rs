//! In-memory backend (to be implemented).
