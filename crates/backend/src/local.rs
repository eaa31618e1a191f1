//! Local-directory backend (to be implemented).
